"""What a hook's run decides, read as Claude Code reads it, except that a failed hook fails
closed unless it says ``"on_failure": "allow"``.

Exit 2: block, stderr the reason. Exit 0: stdout may be a JSON object: ``continue: false``
(with ``stopReason``) blocks; ``hookSpecificOutput.permissionDecision`` ``deny`` blocks with
``permissionDecisionReason``, ``ask`` makes the call wait for the user, ``allow`` decides
nothing (a hook never skips confirmation); the older ``decision: "block"`` with ``reason``
blocks; ``hookSpecificOutput.additionalContext`` adds context. A ``UserPromptSubmit`` hook's
plain (not JSON) stdout is context, as in Claude Code. Any other exit, a timeout, a crash, or a
reply that starts like JSON and is not: the hook failed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from treadle.data.hooks import HookCommand, HookEventName
from treadle.events.json_limits import JsonLimitError, load_json
from treadle.runtime.hooks.process import HookRun

Decision = Literal["block", "context", "none"]
"""The recorded decision of one hook run (SPEC "Recorded facts", ``hook``)."""


@dataclass(frozen=True, slots=True)
class HookVerdict:
    """What one hook run decided: ``reason`` when it blocks, ``context`` to add, ``ask``
    when a ``PreToolUse`` hook wants the user to confirm the call."""

    decision: Decision
    reason: str | None = None
    context: str | None = None
    ask: bool = False
    failure: str | None = None


def verdict(event: HookEventName, hook: HookCommand, run: HookRun) -> HookVerdict:
    """What ``run`` of ``hook`` for ``event`` decides."""
    failure = run.failure
    if failure is None and run.exit_code not in (0, 2):
        said = run.stderr.strip()
        failure = f"exited {run.exit_code}" + (f": {said}" if said else "")
    if failure is None and run.exit_code == 2:
        reason = run.stderr.strip() or "the hook exited 2 without saying why"
        return HookVerdict("block", reason=reason)
    if failure is None:
        try:
            return _reply(event, run.stdout)
        except ValueError as error:
            failure = str(error)
    return _failed(event, hook, failure)


def _failed(event: HookEventName, hook: HookCommand, failure: str) -> HookVerdict:
    if hook.on_failure == "allow" or event not in ("PreToolUse", "UserPromptSubmit"):
        return HookVerdict("none", failure=failure)  # nothing left to block after the fact
    what = "call" if event == "PreToolUse" else "message"
    reason = (
        f"the {event} hook `{hook.command}` {failure}; a hook that fails blocks the {what} "
        '(hooks fail closed unless they say "on_failure": "allow")'
    )
    return HookVerdict("block", reason=reason, failure=failure)


def _reply(event: HookEventName, stdout: str) -> HookVerdict:
    text = stdout.strip()
    if not text.startswith("{"):
        if event == "UserPromptSubmit" and text:
            return HookVerdict("context", context=text)
        return HookVerdict("none")
    try:
        reply = load_json(text)  # bounded: a reply nested 30,000 deep is refused, not a crash
    except (json.JSONDecodeError, JsonLimitError) as error:
        raise ValueError(f"replied with JSON that cannot be read ({error})") from None
    if not isinstance(reply, dict):
        raise ValueError("replied with JSON that is not an object")
    specific = reply.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    context = _text(specific.get("additionalContext"))
    if reply.get("continue") is False:
        if event == "Stop":  # "stop everything": the turn ends, as it was about to
            return HookVerdict("none")
        return HookVerdict("block", reason=_text(reply.get("stopReason")) or "stopped by a hook")
    permission = specific.get("permissionDecision")
    if event == "PreToolUse" and permission == "deny":
        reason = _text(specific.get("permissionDecisionReason")) or "denied by a hook"
        return HookVerdict("block", reason=reason, context=context)
    if reply.get("decision") == "block":
        reason = _text(reply.get("reason")) or "blocked by a hook"
        return HookVerdict("block", reason=reason, context=context)
    ask = event == "PreToolUse" and permission == "ask"
    return HookVerdict("context" if context else "none", context=context, ask=ask)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)
