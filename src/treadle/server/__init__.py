"""The agent server (FastAPI + uvicorn): REST + WebSocket over the store; ``create_app``."""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Lazy: ``treadle.server.limits`` (read by the CLI) must not load FastAPI and the runtime.
    if name == "create_app":
        from treadle.server.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
