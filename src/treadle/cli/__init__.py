"""The ``treadle`` command line: one typer app, sub-commands grouped by layer."""

from treadle.cli import bench_commands, core_commands  # noqa: F401  (register their commands)
from treadle.cli.app import app, main

__all__ = ["app", "main"]
