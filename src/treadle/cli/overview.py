"""What a list of conversations shows of each one (``Overview``): status as a reader should
see it, and the tokens and cost of every model call in its log. Used by ``treadle
conversations`` and ``treadle log``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from treadle.events.model import ActionEvent, MessageEvent
from treadle.runtime.status import ConversationStatus, as_read, read_status
from treadle.store.base import ConversationInfo, EventQuery, EventStore, StoreError
from treadle.store.leases import RunLeases, open_leases

USAGE_TEXT = '"usage":{'
"""How a recorded usage shows in an event's stored JSON (compact, ``None`` left out): the
text filter finds the events of model calls without decoding the others."""
USAGE_PAGE = 1_000


@dataclass(frozen=True, slots=True)
class Overview:
    """One conversation as a list shows it. Tokens and cost add up every model call in the
    log, on every branch: a call on a branch left behind was paid for too."""

    info: ConversationInfo
    status: str
    status_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float

    def to_json_dict(self) -> dict[str, Any]:
        info = self.info
        return {
            "id": info.id,
            "title": info.title,
            "status": self.status,
            "status_reason": self.status_reason,
            "events": info.event_count,
            "tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "last_activity": info.updated_at.isoformat(),
            "created_at": info.created_at.isoformat(),
            "head_id": info.head_id,
        }


def usage_totals(store: EventStore, conversation_id: str) -> tuple[int, int, float]:
    """(prompt tokens, completion tokens, cost in USD) of every model call the log records.
    Only the events carrying a usage (one per model response) are read and decoded."""
    prompt = completion = 0
    cost = 0.0
    after: int | None = None
    while True:
        query = EventQuery(
            kinds=["action", "message"], text=USAGE_TEXT, after_seq=after, limit=USAGE_PAGE
        )
        page = store.search(conversation_id, query)
        for stored in page.items:
            event = stored.event
            if isinstance(event, ActionEvent | MessageEvent) and event.usage is not None:
                prompt += event.usage.prompt_tokens
                completion += event.usage.completion_tokens
                cost += event.usage.cost_usd
        if page.next_cursor is None:
            return prompt, completion, cost
        after = page.next_cursor


class LeaseLook:
    """Whether a run still has a live holder, for a reading command: the lease table is
    opened only when a conversation says it is running, and closed with this object."""

    def __init__(self, store_url: str) -> None:
        self._url = store_url
        self._leases: RunLeases | None = None
        self._failed = False

    def is_held(self, conversation_id: str) -> bool | None:
        """None when the lease table cannot be read (the status is shown as recorded)."""
        if self._failed:
            return None
        try:
            if self._leases is None:
                self._leases = open_leases(self._url)
            return self._leases.is_held(conversation_id)
        except StoreError:
            self._failed = True
            return None

    def close(self) -> None:
        if self._leases is not None:
            self._leases.close()


def overview(store: EventStore, info: ConversationInfo, leases: LeaseLook) -> Overview:
    status, reason = read_status(store, info.id)
    if status is ConversationStatus.RUNNING:  # the lease is read only when it matters
        status, reason = as_read(status, reason, leases.is_held(info.id))
    prompt, completion, cost = usage_totals(store, info.id)
    return Overview(info, status.value, reason, prompt, completion, cost)


def status_text(item: Overview) -> str:
    return item.status + (f" ({item.status_reason})" if item.status_reason else "")
