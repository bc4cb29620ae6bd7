"""The ``treadle`` command line: one typer app, sub-commands grouped by layer."""

from treadle.cli import (  # noqa: F401  (importing registers their commands)
    bench_commands,
    chat_commands,
    confirm_commands,
    conversations_commands,
    core_commands,
    eval_commands,
    jsonl_commands,
    openhands_commands,
    replay_commands,
    run_commands,
    serve_commands,
    show_commands,
    skills_commands,
    snapshot_commands,
    store_commands,
)
from treadle.cli.app import app, main

__all__ = ["app", "main"]
