"""The package's layers, as docs/architecture.md draws them: each layer imports only the layers
below it. Read from the source (every ``import`` statement, also inside functions and
``TYPE_CHECKING`` blocks), so a late import cannot hide an upward dependency; and checked once
at run time: loading the runtime's conversation loads no wire model."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import treadle

PACKAGE = Path(treadle.__file__).resolve().parent

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "events": ("runtime", "store", "server", "client", "cli", "api", "eval", "bench", "data"),
    "data": ("runtime", "store", "server", "client", "cli", "api", "eval", "bench"),
    "store": ("runtime", "server", "client", "cli", "api", "eval", "bench"),
    "runtime": ("server", "client", "cli", "api", "eval", "bench"),
    "eval": ("server", "client", "cli", "api", "bench"),
    "api": ("runtime", "store", "server", "cli", "eval", "bench"),
    "client": ("runtime", "store", "server", "cli", "eval", "bench"),
}
"""For each layer, the top-level ``treadle`` packages its modules must never import."""


def imported_modules(path: Path, package_dir: Path) -> set[str]:
    """Every absolute module name ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    package = parts[:-1]  # what "." means, in a module as in an __init__
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join((*base, node.module) if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def layer_violations(layer: str, package_dir: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted((package_dir / layer).rglob("*.py")):
        for module in imported_modules(path, package_dir):
            top = module.split(".")
            if len(top) >= 2 and top[0] == "treadle" and top[1] in FORBIDDEN[layer]:
                found.append(f"{path.relative_to(package_dir)} imports {module}")
    return sorted(set(found))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    assert layer_violations(layer) == []


def test_the_scan_sees_a_late_relative_import(tmp_path: Path) -> None:
    # The scanner itself: an upward import inside a function, written relatively, is found.
    package_dir = tmp_path / "treadle"
    (package_dir / "runtime" / "tools").mkdir(parents=True)
    probe = package_dir / "runtime" / "tools" / "probe.py"
    probe.write_text("def late():\n    from ...api import requests\n", encoding="utf-8")
    assert layer_violations("runtime", package_dir) == [
        "runtime/tools/probe.py imports treadle.api",
        "runtime/tools/probe.py imports treadle.api.requests",
    ]


def test_loading_a_conversation_loads_no_wire_model() -> None:
    code = (
        "import json, sys\nimport treadle.runtime.conversation\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('treadle.'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.splitlines()[-1])
    assert "treadle.runtime.conversation" in loaded
    assert [m for m in loaded if m.startswith(("treadle.api", "treadle.server"))] == []
