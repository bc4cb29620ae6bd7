"""What a list of conversations shows of each one (``Overview``): status as a reader should
see it, and the tokens and cost of every model call in its log (the totals the store keeps
with the conversation, read with its row). Used by ``treadle conversations`` and ``treadle
log``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from treadle.runtime.status import ConversationStatus, as_read, read_status
from treadle.store.base import ConversationInfo, EventStore, StoreError
from treadle.store.leases import RunLeases, open_leases


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
    # the totals the store keeps with the conversation's row (store/usage_totals.py)
    return Overview(
        info, status.value, reason, info.prompt_tokens, info.completion_tokens, info.cost_usd
    )


def status_text(item: Overview) -> str:
    return item.status + (f" ({item.status_reason})" if item.status_reason else "")
