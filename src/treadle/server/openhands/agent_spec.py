"""An OpenHands SDK agent spec (``StartConversationRequest.agent``) read as Treadle settings,
and the spec shown back to a client (its secrets redacted).

What Treadle cannot honour is refused naming the field, never silently dropped: an unknown
tool, an ACP agent, plugins, client tools, hook config, AWS credentials. What only changes
how the SDK's own agent would run (retries, prompt templates, ``tool_module_qualnames``) is
ignored: those modules are never imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from treadle.data.settings import (
    ConfirmationPolicy,
    ConversationSettings,
    ModelChoice,
)
from treadle.server.errors import ApiError

REDACTED = "**********"
"""How the SDK itself writes a secret it does not expose."""

TOOL_NAMES: Mapping[str, str] = {
    "terminal": "terminal",
    "TerminalTool": "terminal",
    "bash": "terminal",
    "BashTool": "terminal",
    "execute_bash": "terminal",
    "file_editor": "file_editor",
    "FileEditorTool": "file_editor",
    "str_replace_editor": "file_editor",
    "task_tracker": "task_tracker",
    "TaskTrackerTool": "task_tracker",
}
"""SDK tool names -> Treadle's tools that do the same (openhands-tools 1.58.2's names and
their class names)."""
DEFAULT_TOOLS = ("think", "finish")
"""Tools every SDK agent has (``include_default_tools``): Treadle's think and finish."""
DEFAULT_TOOL_CLASSES = {"ThinkTool": "think", "FinishTool": "finish"}

SECRET_LLM_FIELDS = (
    "api_key",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
)
MAX_MAX_ITERATIONS = 10_000

CONFIRMATION_KINDS: Mapping[str, ConfirmationPolicy] = {
    "NeverConfirm": ConfirmationPolicy.NEVER,
    "AlwaysConfirm": ConfirmationPolicy.ALWAYS,
    "ConfirmRisky": ConfirmationPolicy.RISKY,
}


def _refuse(message: str) -> ApiError:
    return ApiError(422, "openhands_unsupported", message)


def _dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ApiError(422, "bad_request", f"{where} must be a JSON object")
    return value


def _text(value: Any, where: str, *, limit: int = 4096) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or "\0" in value:
        raise ApiError(
            422, "bad_request", f"{where} must be a string of at most {limit} characters"
        )
    return value


def tools_of(agent: Mapping[str, Any]) -> tuple[str, ...]:
    """Treadle's tools for the spec's ``tools`` (an unknown one: 422 naming it)."""
    raw = agent.get("tools") or []
    if not isinstance(raw, list) or len(raw) > 64:
        raise ApiError(422, "bad_request", "agent.tools must be a list of at most 64 tools")
    chosen: list[str] = []
    for item in raw:
        name = _dict(item, "agent.tools[]").get("name")
        if not isinstance(name, str):
            raise ApiError(422, "bad_request", "agent.tools[].name must be a string")
        mapped = TOOL_NAMES.get(name)
        if mapped is None:
            known = ", ".join(sorted({key for key in TOOL_NAMES if key.islower()}))
            raise _refuse(
                f"tool {name[:80]!r} is not available on this Treadle server; it has: {known} "
                "(think and finish are always there)"
            )
        if mapped not in chosen:
            chosen.append(mapped)
    defaults = agent.get("include_default_tools", list(DEFAULT_TOOL_CLASSES))
    if not isinstance(defaults, list):
        raise ApiError(422, "bad_request", "agent.include_default_tools must be a list")
    for name in defaults:
        mapped = DEFAULT_TOOL_CLASSES.get(name) if isinstance(name, str) else None
        if mapped is None:
            raise _refuse(f"default tool {str(name)[:80]!r} is not available on this server")
        if mapped not in chosen:
            chosen.append(mapped)
    return tuple(chosen)


def confirmation_of(policy: Any) -> ConfirmationPolicy:
    """Treadle's policy for an SDK ``ConfirmationPolicyBase`` JSON (default NeverConfirm)."""
    if policy is None:
        return ConfirmationPolicy.NEVER
    kind = _dict(policy, "confirmation_policy").get("kind")
    found = CONFIRMATION_KINDS.get(kind) if isinstance(kind, str) else None
    if found is None:
        raise _refuse(
            f"confirmation policy {str(kind)[:60]!r} is not supported: use one of "
            + ", ".join(CONFIRMATION_KINDS)
        )
    return found


def confirmation_json(policy: ConfirmationPolicy) -> dict[str, Any]:
    """The SDK's JSON for Treadle's policy."""
    if policy is ConfirmationPolicy.ALWAYS:
        return {"kind": "AlwaysConfirm"}
    if policy is ConfirmationPolicy.RISKY:
        return {"threshold": "HIGH", "confirm_unknown": True, "kind": "ConfirmRisky"}
    return {"kind": "NeverConfirm"}


def model_of(agent: Mapping[str, Any]) -> tuple[ModelChoice, str | None]:
    """The LiteLLM model the spec's ``llm`` names, and the key it carries (or None)."""
    if agent.get("kind", "Agent") != "Agent":
        raise _refuse(
            f"agent kind {str(agent.get('kind'))[:40]!r} is not supported: this server runs "
            "the SDK's Agent only (ACP agents run elsewhere)"
        )
    llm = _dict(agent.get("llm"), "agent.llm")
    model = _text(llm.get("model"), "agent.llm.model", limit=256)
    if not model:
        raise ApiError(422, "bad_request", "agent.llm.model is required")
    base_url = _text(llm.get("base_url"), "agent.llm.base_url", limit=2048)
    for name in SECRET_LLM_FIELDS[1:]:
        if llm.get(name):
            raise _refuse(f"agent.llm.{name} is not supported here: use api_key")
    key = _text(llm.get("api_key"), "agent.llm.api_key")
    if key == REDACTED:
        key = None  # a spec shown back by a server, not a key
    return ModelChoice(kind="litellm", model=model, base_url=base_url or None), key or None


def check_unsupported(request: Mapping[str, Any]) -> None:
    """422 for the create fields Treadle cannot honour (given, not empty)."""
    for name, why in (
        ("plugins", "plugins are not loaded by this server"),
        ("client_tools", "client tools are not run by this server"),
        ("hook_config", "give hooks in Treadle's own settings (docs/hooks.md)"),
        ("agent_definitions", "sub-agents are not run by this server"),
        ("agent_settings", "send an agent spec (agent) instead"),
        ("agent_profile_id", "send an agent spec (agent) instead"),
    ):
        if request.get(name):
            raise _refuse(f"{name} is not supported: {why}")
    runtime = request.get("conversation_runtime")
    if runtime not in (None, "local"):
        raise _refuse("this server only runs local conversations")


def settings_from_request(request: Mapping[str, Any], workspace: str) -> ConversationSettings:
    """Treadle settings for a create request (``workspace`` already checked)."""
    agent = _dict(request.get("agent"), "agent")
    model, _key = model_of(agent)
    fields: dict[str, Any] = {
        "model": model,
        "tools": tools_of(agent),
        "confirmation": confirmation_of(request.get("confirmation_policy")),
        "workspace": workspace,
    }
    prompt = _text(agent.get("system_prompt"), "agent.system_prompt", limit=200_000)
    if prompt:
        fields["system_prompt"] = prompt
    mcp = agent.get("mcp_config") or {}
    servers = _dict(mcp, "agent.mcp_config").get("mcpServers") or {}
    if servers:
        fields["mcp_servers"] = servers
    try:
        return ConversationSettings.model_validate(fields)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ApiError(422, "bad_request", f"agent spec: {where}: {first['msg']}") from None


def max_iterations_of(request: Mapping[str, Any]) -> int:
    value = request.get("max_iterations", 500)
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 1 <= value <= MAX_MAX_ITERATIONS
    ):
        raise ApiError(
            422, "bad_request", f"max_iterations must be an integer from 1 to {MAX_MAX_ITERATIONS}"
        )
    return value


def shown_agent(agent: Mapping[str, Any], had_key: bool) -> dict[str, Any]:
    """The spec as stored and shown: secrets redacted (the SDK's own mask when one was
    given), so that it reads back as an agent but carries no key."""
    shown = dict(agent)
    llm = dict(_dict(shown.get("llm"), "agent.llm"))
    for name in SECRET_LLM_FIELDS:
        if name in llm:
            llm[name] = None
    if had_key:
        llm["api_key"] = REDACTED
    shown["llm"] = llm
    return shown


def synthesized_agent(settings: ConversationSettings | None) -> dict[str, Any]:
    """An SDK agent spec for a conversation created through Treadle's own API."""
    model = settings.model.model if settings and settings.model.model else "scripted"
    tools = [] if settings is None else settings.tools
    sdk_tools = [{"name": name, "params": {}} for name in tools if name not in DEFAULT_TOOLS]
    return {
        "llm": {
            "model": model,
            "base_url": settings.model.base_url if settings else None,
            "api_key": None,
            "usage_id": "agent",
        },
        "tools": sdk_tools,
        "kind": "Agent",
    }
