"""The OpenHands SDK's own client (openhands-sdk 1.58.2, in its Python 3.12 venv ``.venv-sdk``
that ``make test`` makes) drives ``treadle serve`` under /openhands: create, a message, a run
with two tool calls in one response against a strict fake provider, events through REST and
the socket, state, confirmation (pending, reject, accept), pause, a workspace command, upload
and download. Then ``treadle audit`` and ``treadle conversations`` see the same conversation.
No mock of either side: the client is the SDK's, the server is Treadle's, the model's service
is the only fake."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cli import run_treadle
from support.fake_openai import FakeOpenAIServer
from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess

REPO = Path(__file__).resolve().parents[2]
SDK_PYTHON = Path(os.environ.get("TREADLE_SDK_PYTHON", REPO / ".venv-sdk" / "bin" / "python"))
FLOW = REPO / "tests" / "support" / "sdk_client_flow.py"
API_KEY = "server-key-for-the-sdk-0123"
MODEL_KEY = "sk-sdk-client-key-0123456789"  # sdk_client_flow.MODEL_KEY

pytestmark = pytest.mark.skipif(
    not SDK_PYTHON.exists(),
    reason=f"the OpenHands SDK venv is missing ({SDK_PYTHON}): `make .venv-sdk` makes it",
)


def sdk_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # The SDK's LiteLLM must not reach for its price list on the network (none here).
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        OPENHANDS_SUPPRESS_BANNER="1",
        OPENHANDS_REMOTE_WS_READY_TIMEOUT="60",
    )
    return env


def run_flow(
    host: str, base_url: str, working_dir: Path, out: Path, treadle_made: str
) -> dict[str, Any]:
    done = subprocess.run(
        [
            str(SDK_PYTHON),
            str(FLOW),
            host,
            API_KEY,
            base_url,
            str(working_dir),
            str(out),
            treadle_made,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=sdk_env(),
        check=False,
    )
    result = json.loads(out.read_text()) if out.exists() else {}
    assert done.returncode == 0, (result.get("error"), done.stderr[-4000:])
    return result


def strict_replies() -> list[dict[str, Any]]:
    """One reply per model call, in order; the fake answers nothing else."""
    return [
        # run 1: two calls in one response, then the end of the turn
        {
            "tool_calls": [
                {"name": "terminal", "arguments": {"command": "echo hi > hello.txt && echo ok"}},
                {
                    "name": "file_editor",
                    "arguments": {"command": "create", "path": "notes.md", "file_text": "n\n"},
                },
            ]
        },
        {"tool_calls": [{"name": "finish", "arguments": {"message": "made hello.txt"}}]},
        # confirmation: a call that waits and is rejected ...
        {"tool_calls": [{"name": "terminal", "arguments": {"command": "ls"}}]},
        # ... one that waits and is accepted by run(), then the end
        {"tool_calls": [{"name": "terminal", "arguments": {"command": "ls -1"}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"message": "listed"}}]},
        # after the pause
        {"tool_calls": [{"name": "finish", "arguments": {"message": "resumed"}}]},
    ]


def test_the_sdk_client_drives_treadle_end_to_end(tmp_path: Path) -> None:
    root = tmp_path / "root"
    working_dir = root / "project"
    working_dir.mkdir(parents=True)
    store = f"sqlite:///{tmp_path / 'server.db'}"
    with FakeOpenAIServer(strict_replies()) as fake:
        server = ServerProcess(
            store, api_keys=(API_KEY,), log_dir=tmp_path, workspace_root=root
        ).start()
        try:
            settings = {
                "model": {"kind": "litellm", "model": "openai/x", "base_url": fake.base_url},
                "workspace": str(working_dir),
            }
            made = httpx.post(
                f"{server.base_url}/api/conversations",
                json={"settings": settings, "title": "made by Treadle"},
                headers={"Authorization": f"Bearer {API_KEY}"},
                timeout=120,  # a loaded machine's first create may take seconds
            )
            assert made.status_code == 201, made.text
            flow = run_flow(
                f"{server.base_url}/openhands",
                fake.base_url,
                working_dir,
                tmp_path / "out.json",
                made.json()["id"],
            )
        finally:
            server.stop()
        requests = list(fake.requests)
    cid = flow["created"]
    assert flow["alive"] is True
    assert flow["server_info"]["server"] == "treadle"
    assert flow["status_new"] == "idle"
    # The run: both calls of one response, each with its result, then finished.
    assert flow["status_after_run"] == "finished"
    assert flow["actions"][:3] == ["terminal", "file_editor", "finish"]
    assert flow["prompt_tokens"] == 2 * 11  # the fake's usage of the run's two calls
    assert (working_dir / "hello.txt").read_text() == "hi\n"
    assert (working_dir / "notes.md").read_text() == "n\n"
    assert {"ActionEvent", "ObservationEvent"} <= set(flow["socket_kinds"])
    assert flow["socket_full_states"] >= 2  # ready, and the end of the run
    assert flow["page_size"] == 3
    assert flow["page_next"] is not None
    # The client's key reached the model's service, never the client again.
    assert flow["info_key"] == "**********"
    sent = [{k.lower(): v for k, v in r["headers"].items()} for r in requests]
    assert [headers.get("authorization") for headers in sent] == [f"Bearer {MODEL_KEY}"] * len(
        requests
    )
    assert flow["info_title"] == "Make hello.txt and say hi"  # no model call for it
    assert flow["title"] == "Renamed by the SDK"
    # Confirmation.
    assert flow["policy"] == "AlwaysConfirm"
    assert flow["status_pending"] == "waiting_for_confirmation"
    assert flow["status_rejected"] == "idle"
    assert flow["status_pending_again"] == "waiting_for_confirmation"
    assert flow["status_accepted"] == "finished"
    assert flow["status_paused"] == "paused"
    assert flow["status_resumed"] == "finished"
    # The workspace: inside it yes, outside it never.
    assert flow["command"] == {"exit_code": 0, "stdout": "hi\nfrom-sdk\n"}
    assert flow["command_outside"]["exit_code"] == -1
    assert "403" in flow["command_outside"]["stderr"]
    assert flow["upload"] == {"success": True, "size": 20}
    assert (working_dir / "up.txt").read_text() == "uploaded by the SDK\n"
    assert flow["download"] == {"success": True, "text": "uploaded by the SDK\n"}
    assert flow["download_outside"]["success"] is False
    assert "403" in flow["download_outside"]["error"]
    assert {"MessageEvent", "ActionEvent", "ObservationEvent", "UserRejectObservation"} <= set(
        flow["event_kinds"]
    )
    assert len(requests) == len(strict_replies())  # every reply used, none invented

    assert flow["deleted"]["status"] == 404
    # Treadle's fork and switch, through the SDK's fork() and navigate_to().
    assert flow["fork"]["events"] == flow["fork"]["parent"] == 7
    assert flow["fork"]["head"] is True
    assert flow["attached"] == {"id": made.json()["id"], "status": "idle"}

    # The same conversation, seen by Treadle's own tools: listed, and its log audits clean.
    listed = run_treadle("conversations", "--store", store)
    assert listed.returncode == 0, listed.stderr
    assert cid[:8] in listed.stdout
    assert flow["deleted"]["id"][:8] not in listed.stdout
    folder = tmp_path / "exported"
    exported = run_treadle("export", "openhands", cid, str(folder), "--store", store)
    assert exported.returncode == 0, exported.stderr
    audit = run_treadle("audit", str(folder), "--json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert json.loads(audit.stdout)["violations"] == []
    assert_store_audits_clean(store)  # the fork and the attached one too
    with server_again(store, tmp_path) as again:
        canvas = httpx.get(
            f"{again.base_url}/api/conversations/{cid}",
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=120,
        )
        assert canvas.status_code == 200
        assert canvas.json()["status"] == "finished"
        served_audit = httpx.get(
            f"{again.base_url}/api/conversations/{cid}/audit",
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=120,
        )
        assert served_audit.status_code == 200
        assert served_audit.json()["violations"] == []


class server_again:
    """The same store served again (a restart): the key the client sent is gone."""

    def __init__(self, store: str, tmp_path: Path) -> None:
        self.server = ServerProcess(store, api_keys=(API_KEY,), log_dir=tmp_path)

    def __enter__(self) -> ServerProcess:
        return self.server.start()

    def __exit__(self, *_exc: object) -> None:
        self.server.stop()
