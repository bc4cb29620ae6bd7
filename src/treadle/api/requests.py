"""Request bodies of the agent server's REST API: each refuses unknown fields and text no
store can encode, with a message naming where."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from treadle.data.ids import CONVERSATION_ID_MAX, CONVERSATION_ID_RULE, conversation_id_problem
from treadle.data.settings import ConversationSettings

SEQ_MIN = -1
SEQ_MAX = 2**63 - 1
"""Seq cursors: -1 (before the first event) .. the largest seq a store can hold (int64)."""
TITLE_MAX = 1000


def _valid_conversation_id(conversation_id: str) -> str:
    problem = conversation_id_problem(conversation_id)
    if problem is not None:
        raise ValueError(problem)
    return conversation_id


ConversationId = Annotated[
    str,
    Field(min_length=1, max_length=CONVERSATION_ID_MAX, description=CONVERSATION_ID_RULE),
    AfterValidator(_valid_conversation_id),
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _only_text(cls, data: Any) -> Any:
        # JSON may spell a lone surrogate ("\ud800"): it decodes to a str that no store (nor
        # any response) can encode, so it is refused here, for every body, naming where it is.
        where = surrogate_in(data)
        if where is not None:
            raise ValueError(f"{where} holds a lone surrogate (U+D800..U+DFFF): send valid UTF-8")
        return data


def surrogate_in(value: Any, where: str = "body") -> str | None:
    """Where in a decoded JSON value a string (or a key) holds a lone surrogate, or None."""
    stack = [(value, where)]
    while stack:  # no recursion: a deeply nested body must not exhaust the stack
        item, at = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return at
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and not _encodable(key):
                    return f"{at}: a key"
                stack.append((child, f"{at}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{at}[{index}]") for index, child in enumerate(item))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class CreateConversation(_Body):
    id: ConversationId | None = Field(
        default=None, description="Client-given id: creating it again is a no-op"
    )
    title: str | None = Field(default=None, max_length=TITLE_MAX)
    settings: ConversationSettings


class SendMessage(_Body):
    text: str = Field(min_length=1, max_length=1_000_000)


class RunRequest(_Body):
    max_steps: int = Field(default=50, ge=1, le=10_000)
    settings: ConversationSettings | None = Field(
        default=None,
        description="Settings for a conversation that has none (e.g. imported): stored with "
        "it when the run starts. A conversation with settings keeps its own (409)",
    )


class ActionChoice(_Body):
    action_ids: list[str] | None = Field(default=None, description="Default: every pending call")


class RejectRequest(ActionChoice):
    reason: str = Field(default="User rejected the action", max_length=100_000)


class ForkRequest(_Body):
    event_id: str | None = Field(default=None, description="Default: the head")
    title: str | None = Field(default=None, max_length=TITLE_MAX)
    restore_files: bool = Field(
        default=False,
        description="Fill the fork's own workspace with the files of the snapshot covering "
        "the event (needs `workspace`)",
    )
    workspace: str | None = Field(
        default=None,
        description="The fork's own workspace (inside the server's workspace root); default: "
        "it shares its parent's",
    )


class RaiseBudget(_Body):
    """``PATCH /budget``: budgets to raise (never lower) on a stored conversation; a field
    left out keeps its budget. The limits are those of ``ConversationSettings``."""

    max_cost_usd: float | None = Field(default=None, gt=0, le=1_000_000)
    max_total_tokens: int | None = Field(default=None, ge=1, le=10**12)

    @model_validator(mode="after")
    def _one_given(self) -> RaiseBudget:
        if self.max_cost_usd is None and self.max_total_tokens is None:
            raise ValueError("give max_cost_usd or max_total_tokens (or both) to raise")
        return self


class MoveHead(_Body):
    event_id: str
    restore_files: bool = Field(
        default=False,
        description="Also put the workspace's files back to the snapshot covering the event "
        "(the files as they are are snapshotted first)",
    )


class RestoreRequest(_Body):
    snapshot: str = Field(description="A snapshot id recorded in the conversation")
