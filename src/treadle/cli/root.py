"""The root typer app; each layer's commands register themselves from their own module
(``treadle.cli`` imports the ones a process needs).

Start-up is part of the interface: ``treadle --help``, ``--version`` and every command's help
load typer and the command modules only. A command module imports at its top what its option
types need (typer, the standard library, plain enums) and the rest inside the command that
uses it; tests/cli/test_startup.py keeps LiteLLM, mcp, FastAPI, uvicorn and Ray out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer import _click as click
from typer.core import TyperArgument, TyperGroup, TyperOption

import treadle

METAVARS = {
    "store": "URL",
    "base-url": "URL",
    "ray-address": "ADDRESS",
    "workspace": "DIR",
    "workspace-root": "DIR",
    "work-dir": "DIR",
    "mount-ro": "PATH",
    "script": "FILE",
    "api-key-file": "FILE",
    "output": "FILE",
    "model": "NAME",
    "sandbox-user": "USER",
    "conversation": "ID",
    "head": "ID",
    "id": "ID",
    "eval-id": "ID",
    "reason": "TEXT",
    "title": "TEXT",
    "host": "HOST",
    "port": "PORT",
    "hooks": "FILE",
    "mcp-config": "FILE",
    "api-key": "KEY",
    "allowed-host": "HOST",
    "allow-base-url": "URL",
    "repos": "DIR",
    "into": "DIR",
    "price-per-mtok": "IN,OUT",
    "test-command": "COMMAND",
}
"""What an option's value is called in help and usage, by its long name; any other takes a
name from its type (``N`` for a number) or its own name in capitals, as argparse does."""


def name_metavars(command: click.Command) -> click.Command:
    """``command`` with a value name for each argument and option that has none (typer's own
    are types: ``<str>``, ``<int range>``, and an argument in lower case), so its help reads
    as the README does: ``--store URL``, ``--max-steps N``, ``TASK``."""
    for param in command.params:
        if param.metavar is not None:
            continue
        if isinstance(param, TyperArgument):  # typer adds the brackets and dots itself
            param.metavar = (param.name or "value").upper()
            # The name says what the value is; typer would add its type after it (<str>).
            param.display_type_rich = _no_type  # type: ignore[method-assign]
            continue
        if getattr(param, "nargs", 1) != 1:
            continue
        if isinstance(param, TyperOption) and not param.is_bool_flag:
            described = param.type_descriptor
            if described.is_choice:
                continue  # typer shows the choices themselves
            long = max(param.opts, key=len).lstrip("-")
            number = described.annotation in (int, float) or described.is_ranged
            named = "N" if number else long.upper().replace("-", "_")
            param.metavar = METAVARS.get(long, named)
    return command


def _no_type(ctx: click.Context) -> None:
    """An argument's type as its help line shows it: not at all (see ``name_metavars``)."""
    return None


class _Group(TyperGroup):
    """Lists each command with the first sentence of its help whole, wrapped under it (click
    cuts it to what fits on the line, ending in "..."); names the values of each command's
    options and arguments (``name_metavars``)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        return None if command is None else name_metavars(command)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=_WHOLE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


_WHOLE = 10_000
"""A short-help length no first sentence reaches."""


def command_group(**options: Any) -> typer.Typer:
    """A typer app for ``treadle`` or one of its command groups: help and usage errors drawn as
    plain text (click's). typer's boxed help imports rich's big parts (markdown, syntax,
    tracebacks: 50 ms of every start-up) to draw them; plain help also reads well in a pipe."""
    return typer.Typer(rich_markup_mode=None, cls=_Group, **options)


app = command_group(
    name="treadle",
    help="Treadle: a durable, branchable, auditable event stream for AI agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every sub-command inherits it
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"treadle {treadle.__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """Treadle: a durable, branchable, auditable event stream for AI agents."""


def main(args: Sequence[str] | None = None) -> None:
    app(args=None if args is None else list(args), prog_name="treadle")  # `python -m` too
