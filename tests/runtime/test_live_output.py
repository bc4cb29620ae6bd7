"""Live output of a call in progress (runtime/live_output.py): chunks are rate-limited, bounded
and masked, a secret split across reads never reaches one, and the terminal streams exactly the
command's output (never its end marker) with no thread left behind."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from treadle.events.model import ActionEvent
from treadle.runtime import live_output
from treadle.runtime.live_output import MAX_CHUNK_CHARS, CallOutput, LiveOutput, OutputChunk
from treadle.runtime.secrets import Secrets
from treadle.runtime.tools import ToolContext
from treadle.runtime.tools.bash_session import BashSession
from treadle.runtime.tools.terminal import TerminalArguments, TerminalTool
from treadle.runtime.workspace import LocalWorkspace

SECRET = "Zq7Xw9Lp2Vb4Nm8K"


def call() -> ActionEvent:
    return ActionEvent(
        tool_call_id="call-1",
        tool_name="terminal",
        arguments={"command": "x"},
        raw_arguments="{}",
        llm_response_id="response-1",
    )


def feed_all(pieces: list[bytes], secrets: Secrets, **bounds: float) -> list[OutputChunk]:
    chunks: list[OutputChunk] = []
    output = CallOutput("conv", call(), secrets, (chunks.append,), **bounds)  # type: ignore[arg-type]
    for piece in pieces:
        output.feed(piece)
    output.close()
    return chunks


def test_nobody_listening_costs_nothing():
    assert LiveOutput().open("conv", call(), Secrets()) is None
    assert LiveOutput([print]).open("conv", None, Secrets()) is None


def test_first_chunk_at_once_then_at_most_ten_a_second(monkeypatch):
    chunks = feed_all([b"first\n"] + [b"x\n"] * 2000, Secrets())
    assert chunks[0].text == "first\n"
    # The module's clock, moved by the test: a loaded machine's pauses between two feeds made
    # the count a matter of timing luck (4 chunks once, under two CPU burners).
    now = [1000.0]
    monkeypatch.setattr(live_output, "time", SimpleNamespace(monotonic=lambda: now[0]))
    told: list[float] = []
    output = CallOutput("conv", call(), Secrets(), (lambda chunk: told.append(now[0]),))
    for _ in range(550):  # 0.55 s of output, a line each millisecond
        output.feed(b"tick\n")
        now[0] += 0.001
    output.close()
    # The first at once, one each 0.1 s (at 0.1 ... 0.5 s), and the rest at close.
    assert len(told) == 7
    gaps = [later - earlier for earlier, later in itertools.pairwise(told[:-1])]
    assert all(gap >= 0.1 - 1e-9 for gap in gaps), gaps


def test_output_faster_than_a_chunk_holds_keeps_the_newest_and_shows_the_gap():
    chunks = feed_all([b"a" * 10_000, b"b" * 10_000, b"c" * 100], Secrets(), min_interval_s=60)
    first, last = chunks
    # One read larger than a chunk: its newest part, at the offset where that starts.
    assert first.offset == 10_000 - MAX_CHUNK_CHARS
    assert first.text == "a" * MAX_CHUNK_CHARS
    assert len(last.text) <= MAX_CHUNK_CHARS
    assert last.text.endswith("b" * (MAX_CHUNK_CHARS - 100) + "c" * 100)
    # The offset counts what was dropped: the chunk ends where the output does.
    assert last.offset + len(last.text) == 20_100


def test_a_secret_split_across_reads_never_reaches_a_chunk():
    secrets = Secrets({"TOKEN": SECRET})
    text = f"before {SECRET} middle {SECRET[:6]}\n{SECRET[6:]} after".encode()
    for cut in range(1, len(text)):
        chunks = feed_all([text[:cut], text[cut:]], secrets, min_interval_s=0)
        joined = "".join(chunk.text for chunk in chunks)
        assert joined == "before <secret:TOKEN> middle <secret:TOKEN> after"
        assert not any(SECRET[:3] in chunk.text for chunk in chunks), cut


@given(
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=12),
    noise=st.text(alphabet="abc \n", max_size=40),
)
def test_no_piece_of_a_secret_in_any_chunk_whatever_the_reads(cuts, noise):
    secrets = Secrets({"TOKEN": SECRET})
    encoded = SECRET.encode().hex()
    text = f"{noise}{SECRET}{noise}{encoded}{noise}{SECRET}".encode()
    points = sorted({min(cut, len(text)) for cut in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    chunks = feed_all(pieces, secrets, min_interval_s=0)
    for chunk in chunks:
        for length in range(4, len(SECRET) + 1):  # no 4 characters in a row of it
            for start in range(len(SECRET) - length + 1):
                assert SECRET[start : start + length] not in chunk.text
        assert encoded[:8] not in chunk.text.lower()
    assert "".join(chunk.text for chunk in chunks).count("<secret:TOKEN>") == 3


def test_a_listener_that_fails_does_not_fail_the_call():
    def broken(chunk: OutputChunk) -> None:
        raise RuntimeError("listener bug")

    told: list[OutputChunk] = []
    output = CallOutput("conv", call(), Secrets(), (broken, told.append))
    output.feed(b"still here\n")
    output.close()
    assert "".join(chunk.text for chunk in told) == "still here\n"


def test_the_shell_streams_its_output_exactly_never_the_marker(tmp_path: Path):
    session = BashSession(tmp_path)
    try:
        commands = [
            "echo one; echo; printf 'no newline at the end'",
            "printf '__TREADLE_looks_like_a_marker\\n'; echo after",
            "for i in $(seq 1 300); do echo line $i; done",
            "printf 'a\\n\\n\\n'",
        ]
        for command in commands:
            chunks: list[OutputChunk] = []
            output = CallOutput("conv", call(), Secrets(), (chunks.append,), min_interval_s=0)
            outcome = session.run(command, 10, live=output)
            output.close()
            assert "".join(chunk.text for chunk in chunks) == outcome.output, command
    finally:
        session.close()


def test_terminal_output_reaches_listeners_before_the_command_ends(tmp_path: Path):
    workspace = LocalWorkspace(tmp_path / "ws", create=True)
    told: list[tuple[float, str]] = []
    live = LiveOutput([lambda chunk: told.append((time.monotonic(), chunk.text))])
    context = ToolContext(
        workspace=workspace, conversation_id="conv", live_output=live, call=call()
    )
    tool = TerminalTool()
    threads_before = threading.active_count()
    try:
        started = time.monotonic()
        result = tool.run(
            TerminalArguments(command="echo live-$((20+22)); sleep 2; echo done"), context
        )
        ended = time.monotonic()
    finally:
        tool.close()
    assert "live-42" in result.content
    assert "done" in result.content
    first = next(at for at, text in told if "live-42" in text)
    assert first - started < 1.0
    assert ended - first > 1.5
    assert "".join(text for _, text in told) == "live-42\ndone\n"
    assert threading.active_count() == threads_before
