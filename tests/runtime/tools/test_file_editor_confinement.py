"""The file editor stays in the workspace at the moment it opens a file (issue 22, items 2-3).

The race is run for real: another process swaps a folder of the workspace and a symlink to a
host folder with ``renameat2(RENAME_EXCHANGE)`` as fast as it can while the editor views,
creates and undoes hundreds of times. A naive check-then-open is shown to escape under the same
race (so the test can fail); the editor never does. FIFOs, sockets and devices are refused at
once, never a blocked thread.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from treadle.runtime.secrets import Secrets
from treadle.runtime.tools import ToolCallError, ToolContext, ToolResult, ToolSet, builtin_tools
from treadle.runtime.workspace import LocalWorkspace, confined

SECRET = "HOST SECRET"

_SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2
a, b, stop = (os.fsencode(p) for p in sys.argv[1:4])
if libc.renameat2(-100, a, -100, b, 2) != 0:  # RENAME_EXCHANGE
    sys.exit(f"renameat2 failed: {os.strerror(ctypes.get_errno())}")
count = 1
print("ready", flush=True)  # swapping from now on
burst = 200
while not os.path.exists(stop):
    burst ^= 1  # odd and even bursts in turn: neither state is favoured at the check
    for _ in range(burst):
        if libc.renameat2(-100, a, -100, b, RENAME_EXCHANGE) != 0:
            sys.exit(f"renameat2 failed: {os.strerror(ctypes.get_errno())}")
        count += 1
print(count, flush=True)
"""


@dataclass
class Arena:
    workspace: LocalWorkspace
    root: Path
    outside: Path
    context: ToolContext
    tools: ToolSet


@pytest.fixture
def arena(tmp_path: Path) -> Iterator[Arena]:
    """A workspace with a folder ``d`` (holding ``f.txt``) and a symlink ``l`` to a host folder
    holding ``f.txt`` with a secret and the victims undo must never remove."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "f.txt").write_text(SECRET + "\n")
    workspace = LocalWorkspace(tmp_path / "ws", create=True)
    root = workspace.root
    (root / "d").mkdir()
    (root / "d" / "f.txt").write_text("inside\n")
    (root / "l").symlink_to(outside)
    tools = builtin_tools()
    context = ToolContext(workspace=workspace, secrets=Secrets(), conversation_id="race")
    yield Arena(workspace, root, outside, context, tools)
    tools.close()


@contextlib.contextmanager
def swapping(arena: Arena) -> Iterator[Callable[[], int]]:
    """``d`` and ``l`` swapped in a loop by another process while the block runs; yields a
    function giving how many swaps it made (read after the block)."""
    stop = arena.root.parent / "stop-swapping"
    process = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, str(arena.root / "d"), str(arena.root / "l"), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    swaps: list[int] = []
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n", "the swapper did not start"
        yield lambda: swaps[0]
    finally:
        stop.touch()
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err.decode()
        swaps.append(int(out))
        stop.unlink()
        # Leave ``d`` the folder again, whatever the last swap made it.
        if (arena.root / "d").is_symlink():
            os.rename(arena.root / "d", arena.root / "swap")
            os.rename(arena.root / "l", arena.root / "d")
            os.rename(arena.root / "swap", arena.root / "l")


def edit(arena: Arena, **arguments: object) -> ToolResult:
    return arena.tools.call("file_editor", arguments, arena.context)


def attempt(call: Callable[[], object]) -> object:
    """The call's result, or the refusal the model would read."""
    try:
        return call()
    except (ToolCallError, ValueError, OSError) as error:
        return error


def host_files(arena: Arena) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(arena.outside.iterdir())}


def test_a_naive_check_then_open_escapes_under_the_race(arena: Arena) -> None:
    """The race is real here: resolve() then open() by name reads the host file within a
    generous deadline (so the confined tests below would see an escape if there were one)."""
    escaped = 0
    deadline = time.monotonic() + 120
    with swapping(arena) as swaps:
        while not escaped and time.monotonic() < deadline:
            for _ in range(200):
                try:
                    path = arena.workspace.resolve("d/f.txt")
                    escaped += SECRET in path.read_text()
                except (ValueError, OSError):
                    continue
    assert escaped, f"no escape in {swaps()} swaps: the race never happened"


def test_view_never_returns_a_host_file_under_the_race(arena: Arena) -> None:
    outcomes: list[object] = []
    deadline = time.monotonic() + 120
    # At least 400 views, and more until one read the real file and one met the swap (on a
    # busy machine either may win 400 in a row): then the test has proved something, or it
    # fails at the deadline.
    with swapping(arena) as swaps:
        while time.monotonic() < deadline:
            outcomes.append(attempt(lambda: edit(arena, command="view", path="d/f.txt").content))
            kinds = {isinstance(o, str) for o in outcomes}
            if len(outcomes) >= 400 and kinds == {True, False}:  # read, and refused
                break
    escapes = [o for o in outcomes if isinstance(o, str) and SECRET in o]
    assert escapes == []
    read = [o for o in outcomes if isinstance(o, str) and "inside" in o]
    refused = [o for o in outcomes if not isinstance(o, str)]
    assert read, "the editor never read the real file: the test proves nothing"
    assert refused, "no view met the swap: the test proves nothing"
    assert swaps() > 0
    # Every refusal is one the model can act on (outside, or changed while opened).
    # (or the check itself raced: a link read while it was being swapped).
    understood = ("outside the workspace", "symlink", "cannot be resolved")
    odd = {str(o)[:80] for o in refused if not any(text in str(o) for text in understood)}
    assert not odd, odd


def test_create_and_undo_never_touch_the_host_under_the_race(arena: Arena) -> None:
    victims = 3000  # files an escaping undo would remove, one per attempt
    for number in range(victims):
        (arena.outside / f"v{number}.txt").write_text(SECRET)
    before = host_files(arena)
    created = undone = 0
    # At least 300 attempts, and more until an undo won its race (on a busy machine the swap
    # may win 300 in a row): the test then has proved something, or fails at the deadline.
    deadline = time.monotonic() + 120
    with swapping(arena):
        for number in range(victims):
            if number >= 300 and undone and created:
                break
            if time.monotonic() > deadline:
                break
            made = attempt(
                lambda n=number: edit(
                    arena, command="create", path=f"d/v{n}.txt", file_text="agent\n"
                )
            )
            if isinstance(made, ToolResult):
                created += 1
                undone += isinstance(
                    attempt(lambda n=number: edit(arena, command="undo_edit", path=f"d/v{n}.txt")),
                    ToolResult,
                )
    assert host_files(arena) == before  # nothing written, overwritten or removed outside
    assert created, "no create succeeded: the test proves nothing"
    assert undone, "no undo succeeded: the test proves nothing"
    # What was created inside and not undone is there, in the real folder.
    assert all(not p.is_symlink() for p in (arena.root / "d").iterdir())


def test_str_replace_and_insert_never_write_outside_under_the_race(arena: Arena) -> None:
    (arena.outside / "f.txt").write_text("inside\n")  # the same text: an escape would match
    before = host_files(arena)
    with swapping(arena):
        for number in range(150):
            attempt(
                lambda n=number: edit(
                    arena, command="str_replace", path="d/f.txt", old_str="inside", new_str=f"x{n}"
                )
            )
            attempt(lambda: edit(arena, command="undo_edit", path="d/f.txt"))
            attempt(
                lambda: edit(arena, command="insert", path="d/f.txt", insert_line=0, new_str="y")
            )
    assert host_files(arena) == before


def test_listing_never_shows_a_host_folder_under_the_race(arena: Arena) -> None:
    (arena.outside / "host-only-name").mkdir()
    listings: list[object] = []
    deadline = time.monotonic() + 120
    # At least 300 listings, and more until one was shown (on a busy machine the swap may win
    # 300 in a row, as it once did in CI): then the test has proved something, or it fails at
    # the deadline.
    with swapping(arena):
        while time.monotonic() < deadline:
            listings.append(attempt(lambda: edit(arena, command="view", path="d").content))
            if len(listings) >= 300 and any(isinstance(o, str) for o in listings):
                break
    shown = [o for o in listings if isinstance(o, str)]
    assert shown, "no listing was shown under the race: the test proves nothing"
    assert not any("host-only-name" in o for o in shown)


def call_within(call: Callable[[], object], seconds: float = 10.0) -> object:
    """The call's outcome, run in a thread that must end within ``seconds`` (a blocked read
    would keep it waiting for ever)."""
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(attempt(call)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "the file editor call blocked"
    return outcome[0]


def special_files(root: Path) -> list[str]:
    os.mkfifo(root / "fifo")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "sock"))
    listener.close()  # the socket file stays
    names = ["fifo", "sock"]
    if os.geteuid() == 0:
        os.mknod(root / "zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
        names.append("zero")
    return names


@pytest.mark.parametrize(
    "arguments",
    [
        {"command": "view"},
        {"command": "str_replace", "old_str": "a", "new_str": "b"},
        {"command": "insert", "insert_line": 0, "new_str": "b"},
        {"command": "create", "file_text": "b", "overwrite": True},
    ],
    ids=["view", "str_replace", "insert", "create"],
)
def test_fifo_socket_and_device_are_refused_at_once(
    arena: Arena, arguments: dict[str, object]
) -> None:
    for name in special_files(arena.root):
        outcome = call_within(lambda n=name: edit(arena, path=n, **arguments))
        assert isinstance(outcome, ToolCallError), (name, outcome)
        assert "not a regular file" in str(outcome), (name, str(outcome))
        assert not stat.S_ISREG((arena.root / name).lstat().st_mode)  # nothing replaced it


def test_a_fifo_never_wedges_the_next_call(arena: Arena) -> None:
    os.mkfifo(arena.root / "p")
    call_within(lambda: edit(arena, command="view", path="p"))
    (arena.root / "ok.txt").write_text("fine\n")
    assert "fine" in str(call_within(lambda: edit(arena, command="view", path="ok.txt").content))


def test_links_inside_are_followed_and_links_out_refused(arena: Arena) -> None:
    root = arena.root
    (root / "rel").symlink_to("d/f.txt")
    (root / "abs").symlink_to(root / "d" / "f.txt")
    (root / "dlink").symlink_to("d")
    for name in ("rel", "abs", "dlink/f.txt"):
        assert "inside" in edit(arena, command="view", path=name).content, name
    edit(arena, command="str_replace", path="abs", old_str="inside", new_str="edited")
    assert (root / "d" / "f.txt").read_text() == "edited\n"
    assert (root / "abs").is_symlink()
    (root / "out").symlink_to(arena.outside / "f.txt")
    for name in ("out", "l/f.txt"):
        with pytest.raises(ToolCallError, match="outside the workspace"):
            edit(arena, command="view", path=name)
    with pytest.raises(ToolCallError, match="outside the workspace"):
        edit(arena, command="create", path="l/new.txt", file_text="x")
    assert not (arena.outside / "new.txt").exists()
    listing = edit(arena, command="view", path=".").content
    assert "l@ (a symlink leading outside the workspace: not followed)" in listing
    assert "dlink/" in listing
    assert "dlink/f.txt" in listing


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_files_the_editor_makes_belong_to_the_workspace_owner(arena: Arena) -> None:
    os.chown(arena.root, 4321, 4322)
    edit(arena, command="create", path="new/deep/a.txt", file_text="x\n")
    for made in ("new", "new/deep", "new/deep/a.txt"):
        info = (arena.root / made).lstat()
        assert (info.st_uid, info.st_gid) == (4321, 4322), made
    # An existing file keeps its owner when edited.
    os.chown(arena.root / "d" / "f.txt", 0, 0)
    edit(arena, command="str_replace", path="d/f.txt", old_str="inside", new_str="changed")
    assert (arena.root / "d" / "f.txt").stat().st_uid == 0


def test_without_openat2_the_editor_refuses_instead_of_opening_unconfined(
    arena: Arena, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine Treadle knows no openat2 on (the same path as an old kernel's ENOSYS): the
    call fails naming why, and nothing is read or written by path instead."""
    monkeypatch.setattr(confined, "_OPENAT2", {})
    monkeypatch.setattr(confined, "_checked", None)
    with pytest.raises(confined.ConfinementUnavailable, match="openat2"):
        edit(arena, command="create", path="new.txt", file_text="x")
    assert not (arena.root / "new.txt").exists()
    with pytest.raises(confined.ConfinementUnavailable, match="openat2"):
        edit(arena, command="view", path="d/f.txt")
