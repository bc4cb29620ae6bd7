"""Reading the isolation facts of a stored conversation (``treadle log``, the server's views)."""

from __future__ import annotations

from treadle.data.isolation import ISOLATION_KEY, IsolationView, isolation_view
from treadle.events.model import StateChangeEvent
from treadle.store.base import EventQuery, EventStore

MAX_RUNS_READ = 1000
"""How many runs' facts are read to count the unsandboxed ones (the newest first)."""


def count_unsandboxed(store: EventStore, conversation_id: str, before_seq: int) -> int:
    """How many runs before seq ``before_seq`` (of the newest ``MAX_RUNS_READ``) ran without a
    sandbox: where a stream seeded from a window of the log starts counting."""
    query = EventQuery(
        kinds=["state_change"],
        text=f'"key":"{ISOLATION_KEY}"',
        order="desc",
        limit=MAX_RUNS_READ,
        before_seq=before_seq,
    )
    return sum(
        1
        for stored in store.search(conversation_id, query).items
        if isinstance(stored.event, StateChangeEvent)
        and stored.event.key == ISOLATION_KEY
        and isinstance(stored.event.value, dict)
        and stored.event.value.get("sandbox") == "none"
    )


def read_isolation(store: EventStore, conversation_id: str) -> IsolationView | None:
    """The newest run's isolation and how many runs (of the newest ``MAX_RUNS_READ``) ran
    without a sandbox; None when no run was recorded (e.g. an imported conversation)."""
    query = EventQuery(
        kinds=["state_change"], text=f'"key":"{ISOLATION_KEY}"', order="desc", limit=MAX_RUNS_READ
    )
    facts = [
        stored.event.value
        for stored in store.search(conversation_id, query).items
        if isinstance(stored.event, StateChangeEvent)
        and stored.event.key == ISOLATION_KEY
        and isinstance(stored.event.value, dict)
    ]
    if not facts:
        return None
    unsandboxed = sum(1 for fact in facts if fact.get("sandbox") == "none")
    return isolation_view(facts[0], unsandboxed)
