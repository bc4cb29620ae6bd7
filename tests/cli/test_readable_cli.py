"""The command line people read (issue 26): the final answer whole, ``show``, ``export
markdown|html``, ``delete``, ``-q``, and ids as prefixes and short ids, through the real
``treadle`` process on a scripted run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.cli import invoke_treadle
from treadle.cli.ids import short_ids
from treadle.events.model import MessageEvent
from treadle.store.urls import open_store

ANSWER = (
    "## Done\n\nI wrote `out.txt`. The check, to run again:\n\n"
    "```python\nfor number in range(3):\n    print('line', number)  # the long line of the answer "
    "that a 100-character cut would lose\n```\n\n"
    "- first point of the summary\n- second point, after the code block: the very end"
)
HOSTILE = "printf 'before\\033]52;c;aGFja2Vk\\007\\033]0;owned\\007after\\n'; seq 1 30"


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """One scripted run: a command printing OSC 52/OSC 0 and 31 lines, then a long Markdown
    answer. (store URL, conversation id, the run's stdout)."""
    folder = tmp_path_factory.mktemp("readable")
    script = folder / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": [
                    {"tool_calls": [{"name": "terminal", "arguments": {"command": HOSTILE}}]},
                    {"tool_calls": [{"name": "finish", "arguments": {"message": ANSWER}}]},
                ]
            }
        )
    )
    (folder / "ws").mkdir()
    url = f"sqlite:///{folder / 'run.db'}"
    done = invoke_treadle(
        "run", "do it", "--create-workspace", "--workspace", str(folder / "ws"), "--script", str(script),
        "--store", url, "--sandbox", "none", columns=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    store = open_store(url)
    (info,) = store.list_conversations()
    store.close()
    return url, info.id, done.stdout


def _answer_lines_in(text: str) -> None:
    """The answer's pieces are all in ``text``, however the terminal's width wrapped it."""
    flat = " ".join(text.split())
    for line in ("print('line', number)", "a 100-character cut would lose", "the very end"):
        assert line in flat, line


def test_run_ends_with_the_whole_answer_and_sends_no_escape_sequence(ran) -> None:
    _url, _cid, out = ran
    tail = out[out.index("final answer") :]
    _answer_lines_in(tail)
    assert "\x1b]52" not in out
    assert "\x1b]0;" not in out
    assert "␛]52;c;aGFja2Vk␇" in out  # shown, as marks


def test_log_takes_a_prefix_shows_short_whole_ids_and_the_whole_answer(ran) -> None:
    url, cid, _ = ran
    shown = invoke_treadle("log", cid[:4], "--store", url, columns=80)
    assert shown.returncode == 0, shown.stderr
    _answer_lines_in(shown.stdout[shown.stdout.index("final answer") :])
    store = open_store(url)
    every = {stored.event.id for stored in store.get_range(cid, 0, 1000)}
    store.close()
    ids = re.findall(r"^│ (\S+) +│", shown.stdout, flags=re.MULTILINE)
    assert ids
    assert "id" not in ids
    for short in ids:  # whole, at least 8 characters, each naming one event
        assert len(short) >= 8
        assert "…" not in short
        assert sum(1 for event_id in every if event_id.startswith(short)) == 1
    assert all(len(line) <= 80 for line in shown.stdout.splitlines())
    assert "\x1b]52" not in shown.stdout


def test_show_pairs_calls_with_results_folds_and_unfolds(ran) -> None:
    url, cid, _ = ran
    shown = invoke_treadle("show", cid[:8], "--store", url, columns=100)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    call = out.index("▶ $ printf")
    assert out.index("before␛]52", call) > call  # its result right under the call
    assert "more line(s) (--full shows them)" in out
    assert "\n  30" not in out
    _answer_lines_in(out)
    full = invoke_treadle("show", cid, "--store", url, "--full", columns=100)
    assert "30" in full.stdout.splitlines()[-40:][0] or "  30" in full.stdout
    assert "more line(s)" not in full.stdout


def test_export_markdown_and_html(ran, tmp_path: Path) -> None:
    url, cid, _ = ran
    markdown = invoke_treadle("export", "markdown", cid[:6], "--store", url)
    assert markdown.returncode == 0, markdown.stderr
    assert "## Final answer" in markdown.stdout
    assert "```python\nfor number in range(3):" in markdown.stdout
    assert "\x1b" not in markdown.stdout
    page = tmp_path / "t.html"
    written = invoke_treadle("export", "html", cid, "--store", url, "-o", str(page))
    assert written.returncode == 0, written.stderr
    text = page.read_text()
    assert text.startswith("<!doctype html>")
    assert "print(&#x27;line&#x27;, number)" in text
    assert "<script" not in text


def test_quiet_leaves_state_changes_out_of_the_live_view(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    finish = {"tool_calls": [{"name": "finish", "arguments": {"message": "ok"}}]}
    script.write_text(json.dumps({"responses": [finish]}))
    args = ("--workspace", str(tmp_path), "--script", str(script), "--sandbox", "none")
    loud = invoke_treadle("run", "x", *args, "--store", f"sqlite:///{tmp_path / 'a.db'}")
    quiet = invoke_treadle("run", "x", *args, "-q", "--store", f"sqlite:///{tmp_path / 'b.db'}")
    assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
    assert "state_change" in loud.stdout
    assert "state_change" not in quiet.stdout
    assert "observation" in quiet.stdout
    assert "final answer" in quiet.stdout


def test_delete_asks_or_needs_yes_and_leaves_the_workspace(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = open_store(url)
    store.create_conversation("keep-me-1", title="one")
    store.append("keep-me-1", MessageEvent(source="user", text="hello"))
    store.close()
    (tmp_path / "file.txt").write_text("stays")
    refused = invoke_treadle("delete", "keep", "--store", url)  # no terminal to ask
    assert refused.returncode == 2
    assert "--yes" in refused.stderr
    assert invoke_treadle("log", "keep-me-1", "--store", url).returncode == 0
    done = invoke_treadle("delete", "keep", "--store", url, "--yes")
    assert done.returncode == 0, done.stderr
    assert "eval" not in done.stderr  # no eval's attempt: nothing to say of one
    gone = invoke_treadle("log", "keep-me-1", "--store", url)
    assert gone.returncode == 2
    assert "no conversation 'keep-me-1'" in gone.stderr
    assert (tmp_path / "file.txt").read_text() == "stays"


def test_prefixes_exact_ids_win_ambiguity_is_refused_with_candidates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = open_store(url)
    for name in ("abcd", "abcd1111", "abcd2222"):
        store.create_conversation(name, title=name)
        store.append(name, MessageEvent(source="user", text=f"I am {name}"))
    store.close()
    exact = invoke_treadle("log", "abcd", "--store", url, columns=100)
    assert exact.returncode == 0, exact.stderr
    assert "I am abcd " in exact.stdout + " "
    ambiguous = invoke_treadle("log", "abcd2", "--store", url, columns=100)
    assert "I am abcd2222" in ambiguous.stdout
    both = invoke_treadle("show", "abcd", "--store", url)
    assert both.returncode == 0  # exact again
    many = invoke_treadle("show", "abc", "--store", url)
    assert many.returncode == 2
    assert "at least 4 characters" in many.stderr
    store = open_store(url)
    store.create_conversation("wxyz-1", title="a")
    store.create_conversation("wxyz-2", title="b")
    store.close()
    refused = invoke_treadle("show", "wxyz", "--store", url)
    assert refused.returncode == 2
    assert "ambiguous" in refused.stderr
    assert "wxyz-1, wxyz-2" in refused.stderr


def test_log_shows_the_last_200_events_unless_limit_0(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = open_store(url)
    store.create_conversation("long", title="long")
    store.append_batch("long", [MessageEvent(source="user", text=f"n{i}") for i in range(250)])
    store.close()
    table = invoke_treadle("log", "long", "--store", url, columns=120)
    assert table.returncode == 0, table.stderr
    assert "n249" in table.stdout
    assert "n50 " in table.stdout
    assert "n49 " not in table.stdout
    assert "--limit 0 shows the whole path" in table.stderr
    everything = invoke_treadle("log", "long", "--store", url, "--limit", "0", columns=120)
    assert "n0 " in everything.stdout
    as_json = invoke_treadle("log", "long", "--store", url, "--json")
    assert len(json.loads(as_json.stdout)) == 250  # --json unchanged: the whole path


def test_short_ids_are_unique_prefixes_of_at_least_8_characters() -> None:
    ids = ["0123456789ab", "0123456789cd", "ffff0000aaaa", "eval-abcdef123", "eval-abcdef999"]
    shown = short_ids(ids)
    assert shown["ffff0000aaaa"] == "ffff0000"
    assert shown["0123456789ab"] == "0123456789a"
    assert shown["eval-abcdef123"] == "eval-abcdef12"  # eval- not counted: 8 after it
    assert short_ids(["abc"]) == {"abc": "abc"}
    assert short_ids(["abcdefgh1"], universe=["abcdefgh12"])["abcdefgh1"] == "abcdefgh1"


def test_conversations_fit_80_columns_with_the_reason_under_the_table(tmp_path: Path) -> None:
    from treadle.runtime.status import ConversationStatus, status_event

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = open_store(url)
    reason = "the model failed: " + "a very long provider error message " * 8
    for name in ("0123456789-first", "0123456789-second"):
        store.create_conversation(name, title="a title " * 6)
        said = MessageEvent(source="user", text="hi")
        store.append(name, said)
        store.append(name, status_event(ConversationStatus.ERROR, said.id, reason))
    store.close()
    shown = invoke_treadle("conversations", "--store", url, columns=80)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    rows = [line for line in lines if line.startswith("│ 0123456789")]
    assert {row.split()[1] for row in rows} == {"0123456789-f", "0123456789-s"}  # whole, short
    assert "…" not in shown.stdout
    flat = " ".join(shown.stdout.split())
    assert f"0123456789-f error: {' '.join(reason.split())}" in flat


def test_audit_path_and_project_take_a_stored_id_when_no_such_file_exists(ran) -> None:
    url, cid, _ = ran
    audit = invoke_treadle("audit", cid[:6], "--store", url, "--json")
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["violations"] == []
    path = invoke_treadle("path", cid[:6], "--store", url)
    assert path.returncode == 0, path.stderr
    assert json.loads(path.stdout)[-1]["kind"] == "observation"
    project = invoke_treadle("project", cid, "--store", url)
    assert json.loads(project.stdout)[0]["role"] == "system"
    missing = invoke_treadle("audit", "no-such-thing", "--store", url)
    assert missing.returncode == 2
    assert "no conversation 'no-such-thing'" in missing.stderr


def test_deleting_an_eval_tasks_conversation_says_the_eval_keeps_its_result(
    tmp_path: Path,
) -> None:
    from treadle.eval.results import EvalRecord, begin_eval
    from treadle.store.eval_results import open_eval_results

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = open_store(url)
    store.create_conversation("attempt-1", title="an attempt")
    store.append("attempt-1", MessageEvent(source="user", text="fix it"))
    store.close()
    results = open_eval_results(url)
    try:
        begin_eval(
            results,
            EvalRecord(
                id="eval-x", tasks_file="tasks.jsonl", tasks_sha256="0" * 64, settings={},
                engine={}, task_ids=("fix-calc",), created_at="2026-12-02T00:00:00+00:00",
                updated_at="2026-12-02T00:00:00+00:00",
            )
        )  # fmt: skip
        results.start_attempt("eval-x", "fix-calc", 0, "attempt-1")
    finally:
        results.close()
    done = invoke_treadle("delete", "attempt-1", "--store", url, "--yes")
    assert done.returncode == 0, done.stderr
    assert "eval eval-x task fix-calc keeps its result" in done.stderr
    assert "trajectory is gone" in done.stderr
    assert invoke_treadle("log", "attempt-1", "--store", url).returncode == 2  # deleted
