"""A second store on a file this process has open must not drop the first one's locks.

POSIX locks belong to the process: a read of the file outside SQLite, closed, drops them, and
another process then takes the file as its last user and deletes the WAL the first store
still writes to. Before the fix the child's appends below replaced the parent's: 20
acknowledged appends were lost.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from treadle.events.model import MessageEvent
from treadle.store import sqlite_open_files
from treadle.store.sqlite import SqliteEventStore

CHILD_APPENDS = """
import sys
from treadle.events.model import MessageEvent
from treadle.store.sqlite import SqliteEventStore
store = SqliteEventStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    store.append(sys.argv[2], MessageEvent(source="user", text=f"child {i}"))
store.close()
"""


def _child(path, conversation_id: str, appends: int) -> None:
    subprocess.run(
        [sys.executable, "-c", CHILD_APPENDS, str(path), conversation_id, str(appends)],
        check=True,
        timeout=120,
    )


def test_a_second_store_on_an_open_file_loses_no_append_of_the_first(tmp_path):
    path = tmp_path / "store.db"
    first = SqliteEventStore(path)
    conversation = first.create_conversation(None)
    first.append(conversation.id, MessageEvent(source="user", text="first"))
    SqliteEventStore(path).close()  # opened and closed while the first is open
    _child(path, conversation.id, 0)  # another process opens and closes the file
    assert (tmp_path / "store.db-wal").exists(), "the WAL the first store writes to was deleted"
    for i in range(20):
        first.append(conversation.id, MessageEvent(source="user", text=f"parent {i}"))
    _child(path, conversation.id, 20)
    first.close()
    with SqliteEventStore(path) as again:
        events = again.get_range(conversation.id, 0, 10**6)
    texts = [item.event.text for item in events]
    assert len(texts) == 41
    assert texts[:21] == ["first"] + [f"parent {i}" for i in range(20)]
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_the_files_a_process_has_open_return_to_none_when_its_stores_close(tmp_path):
    path = tmp_path / "store.db"
    first = SqliteEventStore(path)
    identity = sqlite_open_files.identity_of(path)
    assert identity is not None
    assert sqlite_open_files.open_here(identity)
    second = SqliteEventStore(path)
    first.close()
    first.close()  # a second close counts once
    assert sqlite_open_files.open_here(identity)
    second.close()
    assert not sqlite_open_files.open_here(identity)
