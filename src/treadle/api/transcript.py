"""The transcript page the server serves (``GET .../transcript``): items of ``events.view``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class TranscriptPage(BaseModel):
    """The newest transcript items of the path to ``head`` below a seq cursor, each as
    ``events.view.transcript`` makes it; ``next_before_seq`` asks for older ones (None: the
    path's start is reached)."""

    head: str | None
    items: list[dict[str, Any]]
    next_before_seq: int | None
