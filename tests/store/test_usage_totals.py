"""Usage totals kept per conversation by the append (store/usage_totals.py): they equal the
sum over the stored events (``treadle.events.usage``) on random logs with branches and
batches, on both backends, after appends by another process, after a refused append, and
after the migration that adds them to a store that has events already."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.postgres import fresh_schema_url
from support.schema_rewind import postgres_back_to, sqlite_back_to
from treadle.errors import AppendError
from treadle.events.model import (
    ROOT,
    ActionEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    TokenUsage,
)
from treadle.events.usage import UsageTotals, usage_totals_of
from treadle.store import postgres_schema, sqlite_schema
from treadle.store.base import ConversationInfo, EventStore
from treadle.store.urls import open_store
from treadle.store.usage_totals import postgres_add_usage_totals, sqlite_add_usage_totals


def _usage(rng: random.Random) -> TokenUsage | None:
    if rng.random() < 0.3:
        return None
    return TokenUsage(
        model="m",
        prompt_tokens=rng.randint(0, 5000),
        completion_tokens=rng.randint(0, 900),
        cost_usd=rng.choice([0.0, rng.random() / 100]),
    )


def _random_batches(rng: random.Random, count: int) -> list[list[Event]]:
    """Batches of random events with and without usage: model responses (actions, agent
    messages), results, user messages (a text that mentions usage is not one), forks."""
    batches: list[list[Event]] = []
    ids: list[str] = []
    for number in range(count):
        batch: list[Event] = []
        for index in range(rng.randint(1, 4)):
            if batch:
                parent = batch[-1].id
            elif ids:
                parent = rng.choice([ids[-1], ids[-1], rng.choice(ids)])  # sometimes a fork
            else:
                parent = ROOT
            kind = rng.choice(["action", "agent", "user", "observation"])
            event_id = f"e{number}-{index}"
            if kind == "action":
                event: Event = ActionEvent(
                    id=event_id,
                    parent_id=parent,
                    llm_response_id=f"r{number}",
                    tool_call_id=f"c{number}-{index}",
                    tool_name="terminal",
                    arguments={},
                    raw_arguments="{}",
                    usage=_usage(rng),
                )
            elif kind == "agent":
                event = MessageEvent(id=event_id, source="agent", text="ok", parent_id=parent)
                event = event.model_copy(update={"usage": _usage(rng)})
            elif kind == "observation":
                event = ObservationEvent(
                    id=event_id,
                    parent_id=parent,
                    action_id="x",
                    tool_call_id="x",
                    tool_name="terminal",
                    content='{"usage":{"prompt_tokens": 999}}',
                )
            else:
                event = MessageEvent(
                    id=event_id, source="user", text='"usage":{ 5', parent_id=parent
                )
            batch.append(event)
        ids.extend(event.id for event in batch)
        batches.append(batch)
    return batches


def _stored_totals(store: EventStore, conversation: str) -> UsageTotals:
    return usage_totals_of(row.event for row in store.get_range(conversation, 0, 10**9))


def _assert_kept(info: ConversationInfo, expected: UsageTotals) -> None:
    assert info.prompt_tokens == expected.prompt_tokens
    assert info.completion_tokens == expected.completion_tokens
    # a float sum: added per append, not per event (equal up to rounding)
    assert math.isclose(info.cost_usd, expected.cost_usd, rel_tol=1e-12, abs_tol=1e-15)


def test_totals_equal_the_sum_over_the_events(store: EventStore) -> None:
    for seed in range(12):
        rng = random.Random(seed)
        conversation = f"c{seed}"
        store.create_conversation(conversation)
        for batch in _random_batches(rng, rng.randint(1, 25)):
            if len(batch) == 1 and rng.random() < 0.5:
                store.append(conversation, batch[0], move_head=rng.random() < 0.8)
            else:
                store.append_batch(conversation, batch, move_head=rng.random() < 0.8)
        expected = _stored_totals(store, conversation)
        assert expected.tokens > 0
        _assert_kept(store.get_conversation(conversation), expected)
    listed = {info.id: info for info in store.list_conversations()}
    for seed in range(12):
        _assert_kept(listed[f"c{seed}"], _stored_totals(store, f"c{seed}"))


def test_a_refused_append_adds_nothing(store: EventStore) -> None:
    store.create_conversation("c")
    first = MessageEvent(id="m", source="agent", text="a", parent_id=ROOT)
    first = first.model_copy(update={"usage": TokenUsage(prompt_tokens=5, cost_usd=0.5)})
    store.append("c", first)
    again = MessageEvent(id="n", source="agent", text="b", parent_id="m")
    again = again.model_copy(update={"usage": TokenUsage(prompt_tokens=7, cost_usd=0.25)})
    with pytest.raises(AppendError):
        store.append_batch("c", [again, first])  # the repeated id refuses the whole batch
    info = store.get_conversation("c")
    assert (info.prompt_tokens, info.completion_tokens, info.cost_usd) == (5, 0, 0.5)


_OTHER_PROCESS = textwrap.dedent(
    """
    import sys
    from treadle.events.model import ActionEvent, TokenUsage
    from treadle.store.urls import open_store

    with open_store(sys.argv[1]) as store:
        for number in range(20):
            store.append("c", ActionEvent(
                llm_response_id=f"r{number}", tool_call_id=f"c{number}", tool_name="t",
                arguments={}, raw_arguments="{}",
                usage=TokenUsage(prompt_tokens=number, completion_tokens=1, cost_usd=0.125),
            ))
    """
)


def test_totals_count_appends_of_another_process(store_url: str) -> None:
    with open_store(store_url) as store:
        store.create_conversation("c")
        store.append("c", MessageEvent(source="user", text="go", parent_id=ROOT))
        others = [
            subprocess.Popen([sys.executable, "-c", _OTHER_PROCESS, store_url]) for _ in range(2)
        ]
        for process in others:
            assert process.wait(timeout=120) == 0
        info = store.get_conversation("c")
        assert info.event_count == 41
        assert info.prompt_tokens == 2 * sum(range(20))
        assert info.completion_tokens == 40
        assert info.cost_usd == 40 * 0.125  # exact in binary
        _assert_kept(info, _stored_totals(store, "c"))


def _fill(store: EventStore) -> dict[str, UsageTotals]:
    rng = random.Random(5)
    for name in ("a", "b", "empty"):
        store.create_conversation(name)
        if name != "empty":
            for batch in _random_batches(rng, 15):
                store.append_batch(name, batch)
    return {name: _stored_totals(store, name) for name in ("a", "b", "empty")}


def _check_migrated(url: str, expected: dict[str, UsageTotals]) -> None:
    with open_store(url) as store:
        for name, totals in expected.items():
            _assert_kept(store.get_conversation(name), totals)
        assert store.get_conversation("empty").prompt_tokens == 0
        store.append("a", MessageEvent(source="agent", text="more", parent_id=ROOT))
        _assert_kept(store.get_conversation("a"), _stored_totals(store, "a"))


def test_sqlite_store_without_totals_gets_them_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        expected = _fill(store)
    # Back to the schema before the step: the columns gone, the version before it.
    before = sqlite_schema.MIGRATIONS.index(sqlite_add_usage_totals)
    columns = ("prompt_tokens", "completion_tokens", "cost_usd")
    sqlite_back_to(path, before, [f"ALTER TABLE conversations DROP COLUMN {c}" for c in columns])
    _check_migrated(url, expected)
    assert sqlite_schema.read_schema_version(path) == sqlite_schema.schema_version()


@pytest.mark.postgres
def test_postgres_store_without_totals_gets_them_when_opened() -> None:
    with fresh_schema_url() as url:
        with open_store(url) as store:
            expected = _fill(store)
        before = next(
            number
            for number, statements in enumerate(postgres_schema.MIGRATIONS)
            if statements == (postgres_add_usage_totals,)
        )
        undo = [
            "ALTER TABLE conversations DROP COLUMN prompt_tokens, "
            "DROP COLUMN completion_tokens, DROP COLUMN cost_usd"
        ]
        postgres_back_to(url, before, undo)
        _check_migrated(url, expected)
