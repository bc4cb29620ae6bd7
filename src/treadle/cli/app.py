"""The root typer app; each layer's commands register themselves from their own module."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="treadle",
    help="Treadle: a durable, branchable, auditable event stream for AI agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def main() -> None:
    app()
