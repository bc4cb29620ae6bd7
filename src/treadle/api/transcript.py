"""The transcript page the server serves (``GET .../transcript``): items of ``events.view``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class TranscriptPage(BaseModel):
    """Items ``offset``..``offset + len(items)`` of the transcript of the path to ``head``
    (``total`` items in all); each item as ``events.view.transcript`` makes it."""

    head: str | None
    total: int
    offset: int
    items: list[dict[str, Any]]
