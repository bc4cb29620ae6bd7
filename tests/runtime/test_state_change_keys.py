"""Every state_change key the runtime writes is described in ``treadle schema``'s output."""

from __future__ import annotations

import json

from treadle.api.mcp import MCP_SERVERS_KEY
from treadle.events.model import events_json_schema
from treadle.runtime.conversation import CALL_IDS_KEY, ISOLATION_KEY, MODEL_ERROR_KEY
from treadle.runtime.hooks import HOOK_KEY
from treadle.runtime.replay.rerun_mode import REPLAY_KEY
from treadle.runtime.requests import PAUSE_REQUEST_KEY, QUEUED_MESSAGE_KEY
from treadle.runtime.skills import SKILLS_KEY
from treadle.runtime.snapshots.facts import RESTORE_KEY, SNAPSHOT_KEY
from treadle.runtime.status import HEAD_KEY, STATUS_KEY


def test_the_schema_describes_every_state_change_key_the_runtime_writes():
    schema = events_json_schema()
    (state_change,) = [
        definition
        for definition in schema["$defs"].values()
        if definition.get("properties", {}).get("kind", {}).get("const") == "state_change"
    ]
    described = state_change["properties"]["key"]["description"]
    keys = [STATUS_KEY, HEAD_KEY, MODEL_ERROR_KEY, CALL_IDS_KEY, PAUSE_REQUEST_KEY, ISOLATION_KEY]
    for key in [
        *keys,
        QUEUED_MESSAGE_KEY,
        SNAPSHOT_KEY,
        RESTORE_KEY,
        REPLAY_KEY,
        HOOK_KEY,
        SKILLS_KEY,
        MCP_SERVERS_KEY,
    ]:
        assert f"`{key}`" in described, key
    assert json.dumps(schema)  # still plain JSON
