"""The tests' real server process (the package's own helper)."""

from treadle.server.process import ServerProcess, free_port

__all__ = ["ServerProcess", "free_port"]
