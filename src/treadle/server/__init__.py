"""The agent server (FastAPI + uvicorn): REST + WebSocket over the store; ``create_app``."""

from treadle.server.app import create_app

__all__ = ["create_app"]
