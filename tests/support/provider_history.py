"""A strict provider's check of a chat history (CONDENSE-VALID): every assistant message's
tool calls are answered, each once, by the tool messages right after it, and no tool message
stands anywhere else."""

from __future__ import annotations

from typing import Any


def provider_history_problems(messages: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            problems.append(f"message {index} has role {role!r}")
        if role == "tool":
            problems.append(
                f"message {index}: tool result {message.get('tool_call_id')!r} "
                "does not follow the assistant message of its call"
            )
            index += 1
            continue
        calls = [call["id"] for call in message.get("tool_calls") or ()]
        index += 1
        if role != "assistant" or not calls:
            continue
        if len(set(calls)) != len(calls):
            problems.append(f"message {index - 1} repeats a tool call id: {calls}")
        answered: list[str] = []
        while index < len(messages) and messages[index].get("role") == "tool":
            answered.append(messages[index].get("tool_call_id"))
            index += 1
        if sorted(answered) != sorted(set(calls)):
            problems.append(f"calls {calls} are answered by {answered}")
    return problems


def assert_valid_provider_history(messages: list[dict[str, Any]]) -> None:
    problems = provider_history_problems(messages)
    assert not problems, problems
