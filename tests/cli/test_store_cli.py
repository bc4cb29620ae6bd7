"""``treadle store info|check``, ``treadle log`` and ``treadle export jsonl`` as a user runs them:
output, exit codes (0 ok, 1 violations, 2 bad input) and one-line errors, never a traceback."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from support.cli import invoke_treadle, run_in_pty, run_treadle, without_escapes
from treadle.events.model import ROOT, MessageEvent, StateChangeEvent, event_to_dict
from treadle.store.urls import open_store


def treadle(*args: str, env_store: str | None = None) -> subprocess.CompletedProcess[str]:
    return invoke_treadle(*args, env=None if env_store is None else {"TREADLE_STORE": env_store})


def assert_clean_error(result: subprocess.CompletedProcess[str], code: int, fragment: str):
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert fragment in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.fixture
def url(tmp_path: Path) -> str:
    store_url = f"sqlite:///{tmp_path / 'cli.db'}"
    store = open_store(store_url)
    store.create_conversation("seed", title="worked example 1")
    store.append_batch(
        "seed",
        [
            MessageEvent(id="root", source="user", text="fix it", parent_id=ROOT),
            MessageEvent(id="a", source="agent", text="looking", parent_id="root"),
            MessageEvent(id="old", source="agent", text="attempt 1", parent_id="a"),
            MessageEvent(id="new", source="agent", text="attempt 2", parent_id="a"),
            StateChangeEvent(id="s", key="status", value="idle", parent_id="new"),
        ],
    )
    store.create_conversation("empty")
    store.close()
    return store_url


def test_store_info(url: str) -> None:
    result = treadle("store", "info", "--store", url, "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert [(c["id"], c["events"], c["head_id"]) for c in info["conversations"]] == [
        ("seed", 5, "new"),
        ("empty", 0, None),
    ]
    assert info["events"] == 5
    assert info["bytes_on_disk"] > 0
    table = treadle("store", "info", "--store", url)
    assert table.returncode == 0
    assert "seed" in table.stdout
    assert "worked example 1" in table.stdout


def test_store_info_shows_whole_short_ids_at_80_columns(tmp_path: Path) -> None:
    """Ids as the short unique prefixes the other commands take, never cut with "…"."""
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    store = open_store(url)
    infos = [store.create_conversation(title=f"conversation {n}") for n in range(3)]
    heads: dict[str, str | None] = {}
    for info in infos:
        store.append(info.id, MessageEvent(source="user", text="hi"))
        heads[info.id] = store.head(info.id)
    store.close()
    table = invoke_treadle("store", "info", "--store", url, columns=80)
    assert table.returncode == 0, table.stderr
    assert "…" not in table.stdout
    rows = [line.split("│") for line in table.stdout.splitlines() if "conversation " in line]
    assert len(rows) == 3
    for row in rows:
        short, head = row[1].strip(), row[4].strip()
        (whole,) = [cid for cid in heads if cid.startswith(short)]  # one conversation
        expected = heads[whole]
        assert expected is not None
        assert expected.startswith(head)
        shown = invoke_treadle("log", short, "--head", head, "--store", url, "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)[-1]["id"] == expected


def test_log_prints_the_active_path(url: str) -> None:
    result = treadle("log", "seed", "--store", url, "--json")
    assert result.returncode == 0, result.stderr
    assert [e["id"] for e in json.loads(result.stdout)] == ["root", "a", "new"]
    old = treadle("log", "seed", "--store", url, "--head", "old", "--limit", "2", "--json")
    assert [e["id"] for e in json.loads(old.stdout)] == ["a", "old"]
    table = treadle("log", "seed", "--store", url)
    assert table.returncode == 0
    assert "attempt 2" in table.stdout
    assert "attempt 1" not in table.stdout


def test_log_goes_through_a_pager_on_a_terminal_only(url: str, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    pager = {"PAGER": f"cat > {paged}", "LESS": ""}
    code, shown = run_in_pty(["log", "seed", "--store", url], env=pager)
    assert code == 0, shown
    assert "attempt 2" in paged.read_text()  # the table went to the pager, not the terminal
    assert "attempt 2" not in shown
    paged.unlink()
    piped = run_treadle("log", "seed", "--store", url, env=pager)  # not a terminal: no pager
    assert "attempt 2" in piped.stdout
    assert not paged.exists()


def test_import_and_check_show_their_progress_on_a_terminal_only(tmp_path: Path) -> None:
    log = tmp_path / "long.jsonl"
    parent = ROOT
    with log.open("w") as file:
        for number in range(20_000):
            event = MessageEvent(id=f"e{number}", source="user", text="hi", parent_id=parent)
            file.write(json.dumps(event_to_dict(event)) + "\n")
            parent = event.id
    url = f"sqlite:///{tmp_path / 'progress.db'}"
    code, shown = run_in_pty(["import", "jsonl", str(log), "--store", url])
    shown = without_escapes(shown)
    assert code == 0, shown
    assert f"reading {log}, lines" in shown  # a bar: count, rate, time left
    assert "/20000" in shown
    code, checked = run_in_pty(["store", "check", "--store", url])
    checked = without_escapes(checked)
    assert code == 0, checked
    assert "checking the file" in checked
    assert "1 conversation(s) checked" in checked
    piped = run_treadle("import", "jsonl", str(log), "--store", url)
    assert piped.returncode == 0, piped.stderr
    assert "reading" not in piped.stderr  # not a terminal: the one line it always says
    assert piped.stderr.startswith("imported 20000 event(s)"), piped.stderr


def test_default_store_comes_from_the_environment(url: str) -> None:
    result = treadle("log", "seed", "--json", env_store=url)
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 3


def test_export_jsonl_is_what_audit_reads(url: str, tmp_path: Path) -> None:
    out = tmp_path / "seed.jsonl"
    result = treadle("export", "jsonl", "seed", "--store", url, "-o", str(out))
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["root", "a", "old", "new", "s"]
    audit = treadle("audit", str(out), "--json")
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["violations"] == []
    stdout = treadle("export", "jsonl", "seed", "--store", url)
    assert stdout.stdout.splitlines() == lines


def test_store_check_clean(url: str) -> None:
    result = treadle("store", "check", "--store", url, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["violations"] == []
    assert json.loads(result.stdout)["conversations"] == 2


def test_store_check_finds_violations(url: str, tmp_path: Path) -> None:
    # a log the store would never accept, written behind its back: a dangling head
    path = url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE conversations SET head_id = 'ghost' WHERE id = 'seed'")
    conn.commit()
    conn.close()
    result = treadle("store", "check", "--store", url)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "TREE-HEAD" in result.stdout


def test_store_check_finds_a_damaged_file(url: str) -> None:
    path = Path(url.removeprefix("sqlite:///"))
    store = open_store(url)
    store.create_conversation("big")
    store.append_batch("big", [MessageEvent(source="user", text="z" * 800) for _ in range(400)])
    store.close()
    data = bytearray(path.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle : middle + 4 * 4096] = b"\xff" * (4 * 4096)
    path.write_bytes(bytes(data))
    result = treadle("store", "check", "--store", url, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert any(v["contract"] == "STORE-INTEGRITY" for v in json.loads(result.stdout)["violations"])


def test_unknown_conversation_and_head_exit_2(url: str) -> None:
    assert_clean_error(treadle("log", "nope", "--store", url), 2, "no conversation 'nope'")
    assert_clean_error(treadle("log", "seed", "--store", url, "--head", "ghost"), 2, "TREE-HEAD")
    assert_clean_error(
        treadle("export", "jsonl", "nope", "--store", url), 2, "no conversation 'nope'"
    )


def test_bad_urls_and_missing_stores_exit_2(tmp_path: Path) -> None:
    assert_clean_error(treadle("store", "info", "--store", "mysql://x/y"), 2, "accepted forms")
    missing = f"sqlite:///{tmp_path / 'typo.db'}"
    assert_clean_error(treadle("store", "info", "--store", missing), 2, "no store")
    assert not (tmp_path / "typo.db").exists(), "a reading command must not create a store"
    noise = tmp_path / "noise.db"
    noise.write_bytes(b"not a database at all" * 100)
    assert_clean_error(
        treadle("log", "c", "--store", f"sqlite:///{noise}"), 2, "not a SQLite database"
    )


@pytest.mark.postgres
def test_reading_commands_on_a_postgres_store() -> None:
    import uuid

    import psycopg

    from support.postgres import POSTGRES_BASE_URL

    schema = f"treadle_cli_{uuid.uuid4().hex[:10]}"
    url = f"{POSTGRES_BASE_URL}?schema={schema}"
    store = open_store(url)
    try:
        store.create_conversation("pg")
        store.append_batch(
            "pg",
            [
                MessageEvent(id="root", source="user", text="hi", parent_id=ROOT),
                MessageEvent(id="a", source="agent", text="hello", parent_id="root"),
            ],
        )
        store.close()
        check = treadle("store", "check", "--store", url, "--json")
        assert check.returncode == 0, check.stdout + check.stderr
        assert json.loads(check.stdout)["violations"] == []
        log = treadle("log", "pg", "--store", url, "--json")
        assert [e["id"] for e in json.loads(log.stdout)] == ["root", "a"]
    finally:
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize(
    ("column", "value"), [("metadata", "{not json"), ("created_at", "not a time")]
)
def test_a_damaged_conversations_row_is_reported_and_the_rest_checked(
    url: str, column: str, value: str
) -> None:
    path = Path(url.removeprefix("sqlite:///"))
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE conversations SET {column} = ? WHERE id = 'empty'", (value,))
    conn.close()
    check = treadle("store", "check", "--store", url, "--json")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "Traceback" not in check.stderr
    report = json.loads(check.stdout)
    assert report["conversations"] == 1  # "seed" was still audited
    [finding] = report["violations"]
    assert f"conversation 'empty' has a bad {column}" in finding["message"]

    info = treadle("store", "info", "--store", url, "--json")
    assert info.returncode == 1, info.stdout + info.stderr
    assert "Traceback" not in info.stderr
    facts = json.loads(info.stdout)
    assert [c["id"] for c in facts["conversations"]] == ["seed"]
    assert f"conversation 'empty' has a bad {column}" in facts["damaged"][0]
    table = treadle("store", "info", "--store", url)
    assert table.returncode == 1
    assert "damaged:" in table.stderr
    assert "Traceback" not in table.stderr


def test_markup_in_titles_and_texts_is_printed_as_text(url: str) -> None:
    store = open_store(url)
    store.create_conversation("odd", title="[bold]t[/]")
    store.append("odd", MessageEvent(source="user", text="[/]"))
    store.close()
    info = treadle("store", "info", "--store", url)
    assert info.returncode == 0, info.stderr
    assert "[bold]t[/]" in info.stdout
    log = treadle("log", "odd", "--store", url)
    assert log.returncode == 0, log.stderr  # rich raised MarkupError on "[/]"
    assert "│ [/]" in log.stdout
