"""The live stream: cut 100+ times mid-run (by the server and by the client), the client's copy
ends identical to the store, with no gap and no duplicate."""

from __future__ import annotations

import random
import threading

from support.scripts import think_steps
from treadle.events.model import event_to_dict


def test_stream_cut_over_100_times_during_a_run_ends_identical(client, settings_for):
    conversation = client.create_conversation(settings_for(think_steps(200)))
    conversation.send_message("think a lot")
    # The server closes each connection after 3 events; the client also drops at random.
    subscription = conversation.subscribe()
    subscription.events_per_connection = 3
    rng = random.Random(5)
    client_drops = 0
    finished = threading.Event()
    conversation.run(max_steps=500, wait=False)
    watchdog = threading.Timer(120, subscription.close)  # a hang fails the test, not CI
    watchdog.start()
    seen_types = set()
    for message in subscription:
        seen_types.add(message["type"])
        if message["type"] == "run_finished" and message["status"] == "finished":
            finished.set()
            break
        if message["type"] == "event" and rng.random() < 0.15:
            subscription.drop_connection()
            client_drops += 1
    watchdog.cancel()
    subscription.close()
    assert finished.is_set()
    assert subscription.reconnects >= 100
    assert client_drops >= 20
    assert {"event", "run_finished"} <= seen_types

    stored = list(conversation.iter_events(page_size=1000))
    assert sorted(subscription.events) == list(range(len(stored)))  # gap-free from 0
    # The usage totals the frames carried (each reconnect seeded them) are the store's.
    totals = conversation.info()
    assert subscription.usage == {
        "prompt_tokens": totals.prompt_tokens,
        "completion_tokens": totals.completion_tokens,
        "cost_usd": totals.cost_usd,
    }
    assert totals.prompt_tokens > 0
    assert [event_to_dict(subscription.events[item.seq]) for item in stored] == [
        event_to_dict(item.event) for item in stored
    ]


def test_a_subscriber_that_joins_late_replays_then_follows(client, settings_for):
    conversation = client.create_conversation(settings_for(think_steps(5)))
    conversation.send_message("go")
    assert conversation.run().value == "finished"
    count = conversation.count()
    subscription = conversation.subscribe(after_seq=count - 4)
    received = subscription.messages_until(lambda m: m["type"] == "event" and m["seq"] == count - 1)
    subscription.close()
    assert [m["seq"] for m in received if m["type"] == "event"] == [count - 3, count - 2, count - 1]
