"""Why a conversation cannot do what was asked now (busy, nothing pending, not runnable here):
domain errors of the runtime, mapped to HTTP in one place (``server/errors.py``)."""

from __future__ import annotations

from collections.abc import Iterable

from treadle.errors import TreadleError


class ConversationError(TreadleError):
    """The conversation cannot do that now (busy, nothing pending, unknown action...)."""


class ConversationBusy(ConversationError):
    """A run (here or in another process) holds the conversation: the change must wait."""

    def __init__(self, conversation_id: str, detail: str = "is already running") -> None:
        self.conversation_id = conversation_id
        super().__init__(f"conversation {conversation_id} {detail}")


class TooManyRunning(ConversationError):
    """This process already runs as many conversations as it may; retry when one ends."""


class NotRunnable(ConversationError):
    """The stored conversation cannot be run in this process (its settings reach what the
    process refuses, its workspace moved, it has no settings)."""


class ForkNeedsWorkspace(ConversationError, ValueError):
    """A fork that restores files, without a workspace of its own to restore them into."""


class NothingPending(ConversationError):
    """A confirm or a reject, while no call is waiting for confirmation."""

    def __init__(self) -> None:
        super().__init__("no call is waiting for confirmation")


class NotWaiting(ConversationError):
    """Calls without a result that a run is running, not waiting for confirmation."""

    def __init__(self, status: str) -> None:
        self.status = status
        super().__init__(
            f"the calls without a result are not waiting for confirmation (status {status}): "
            "only a conversation waiting for confirmation takes a confirm or a reject"
        )


class NotPending(ConversationError):
    """A confirm or a reject naming calls that are not waiting for confirmation."""

    def __init__(self, unknown: Iterable[str], pending: Iterable[str]) -> None:
        self.unknown = list(unknown)
        self.pending = list(pending)
        super().__init__(
            f"not pending: {', '.join(self.unknown)}; pending calls: {', '.join(self.pending)}"
        )
