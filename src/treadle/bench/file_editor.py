"""``treadle bench runtime``'s file editor figures: what a confined call costs (its open, check and read beside a plain one).

The editor opens every path below the workspace folder's descriptor (``workspace.confined``:
openat2, no symlink followed, the type checked on the opened file). Its calls are timed
through the tool set against the same file work done the way the editor did it before, by
path in this process (``resolve``, then ``stat``, ``read_bytes`` and a write by path): the
difference is what confinement (and the tool call around it) costs per call. The two kinds
alternate, so a busy machine slows both alike."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from treadle.runtime.secrets import Secrets
from treadle.runtime.tools import FileEditorTool, ToolContext, ToolSet
from treadle.runtime.workspace import LocalWorkspace

_TEXT = "".join(f"line {number} of the benchmark file\n" for number in range(200))


def _by_path_view(workspace: LocalWorkspace, name: str) -> str:
    path = workspace.resolve(name)
    if path.is_dir() or not path.exists():
        raise AssertionError(name)
    path.stat()
    text = path.read_bytes().decode("utf-8")
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.split("\n"), 1))


def _by_path_edit(workspace: LocalWorkspace, name: str) -> None:
    path = workspace.resolve(name)
    text = path.read_bytes().decode("utf-8")
    _write_by_path(path, text.replace("line 100 ", "LINE 100 ").encode("utf-8"))
    _write_by_path(path, text.encode("utf-8"))  # the undo


def _write_by_path(path: Path, data: bytes) -> None:
    """Written over and cut to length, as the editor writes (not ``write_bytes``: ext4
    flushes a file truncated to zero and rewritten, which would hide what is measured)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def run_file_editor_bench(calls: int = 300) -> dict[str, Any]:
    """Medians per call: a ``view`` and a ``str_replace`` + ``undo_edit`` pair (counted as two
    calls), confined through the tool set and by path."""
    tools = ToolSet([FileEditorTool()])
    confined: dict[str, list[float]] = {"view": [], "edit": []}
    by_path: dict[str, list[float]] = {"view": [], "edit": []}
    with tempfile.TemporaryDirectory(prefix="treadle-bench-") as tmp:
        workspace = LocalWorkspace(Path(tmp) / "ws", create=True)
        (workspace.root / "pkg").mkdir()
        (workspace.root / "pkg" / "module.py").write_text(_TEXT)
        context = ToolContext(workspace, Secrets(), conversation_id="bench")
        name = "pkg/module.py"
        replace = {"command": "str_replace", "path": name}
        replace |= {"old_str": "line 100 ", "new_str": "LINE 100 "}
        try:
            for _ in range(calls):
                begin = time.perf_counter()
                tools.call("file_editor", {"command": "view", "path": name}, context)
                confined["view"].append(time.perf_counter() - begin)
                begin = time.perf_counter()
                _by_path_view(workspace, name)
                by_path["view"].append(time.perf_counter() - begin)
                begin = time.perf_counter()
                tools.call("file_editor", replace, context)
                tools.call("file_editor", {"command": "undo_edit", "path": name}, context)
                confined["edit"].append((time.perf_counter() - begin) / 2)
                begin = time.perf_counter()
                _by_path_edit(workspace, name)
                by_path["edit"].append((time.perf_counter() - begin) / 2)
        finally:
            tools.close()
    figures: dict[str, Any] = {}
    for kind in ("view", "edit"):
        call_s = statistics.median(confined[kind])
        plain_s = statistics.median(by_path[kind])
        figures[f"file_editor_{kind}_call_s"] = call_s
        figures[f"file_editor_{kind}_by_path_s"] = plain_s
        figures[f"file_editor_{kind}_overhead_s"] = call_s - plain_s
        figures[f"file_editor_{kind}_vs_by_path_ratio"] = call_s / plain_s
    return figures
