"""The ``treadle`` command line: one typer app, sub-commands grouped by layer."""

from treadle.cli import core_commands  # noqa: F401  (registers audit, path, project, schema)
from treadle.cli.app import app, main

__all__ = ["app", "main"]
