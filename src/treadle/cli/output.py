"""How every command ends: the exit codes of the README, one-line errors on stderr, JSON on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer

EXIT_OK = 0
EXIT_VIOLATIONS = 1
EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``message`` on stderr as one line (never a traceback) and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def print_json(value: Any) -> None:
    """Pretty JSON on stdout, UTF-8 kept readable."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
