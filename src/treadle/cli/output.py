"""How every command ends: the exit codes of the README, one-line errors on stderr, JSON on stdout."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import typer

if TYPE_CHECKING:  # rich is imported by the commands that print tables, not by every one
    from rich.console import Console

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


def paged(console: Console) -> contextlib.AbstractContextManager[Any]:
    """Print through a pager when ``console`` is a terminal (``$PAGER``, else ``less``; as git
    does, ``LESS=FRX`` unless set: a page that fits the screen is printed and left, colours
    kept); elsewhere (a pipe, a file) straight out. ``PAGER=cat`` turns it off."""
    if not console.is_terminal:
        return contextlib.nullcontext()
    os.environ.setdefault("LESS", "FRX")
    return console.pager(styles=True)
