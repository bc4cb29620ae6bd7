"""``treadle bench replay``: what a recorded replay costs per event, against the run that
recorded the conversation (a scripted model, the real tools and store; think calls only)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from treadle.bench.core import best_of
from treadle.runtime.conversation import Conversation
from treadle.runtime.replay import replay_recorded
from treadle.runtime.settings import ConversationSettings
from treadle.store.urls import open_store


def run_replay_bench(steps: int = 60, repeats: int = 3) -> dict[str, Any]:
    """A conversation of ``steps`` think calls and a finish, recorded once, then replayed
    (best of ``repeats``); every replay must come out the same."""
    responses: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "think", "arguments": {"thought": f"step {index}"}}]}
        for index in range(steps)
    ]
    responses.append({"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]})
    with tempfile.TemporaryDirectory(prefix="treadle-bench-replay-") as folder:
        root = Path(folder)
        (root / "workspace").mkdir()
        store = open_store(f"sqlite:///{root / 'bench.db'}")
        try:
            settings = ConversationSettings.scripted_inline(
                responses, root / "workspace", sandbox={"kind": "none"}
            )
            with Conversation.create(store, settings) as conversation:
                conversation.send_message("go")
                record_s = best_of(1, lambda: conversation.run(max_steps=steps + 1))
                conversation_id = conversation.id
            reports = []
            replay_s = best_of(
                repeats, lambda: reports.append(replay_recorded(store, conversation_id))
            )
        finally:
            store.close()
    assert all(report.same for report in reports), "a replay diverged"
    events = reports[0].recorded_events
    return {
        "steps": steps + 1,
        "events": events,
        "record_s": record_s,
        "replay_s": replay_s,
        "replay_per_event_s": replay_s / events,
        "replay_vs_record": replay_s / record_s,
    }
