"""The body of every error answer of the agent server: ``{"error": {"code", "message"}}``
(plus details some codes add)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # details some codes add (e.g. a limit)

    code: str
    """What went wrong, for programs: ``not_found``, ``too_many_running``, ..."""
    message: str
    """What went wrong and what to do, for people."""


class ErrorBody(BaseModel):
    error: ErrorDetail
