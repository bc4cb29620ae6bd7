"""The command line starts without its heavy dependencies (issue 21): ``treadle --help``,
``--version``, ``-h`` and every sub-command's help import neither LiteLLM, mcp, FastAPI, uvicorn
nor Ray, nor the runtime, read in the ``-X importtime`` trace of a real ``python -m treadle``.
Speed itself is measured by ``treadle bench cli``, not here."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

HEAVY = ("litellm", "openai", "mcp", "fastapi", "uvicorn", "ray", "starlette", "httpx")
"""Top-level packages no help may load (openai: the OpenAI-compatible model client; httpx:
LiteLLM's and the client's HTTP)."""
NOT_FOR_HELP = ("treadle.runtime", "treadle.server", "treadle.eval", "treadle.store")
"""Treadle's own layers a help screen never needs."""
LIGHT = frozenset({"treadle.server", "treadle.server.limits"})
"""Except these: the server's limits are plain numbers (serve's defaults), its package lazy."""

_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| (\s*)(\S+)$")


def imported_modules(*args: str, exit_code: int = 0) -> tuple[list[str], str]:
    """The modules ``python -X importtime -m treadle ARGS`` imported, and its stdout."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "treadle", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
    )
    assert done.returncode == exit_code, done.stderr[-2000:]
    modules = [m.group(2) for line in done.stderr.splitlines() if (m := _IMPORTED.match(line))]
    assert "treadle.cli" in modules, "the trace lists no module: -X importtime changed?"
    return modules, done.stdout


def heavy_in(modules: list[str]) -> list[str]:
    return sorted(
        {
            name
            for name in modules
            if name.split(".")[0] in HEAVY
            or (
                name not in LIGHT
                and any(name == layer or name.startswith(layer + ".") for layer in NOT_FOR_HELP)
            )
        }
    )


def test_the_trace_would_show_a_heavy_import() -> None:
    """The check can fail: a command that does load the store shows it in the same trace."""
    modules, _ = imported_modules(
        "store", "info", "--store", "sqlite:////nonexistent/x.db", exit_code=2
    )
    assert "treadle.store.urls" in heavy_in(modules)


@pytest.mark.parametrize("args", [("--help",), ("-h",), ("--version",)])
def test_the_root_help_and_version_import_nothing_heavy(args: tuple[str, ...]) -> None:
    modules, out = imported_modules(*args)
    assert heavy_in(modules) == []
    assert out.strip()


_EVERY_HELP = """
import sys, typer.main
from treadle.cli import app

root = typer.main.get_command(app)
paths = []

def walk(command, path):
    children = getattr(command, "commands", None)
    if children:
        for name, child in children.items():
            walk(child, (*path, name))
    else:
        paths.append(path)

walk(root, ())
for path in paths:
    try:
        app([*path, "--help"], standalone_mode=False)
    except SystemExit:
        pass
    print("HELP", " ".join(path))
print("MODULES", " ".join(sorted(sys.modules)))
"""


@pytest.mark.parametrize("args", [("run", "--help"), ("eval", "run", "-h"), ("serve", "--help")])
def test_a_sub_command_help_imports_nothing_heavy(args: tuple[str, ...]) -> None:
    modules, out = imported_modules(*args)
    assert heavy_in(modules) == []
    assert "Usage" in out


def test_every_sub_command_help_imports_nothing_heavy() -> None:
    """Every command's help, one after the other in one process (typer's own command tree),
    then what that process holds."""
    done = subprocess.run(
        [sys.executable, "-c", _EVERY_HELP],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shown = [line[5:] for line in done.stdout.splitlines() if line.startswith("HELP ")]
    assert len(shown) > 20
    assert "run" in shown
    assert "eval run" in shown
    assert "log" in shown
    assert done.stdout.count("Usage") >= len(shown)
    modules = next(line for line in done.stdout.splitlines() if line.startswith("MODULES "))
    assert heavy_in(modules.split()[1:]) == []
    # Values named as the README names them (--store URL, --max-steps N, TASK), not typer's
    # types (<str>, <int range>) or an argument in lower case.
    lines = done.stdout.splitlines()
    typed = [line for line in lines if _TYPE_LABEL.search(line)]  # options' and arguments'
    assert typed == []
    usages = [line for line in lines if line.startswith("Usage:")]
    assert [line for line in usages if re.search(r"[\[{][a-z_]+[\]}]", line)] == []
    assert "  --store URL " in done.stdout
    assert "  --max-steps N " in done.stdout
    assert "  CONVERSATION  " in done.stdout  # an argument's line: its name, then its help


_TYPE_LABEL = re.compile(r"<(str|int|float|path|file|int range|float range)>")


def test_a_reading_command_loads_no_runtime_when_nothing_is_left_to_sweep(tmp_path) -> None:
    """``treadle conversations`` on a store: the store, never the runtime's tools or mcp
    (the sweep of killed runs' folders loads them only when such a folder is there)."""
    from treadle.store.urls import open_store

    url = f"sqlite:///{tmp_path / 's.db'}"
    open_store(url).close()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "treadle", "conversations", "--store", url],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = [m.group(2) for line in done.stderr.splitlines() if (m := _IMPORTED.match(line))]
    assert "treadle.store.sqlite" in modules
    assert not [m for m in modules if m.startswith(("treadle.runtime.tools", "mcp", "litellm"))]


def test_version_names_the_package_version() -> None:
    import treadle

    _, out = imported_modules("--version")
    assert out.strip() == f"treadle {treadle.__version__}"


def test_help_shows_the_defaults_that_live_in_heavy_modules() -> None:
    """The help repeats two values so it need not load their modules: they must agree."""
    from treadle.cli.run_commands import WORKSPACE_SETTINGS_SHOWN
    from treadle.cli.serve_commands import (
        ARCHIVE_BYTES_SHOWN,
        ARCHIVE_MEMBERS_SHOWN,
        DEFAULT_SERVER_USER_SHOWN,
    )
    from treadle.cli.store_options import TERMINAL_FOLDER_PREFIX
    from treadle.runtime.hooks import WORKSPACE_SETTINGS
    from treadle.runtime.tools.terminal_folders import PREFIX
    from treadle.runtime.workspace.sandbox_user import DEFAULT_SERVER_USER
    from treadle.store.openhands.transfer import ArchiveLimits

    assert WORKSPACE_SETTINGS_SHOWN == WORKSPACE_SETTINGS
    assert TERMINAL_FOLDER_PREFIX == PREFIX
    assert str(ArchiveLimits.max_bytes) == ARCHIVE_BYTES_SHOWN
    assert str(ArchiveLimits.max_members) == ARCHIVE_MEMBERS_SHOWN
    assert DEFAULT_SERVER_USER_SHOWN == DEFAULT_SERVER_USER


def _registering_modules(command: object) -> set[str]:
    """The modules whose functions make up ``command`` (a click command or group)."""
    children = getattr(command, "commands", None)
    if children:
        return set().union(*(_registering_modules(child) for child in children.values()))
    callback = getattr(command, "callback", None)
    return {callback.__module__} if callback is not None else set()


def test_every_command_is_mapped_to_the_modules_that_register_it() -> None:
    """``treadle.cli.COMMAND_MODULES`` is what a process loads for a command: a command it
    forgot would be "No such command" once run alone, a module it forgot a missing option."""
    import typer.main

    from treadle.cli import ALL_MODULES, COMMAND_MODULES, app

    root = typer.main.get_command(app)
    assert set(COMMAND_MODULES) == set(root.commands)  # type: ignore[attr-defined]
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        needed = {module.removeprefix("treadle.cli.") for module in _registering_modules(command)}
        assert needed <= set(COMMAND_MODULES[name]), name
    assert set(ALL_MODULES) == {m for modules in COMMAND_MODULES.values() for m in modules}


@pytest.mark.parametrize(
    ("args", "module", "other"),
    [
        (("log", "--help"), "treadle.cli.store_commands", "treadle.cli.run_commands"),
        (("run", "--help"), "treadle.cli.run_commands", "treadle.cli.eval_commands"),
        (("eval", "run", "-h"), "treadle.cli.eval_commands", "treadle.cli.bench_commands"),
    ],
)
def test_a_command_loads_its_own_module_and_not_the_others(
    args: tuple[str, ...], module: str, other: str
) -> None:
    modules, out = imported_modules(*args)
    assert module in modules
    assert other not in modules
    assert f"Usage: treadle {' '.join(args[:-1])}" in out


def test_the_version_loads_no_command_module() -> None:
    modules, out = imported_modules("--version")
    assert out.startswith("treadle ")
    assert not [m for m in modules if m.startswith("treadle.cli.") and m.endswith("_commands")]
