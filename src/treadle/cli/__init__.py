"""The ``treadle`` command line: one typer app (``cli.root``), its commands registered by the
modules of their layer.

A process imports only the modules of the command it was asked for (``main``): ``treadle log``
never loads the runtime's option tables nor builds the other 40 commands' parameters, which
typer does for every command it knows. The root help, ``--version`` aside, and an unknown name
load them all (the help lists every command; typer suggests the nearest name).
``COMMAND_MODULES`` says which module registers what; tests/cli/test_startup.py keeps it
complete. ``from treadle.cli import app`` gives the whole app.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "run": ("run_commands",),
    "demo": ("run_commands",),
    "chat": ("chat_commands",),
    "confirm": ("confirm_commands",),
    "reject": ("confirm_commands",),
    "log": ("store_commands",),
    "conversations": ("conversations_commands",),
    "audit": ("core_commands",),
    "path": ("core_commands",),
    "project": ("core_commands",),
    "schema": ("core_commands",),
    "replay": ("replay_commands",),
    "serve": ("serve_commands",),
    "show": ("show_commands",),
    "delete": ("show_commands",),
    "skills": ("skills_commands",),
    "switch": ("snapshot_commands",),
    "fork": ("snapshot_commands",),
    "restore": ("snapshot_commands",),
    "diff": ("snapshot_commands",),
    "snapshots": ("snapshot_commands",),
    "bench": ("bench_commands", "store_commands"),
    "import": ("jsonl_commands", "openhands_commands"),
    "export": ("openhands_commands", "show_commands", "store_commands"),
    "store": ("store_commands",),
    "eval": ("eval_commands",),
}
"""Each top-level command (or group) and the modules (under ``treadle.cli``) that register it
and its sub-commands."""

ALL_MODULES = (
    "bench_commands",
    "chat_commands",
    "confirm_commands",
    "conversations_commands",
    "core_commands",
    "eval_commands",
    "jsonl_commands",
    "openhands_commands",
    "replay_commands",
    "run_commands",
    "serve_commands",
    "show_commands",
    "skills_commands",
    "snapshot_commands",
    "store_commands",
)
"""Every command module, in the order that gives the root help its order of commands."""


def modules_for(args: Sequence[str]) -> tuple[str, ...]:
    """The command modules a process given ``args`` (argv after the program) needs. The root's
    only options (``--version``, ``-h``/``--help``) take no value, so the first word that is not
    an option names the command."""
    name = next((arg for arg in args if not arg.startswith("-")), None)
    if name is None:
        return () if "--version" in args else ALL_MODULES
    return COMMAND_MODULES.get(name, ALL_MODULES)


def load_commands(modules: Sequence[str] = ALL_MODULES) -> typer.Typer:
    """The root app with (at least) the commands of ``modules`` registered."""
    for module in modules:
        # The import statement's path (not importlib.import_module): it is the one that
        # ``python -X importtime`` traces, which tests/cli/test_startup.py reads.
        __import__(f"treadle.cli.{module}")
    from treadle.cli.root import app

    return app


def main(args: Sequence[str] | None = None) -> None:
    """Run the command line on ``args`` (default: ``sys.argv[1:]``)."""
    import sys

    given = list(sys.argv[1:] if args is None else args)
    load_commands(modules_for(given))
    from treadle.cli.root import main as run_root

    run_root(given)


def __getattr__(name: str) -> object:
    # ``from treadle.cli import app``: the whole app, every command registered.
    if name == "app":
        return load_commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ALL_MODULES", "COMMAND_MODULES", "app", "load_commands", "main", "modules_for"]
