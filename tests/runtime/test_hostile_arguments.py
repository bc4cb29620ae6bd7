"""Tool arguments no event could hold (NaN, nesting past MAX_JSON_DEPTH, an integer too long)
are kept raw and answered like unparseable ones: the run goes on (issue 10, item 9)."""

from __future__ import annotations

import pytest

from treadle.runtime.status import ConversationStatus as Status

from .test_conversation import FINISH, call, scripted

HOSTILE = {
    "nan": '{"command": NaN}',
    "deep": '{"command": ' + "[" * 600 + "]" * 600 + "}",
    "long int": '{"command": ' + "9" * 4400 + "}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_arguments_become_an_agent_error_not_a_crash(store, workspace, name):
    raw = HOSTILE[name]
    with scripted(
        store, workspace, [{"tool_calls": [call("terminal", raw, "c1")]}, FINISH]
    ) as conv:
        conv.send_message("go")
        assert conv.run() is Status.FINISHED
        action = next(
            e for e in conv.active_path() if e.kind == "action" and e.tool_call_id == "c1"
        )
        assert action.arguments is None
        assert action.raw_arguments == raw
        [error] = [e for e in conv.active_path() if e.kind == "agent_error"]
        assert "not a JSON object" in error.error
