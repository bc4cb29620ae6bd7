"""``ConversationHandle``: what a conversation offers wherever it runs, implemented by the local
``Conversation`` (in this process, on a store) and by ``RemoteConversation`` (on an agent
server, over HTTP and the stream). Code written against it runs in either place.

Where the two differ (each kept on purpose; README "The agent server and the typed client"):

- ``run``: local runs in the caller's thread and returns when the run stops; remote starts it
  on the server and, with ``wait`` (the default), returns when the stream says
  ``run_finished`` (``timeout_s``, ``settings`` for an imported conversation too).
- ``confirm``: remote takes ``wait`` too (the run goes on on the server).
- ``pause``: local also takes ``kind``, ``local_only`` and ``reason`` (the runtime's own).
- ``active_path``, ``messages``: remote also takes ``head`` (any branch, as the server does).
- ``fork``: each returns its own kind (a local fork is a ``Conversation``, a remote one a
  ``RemoteConversation``), both handles.
- ``switch_branch``: what a file restore changed comes back as the runtime's ``RestoreView``
  locally and as its wire view ``RestoreView`` remotely (the same fields); not in the protocol.
- ``raise_budget``: local takes a ``Budget`` and returns the stored settings, remote takes the
  two limits and returns the conversation's view; not in the protocol.
- ``send_message`` returns the stored ``MessageEvent`` in both (the client's used to say
  ``Event``).
- ``transcript`` is the same: a typed ``TranscriptPage``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from treadle.data.status import ConversationStatus
from treadle.data.transcript import TranscriptPage
from treadle.events.model import ActionEvent, Event, MessageEvent


@runtime_checkable
class ConversationHandle(Protocol):
    """One conversation, local or remote (see the module's list of what differs)."""

    @property
    def id(self) -> str: ...

    @property
    def status(self) -> ConversationStatus: ...

    @property
    def head(self) -> str | None: ...

    def send_message(self, text: str) -> MessageEvent: ...

    def run(self, max_steps: int = 50) -> ConversationStatus: ...

    def pause(self) -> None: ...

    def interrupt(self) -> None: ...

    def confirm(self, action_ids: Sequence[str] | None = None) -> ConversationStatus: ...

    def reject(
        self, action_ids: Sequence[str] | None = None, reason: str = "User rejected the action"
    ) -> ConversationStatus: ...

    def fork(
        self,
        event_id: str | None = None,
        *,
        title: str | None = None,
        restore_files: bool = False,
        workspace: str | None = None,
    ) -> ConversationHandle: ...

    def active_path(self, limit: int | None = None) -> list[Event]: ...

    def pending_actions(self) -> list[ActionEvent]: ...

    def messages(self) -> list[dict[str, Any]]: ...

    def transcript(
        self, head: str | None = None, *, before_seq: int | None = None, limit: int = 200
    ) -> TranscriptPage: ...
