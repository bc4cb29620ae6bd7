"""Drives a Treadle server with the real OpenHands SDK client (openhands-sdk 1.58.2's
``RemoteConversation`` and ``RemoteWorkspace``): run by tests/interop/test_sdk_client.py with
the SDK's own Python 3.12 venv (.venv-sdk), never with Treadle's.

    sdk_client_flow.py HOST API_KEY MODEL_BASE_URL WORKING_DIR OUT.json TREADLE_MADE_ID

Each step's outcome goes to OUT.json (what the test checks); a step that raises ends the run
with the exception recorded, so the test names the step that failed.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openhands.sdk import LLM, Agent, Conversation, Tool
from openhands.sdk.conversation.impl.remote_conversation import RemoteConversation
from openhands.sdk.event import (
    ActionEvent,
    ConversationStateUpdateEvent,
    MessageEvent,
    ObservationEvent,
)
from openhands.sdk.event.base import Event
from openhands.sdk.security.confirmation_policy import AlwaysConfirm, NeverConfirm
from openhands.sdk.workspace import RemoteWorkspace
from pydantic import SecretStr

MODEL_KEY = "sk-sdk-client-key-0123456789"
"""The key the client sends with its agent spec (the fake provider checks it arrives)."""


def wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds (an AssertionError past the deadline)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def main() -> int:
    host, api_key, base_url, working_dir, out_path, treadle_made = sys.argv[1:7]
    out: dict[str, Any] = {"steps": []}
    seen: list[Event] = []
    lock = threading.Lock()

    def on_event(event: Event) -> None:
        with lock:
            seen.append(event)

    started = time.monotonic()

    def step(name: str, value: Any = True) -> None:
        out["steps"].append((name, round(time.monotonic() - started, 2)))
        out[name] = value
        Path(out_path).write_text(json.dumps(out, default=str))

    try:
        workspace = RemoteWorkspace(host=host, api_key=api_key, working_dir=working_dir)
        agent = Agent(
            llm=LLM(
                model="openai/test-model",
                base_url=base_url,
                api_key=SecretStr(MODEL_KEY),
                usage_id="agent",
                num_retries=0,
            ),
            tools=[Tool(name="terminal"), Tool(name="file_editor")],
        )
        conversation = Conversation(
            agent=agent,
            workspace=workspace,
            callbacks=[on_event],
            visualizer=None,
            delete_on_close=False,  # kept for the test's audit
        )
        assert isinstance(conversation, RemoteConversation)
        cid = str(conversation.id)
        step("created", cid)
        step("alive", workspace.alive)
        step("server_info", workspace.get_server_info())
        step("status_new", conversation.state.execution_status.value)

        # 1. a message and a run whose first response makes two tool calls at once
        conversation.send_message("Make hello.txt and say hi")
        conversation.run()
        step("status_after_run", conversation.state.execution_status.value)
        usage = conversation.conversation_stats.get_combined_metrics().accumulated_token_usage
        step("prompt_tokens", usage.prompt_tokens if usage else None)
        events = list(conversation.state.events)
        step("actions", [e.tool_name for e in events if isinstance(e, ActionEvent)])
        step(
            "observations",
            [
                e.observation.model_dump(mode="json")
                for e in events
                if isinstance(e, ObservationEvent)
            ],
        )
        with lock:
            step("socket_kinds", sorted({type(e).__name__ for e in seen}))
            step(
                "socket_full_states",
                sum(
                    1
                    for e in seen
                    if isinstance(e, ConversationStateUpdateEvent) and e.key == "full_state"
                ),
            )

        # 2. the same log through REST, page by page (the client's own full sync)
        conversation.state.events.reconcile()
        rest = workspace.client.get(f"/api/conversations/{cid}/events/search", params={"limit": 3})
        rest.raise_for_status()
        page = rest.json()
        step("page_size", len(page["items"]))
        step("page_next", page["next_page_id"])
        info = workspace.client.get(f"/api/conversations/{cid}").json()
        step("info_key", info["agent"]["llm"].get("api_key"))
        step("info_title", info["title"])
        conversation.set_title("Renamed by the SDK")
        step("title", workspace.client.get(f"/api/conversations/{cid}").json()["title"])

        # 3. confirmation: pending, rejected; pending again, accepted by run()
        conversation.set_confirmation_policy(AlwaysConfirm())
        # The client's cached state follows the socket's update (sent as the POST returns).
        wait_for(lambda: isinstance(conversation.state.confirmation_policy, AlwaysConfirm))
        step("policy", conversation.state.confirmation_policy.model_dump()["kind"])
        conversation.send_message("Now list the folder")
        conversation.run()
        step("status_pending", conversation.state.execution_status.value)
        conversation.reject_pending_actions("not now")
        conversation.state.refresh_from_server()
        step("status_rejected", conversation.state.execution_status.value)
        conversation.send_message("List it, please")
        conversation.run()
        step("status_pending_again", conversation.state.execution_status.value)
        conversation.set_confirmation_policy(NeverConfirm())
        conversation.run()  # accepts the waiting call, and the agent goes on
        step("status_accepted", conversation.state.execution_status.value)

        # 4. pause (nothing runs: paused now), then a run that goes on
        conversation.pause()
        conversation.state.refresh_from_server()
        step("status_paused", conversation.state.execution_status.value)
        conversation.send_message("One more thing")
        conversation.run()
        step("status_resumed", conversation.state.execution_status.value)

        # 5. the workspace: a command, an upload, a download
        result = workspace.execute_command("cat hello.txt && echo from-sdk", cwd=working_dir)
        step("command", {"exit_code": result.exit_code, "stdout": result.stdout})
        outside = workspace.execute_command("echo no", cwd="/etc")
        step("command_outside", {"exit_code": outside.exit_code, "stderr": outside.stderr})
        uploaded = workspace.file_upload(b"uploaded by the SDK\n", f"{working_dir}/up.txt")
        step("upload", {"success": uploaded.success, "size": uploaded.file_size})
        local = Path(out_path).with_name("downloaded.txt")
        downloaded = workspace.file_download(f"{working_dir}/up.txt", local)
        step("download", {"success": downloaded.success, "text": local.read_text()})
        escaped = workspace.file_download("/etc/passwd", local.with_name("passwd"))
        step("download_outside", {"success": escaped.success, "error": escaped.error})

        # 6. every event the server has validates as the SDK's own
        kinds = sorted({type(e).__name__ for e in conversation.state.events})
        step("event_kinds", kinds)
        step(
            "messages", [e.source for e in conversation.state.events if isinstance(e, MessageEvent)]
        )
        # 7. a fork (the whole path), whose head then moves back to the first message
        forked = conversation.fork(title="forked by the SDK")
        first_message = next(e for e in forked.state.events if isinstance(e, MessageEvent))
        forked.navigate_to(first_message.id)
        step(
            "fork",
            {
                "id": str(forked.id),
                "events": len([e for e in forked.state.events if isinstance(e, ActionEvent)]),
                "parent": len([e for e in conversation.state.events if isinstance(e, ActionEvent)]),
                "head": forked.state.model_dump().get("leaf_event_id") == first_message.id,
            },
        )
        forked.close()
        conversation.close()
        step("closed")

        # 8. a conversation made through Treadle's own API, attached to
        attached = Conversation(
            agent=agent,
            workspace=workspace,
            conversation_id=uuid.UUID(treadle_made),
            visualizer=None,
            delete_on_close=False,
        )
        step(
            "attached",
            {"id": str(attached.id), "status": attached.state.execution_status.value},
        )
        attached.close()

        # 9. another conversation, deleted by its close (the SDK's default)
        throwaway = Conversation(agent=agent, workspace=workspace, visualizer=None)
        gone = str(throwaway.id)
        throwaway.close()
        answer = workspace.client.get(f"/api/conversations/{gone}")
        step("deleted", {"id": gone, "status": answer.status_code})
    except BaseException:
        out["error"] = traceback.format_exc()
        Path(out_path).write_text(json.dumps(out, default=str))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
