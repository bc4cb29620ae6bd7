"""A stored conversation as the SDK's ``ConversationInfo`` JSON (also the value of the
``full_state`` state update the socket sends): the same conversation Treadle's API shows.

Statuses are the same words on both sides (``idle``, ``running``, ``paused``,
``waiting_for_confirmation``, ``finished``, ``error``, ``stuck``), so they map one to one; a
RUNNING log nobody runs (a crashed holder) reads as ``error``, as Treadle's API says.
"""

from __future__ import annotations

from typing import Any

from treadle.data.settings import ConversationSettings
from treadle.server.openhands.agent_spec import confirmation_json, synthesized_agent
from treadle.server.openhands.keys import META_KEY
from treadle.server.state import ServerState
from treadle.store.base import ConversationInfo

DEFAULT_MAX_ITERATIONS = 500
"""The SDK's own default ``max_iteration_per_run``."""


def openhands_facts(info: ConversationInfo) -> dict[str, Any]:
    facts = info.metadata.get(META_KEY)
    return facts if isinstance(facts, dict) else {}


def settings_of(info: ConversationInfo) -> ConversationSettings | None:
    try:
        return ConversationSettings.from_metadata(info.metadata)
    except ValueError:
        return None


def sdk_status(state: ServerState, info: ConversationInfo) -> str:
    status, reason = state.status_of(info.id)
    if status == "running" and reason is not None and "interrupted" in reason:
        return "error"
    return status


def _stamp(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def stats_json(info: ConversationInfo, model: str) -> dict[str, Any]:
    """The SDK's ``ConversationStats`` for the log's usage totals (one usage id: agent)."""
    if not (info.prompt_tokens or info.completion_tokens or info.cost_usd):
        return {"usage_to_metrics": {}}
    return {
        "usage_to_metrics": {
            "agent": {
                "model_name": model,
                "accumulated_cost": info.cost_usd,
                "accumulated_token_usage": {
                    "model": model,
                    "prompt_tokens": info.prompt_tokens,
                    "completion_tokens": info.completion_tokens,
                    "response_id": "",
                },
            }
        }
    }


def conversation_info(
    state: ServerState, info: ConversationInfo, *, status: str | None = None
) -> dict[str, Any]:
    """The SDK's ``ConversationInfo`` for ``info`` (its key never in it); ``status`` when the
    caller knows it (a conversation just made is idle)."""
    facts = openhands_facts(info)
    settings = settings_of(info)
    agent = facts.get("agent") or synthesized_agent(settings)
    model = str((agent.get("llm") or {}).get("model") or "")
    confirmation = (
        confirmation_json(settings.confirmation) if settings else {"kind": "NeverConfirm"}
    )
    return {
        "id": info.id,
        "title": info.title,
        "agent": agent,
        "workspace": {
            "working_dir": settings.workspace if settings else "",
            "kind": "LocalWorkspace",
        },
        "persistence_dir": None,
        "max_iterations": facts.get("max_iterations", DEFAULT_MAX_ITERATIONS),
        "stuck_detection": True,
        "execution_status": status or sdk_status(state, info),
        "confirmation_policy": confirmation,
        "security_analyzer": None,
        "activated_knowledge_skills": [],
        "invoked_skills": [],
        "blocked_actions": {},
        "blocked_messages": {},
        "last_user_message_id": None,
        "leaf_event_id": info.head_id,
        "stats": stats_json(info, model),
        "secret_registry": {"secret_sources": {}},
        "agent_state": {},
        "hook_config": None,
        "metrics": None,
        "created_at": _stamp(info.created_at),
        "updated_at": _stamp(info.updated_at),
        "tags": facts.get("tags") or {},
        "client_tools": [],
        "tool_module_qualnames": {},
    }
