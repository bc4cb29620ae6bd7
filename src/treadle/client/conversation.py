"""``TreadleClient`` and ``RemoteConversation``: the local ``Conversation``'s methods over the
agent server, plus the events API (search, count, every page, path, messages, audit, stream).
Answers come back as the typed models of ``treadle.api`` and ``treadle.events``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter, ValidationError

from treadle.api.evals import EvalList, EvalView
from treadle.client.http import BadResponse, HttpApi
from treadle.client.stream import EventSubscription, StreamClosed
from treadle.data.settings import ConversationSettings
from treadle.data.status import ConversationStatus
from treadle.data.transcript import TranscriptPage
from treadle.data.views import (
    Accepted,
    AuditView,
    ConversationList,
    ConversationView,
    CountView,
    DiffView,
    EventItem,
    EventPage,
    RestoreView,
    SnapshotList,
    SnapshotView,
    TreeView,
)
from treadle.events.links import pending_actions
from treadle.events.model import (
    EVENT_ADAPTER,
    EVENT_LIST_ADAPTER,
    ActionEvent,
    Event,
    MessageEvent,
)


class TreadleClient:
    """Entry point: ``TreadleClient("http://127.0.0.1:8000", api_key=...)``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        *,
        max_retries: int = 3,
    ) -> None:
        """``max_retries``: how often a GET answered 429/503 (or unreachable) is retried,
        honouring ``Retry-After``; other requests raise their typed ``RemoteError`` at once."""
        self.api = HttpApi(base_url, api_key, timeout, max_retries=max_retries)

    def create_conversation(
        self, settings: ConversationSettings, *, id: str | None = None, title: str | None = None
    ) -> RemoteConversation:
        body = {"id": id, "title": title, "settings": settings.model_dump(mode="json")}
        view = _read(ConversationView, self.api.request("POST", "/api/conversations", json=body))
        return RemoteConversation(self, view.id)

    def conversation(self, conversation_id: str) -> RemoteConversation:
        self.api.request("GET", f"/api/conversations/{conversation_id}")  # 404 now, not later
        return RemoteConversation(self, conversation_id)

    def list_conversations(self, *, limit: int = 50, offset: int = 0) -> ConversationList:
        """One page of conversations; pass ``next_offset`` as ``offset`` for the next."""
        answer = self.api.request(
            "GET", "/api/conversations", params={"limit": limit, "offset": offset}
        )
        return _read(ConversationList, answer)

    def list_evals(self, *, limit: int = 50, offset: int = 0) -> EvalList:
        """One page of the store's evals, newest first, each with its summary (no tasks)."""
        answer = self.api.request("GET", "/api/evals", params={"limit": limit, "offset": offset})
        return _read(EvalList, answer)

    def get_eval(self, eval_id: str) -> EvalView:
        """One eval with its tasks' results; each names its conversation (``conversation``)."""
        return _read(EvalView, self.api.request("GET", f"/api/evals/{quote(eval_id, safe='')}"))

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> TreadleClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class RemoteConversation:
    """A conversation on the server, with the methods of the local ``Conversation``: both are
    a ``treadle.api.handle.ConversationHandle`` (what differs is listed there)."""

    def __init__(self, client: TreadleClient, conversation_id: str) -> None:
        self.client = client
        self.id = conversation_id
        self._base = f"/api/conversations/{conversation_id}"

    def _call(self, method: str, path: str = "", **kwargs: Any) -> Any:
        return self.client.api.request(method, self._base + path, **kwargs)

    # -- state ----------------------------------------------------------------------------

    def info(self) -> ConversationView:
        return _read(ConversationView, self._call("GET"))

    @property
    def status(self) -> ConversationStatus:
        return self.info().status

    @property
    def head(self) -> str | None:
        return self.info().head_id

    # -- intents --------------------------------------------------------------------------

    def send_message(self, text: str) -> MessageEvent:
        """The stored message (as the local ``Conversation``'s)."""
        event = _adapt(EVENT_ADAPTER, self._call("POST", "/messages", json={"text": text}))
        if not isinstance(event, MessageEvent):
            raise BadResponse(f"the server answered a message with a {event.kind} event")
        return event

    def run(
        self,
        max_steps: int = 50,
        *,
        wait: bool = True,
        timeout_s: float = 300.0,
        settings: ConversationSettings | None = None,
    ) -> ConversationStatus:
        """Start a run; with ``wait`` (default) return the status it stopped in.
        ``settings``: for a conversation that has none (imported), stored with it."""
        body: dict[str, object] = {"max_steps": max_steps}
        if settings is not None:
            body["settings"] = settings.to_metadata()
        self._call("POST", "/run", json=body)
        return self.wait(timeout_s) if wait else ConversationStatus.RUNNING

    def wait(self, timeout_s: float = 300.0, poll_s: float = 0.05) -> ConversationStatus:
        """Wait until no run or confirmation is in progress here; the final status. Ends on
        the stream's ``run_finished`` (docs/stream.md); polls the view every ``poll_s`` only
        when the stream cannot be had (its socket refused or unreachable)."""
        deadline = time.monotonic() + timeout_s
        info = self.info()
        if _settled(info):
            return info.status
        try:
            return self._wait_on_stream(self._replay_after(info), deadline, poll_s)
        except StreamClosed:
            pass  # no stream (a proxy without WebSockets, refused): the view tells it too
        while time.monotonic() < deadline:
            info = self.info()
            if _settled(info):
                return info.status
            time.sleep(poll_s)
        raise TimeoutError(f"conversation {self.id} still running after {timeout_s} s")

    def _replay_after(self, info: ConversationView) -> int:
        """The seq to follow the stream after, so that the run_finished frame of a run that
        ended meanwhile comes again: it rides on the run's last status event, stored before the
        run's thread lets go, and the holder may append after it first (the messages queued
        since the last safe point, which it stores before letting go)."""
        after = max(-1, info.event_count - 2)
        if info.status is ConversationStatus.RUNNING:
            return after  # the run's end is not stored yet: it comes after what is there now
        newest = self.search(kinds="state_change", text='"key":"status"', order="desc", limit=1)
        if newest.items:
            after = min(after, newest.items[0].seq - 1)
        return after

    def _wait_on_stream(self, after_seq: int, deadline: float, poll_s: float) -> ConversationStatus:
        """Follow the stream from ``after_seq`` (so a run that ended meanwhile is replayed)
        until a ``run_finished`` whose run let go of the conversation here."""
        subscription = self.subscribe(after_seq, max_retries=0)
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), subscription.close)
        timer.start()
        try:
            for frame in subscription:
                if frame.get("type") != "run_finished":
                    continue
                # the run's last status is stored; its thread lets go of the run just after
                while time.monotonic() < deadline:
                    info = self.info()
                    if _settled(info):
                        return info.status
                    if info.status is ConversationStatus.RUNNING:
                        break  # a new run began meanwhile: wait for its end too
                    time.sleep(poll_s)
        finally:
            timer.cancel()
            subscription.close()
        raise TimeoutError(f"conversation {self.id} still running at the wait's deadline")

    def pause(self) -> None:
        """Stop the run at its next safe point (the calls in progress end first)."""
        self._call("POST", "/pause")

    def interrupt(self) -> None:
        """Stop the calls in progress now (their processes are killed, each is closed with an
        error marked ``interrupted: "user"``), then pause. Accepted at once; ``wait`` for the
        run to end."""
        self._call("POST", "/interrupt")

    def confirm(
        self, action_ids: Sequence[str] | None = None, *, wait: bool = True
    ) -> ConversationStatus:
        self._call(
            "POST", "/confirm", json={"action_ids": list(action_ids) if action_ids else None}
        )
        return self.wait() if wait else ConversationStatus.RUNNING

    def reject(
        self, action_ids: Sequence[str] | None = None, reason: str = "User rejected the action"
    ) -> ConversationStatus:
        body = {"action_ids": list(action_ids) if action_ids else None, "reason": reason}
        return _read(Accepted, self._call("POST", "/reject", json=body)).status

    def fork(
        self,
        event_id: str | None = None,
        *,
        title: str | None = None,
        restore_files: bool = False,
        workspace: str | None = None,
    ) -> RemoteConversation:
        """A new conversation up to ``event_id``; with ``restore_files`` and a ``workspace``
        of its own, that folder gets the files of the snapshot covering the event."""
        body: dict[str, Any] = {"event_id": event_id, "title": title}
        if restore_files or workspace is not None:  # an older server takes the plain body
            body.update(restore_files=restore_files, workspace=workspace)
        data = self._call("POST", "/fork", json=body)
        return RemoteConversation(self.client, _read(ConversationView, data).id)

    def switch_branch(self, event_id: str, *, restore_files: bool = False) -> RestoreView | None:
        """Make ``event_id`` the head; with ``restore_files`` the workspace's files go back
        to the snapshot covering it (what changed is returned; ``no_snapshot`` when none)."""
        body: dict[str, Any] = {"event_id": event_id}
        if restore_files:
            body["restore_files"] = True
        return _read(ConversationView, self._call("PUT", "/head", json=body)).restore

    def restore(self, snapshot: str) -> RestoreView:
        """Put a snapshot recorded in the conversation back (the undo of a restore)."""
        return _read(RestoreView, self._call("POST", "/restore", json={"snapshot": snapshot}))

    def snapshots(self, *, covering: str | None = None) -> list[SnapshotView]:
        """The recorded snapshots; with ``covering``, only the one a restore to that event
        would put back (empty when none does)."""
        params = _params({"covering": covering})
        return _read(SnapshotList, self._call("GET", "/snapshots", params=params)).items

    def batch_files(self, event_id: str) -> DiffView:
        """What the batch ``event_id`` starts (a response's first call) did to the files."""
        path = f"/events/{quote(event_id, safe='')}/files"
        return _read(DiffView, self._call("GET", path))

    def diff(self, event_a: str, event_b: str) -> DiffView:
        """The unified diff of the workspace's files from ``event_a`` to ``event_b``."""
        return _read(DiffView, self._call("GET", "/diff", params={"a": event_a, "b": event_b}))

    def raise_budget(
        self, *, max_cost_usd: float | None = None, max_total_tokens: int | None = None
    ) -> ConversationView:
        """Raise the conversation's budgets (never lower: ``budget_lowered``); ``run`` then
        continues a run a budget paused."""
        body = {"max_cost_usd": max_cost_usd, "max_total_tokens": max_total_tokens}
        return _read(ConversationView, self._call("PATCH", "/budget", json=body))

    def delete(self) -> None:
        self._call("DELETE")

    # -- events ---------------------------------------------------------------------------

    def search(self, **filters: Any) -> EventPage:
        """One page of events with their seqs, and ``next_cursor`` (filters as the server's)."""
        return _read(EventPage, self._call("GET", "/events", params=_params(filters)))

    def count(self, **filters: Any) -> int:
        return _read(CountView, self._call("GET", "/events/count", params=_params(filters))).count

    def iter_events(self, page_size: int = 500, **filters: Any) -> Iterator[EventItem]:
        """Every matching event, page after page by seq cursor."""
        cursor = filters.pop("after_seq", None)
        while True:
            page = self.search(**filters, after_seq=cursor, limit=page_size, order="asc")
            yield from page.items
            previous, cursor = cursor, page.next_cursor
            if cursor is None:
                return
            if previous is not None and cursor <= previous:  # would page forever
                raise BadResponse(f"the events cursor went from {previous} to {cursor}")

    def active_path(self, limit: int | None = None, head: str | None = None) -> list[Event]:
        params = {k: v for k, v in (("limit", limit), ("head", head)) if v is not None}
        return _adapt(EVENT_LIST_ADAPTER, self._call("GET", "/path", params=params))

    def pending_actions(self) -> list[ActionEvent]:
        return pending_actions(self.active_path())

    def transcript(
        self, head: str | None = None, *, before_seq: int | None = None, limit: int = 200
    ) -> TranscriptPage:
        """The newest ``limit`` transcript items of the path to ``head`` (default: the head),
        typed (``api.transcript``); pass ``next_before_seq`` as ``before_seq`` for older ones."""
        params = _params({"head": head, "before_seq": before_seq, "limit": limit})
        return _read(TranscriptPage, self._call("GET", "/transcript", params=params))

    def messages(self, head: str | None = None) -> list[dict[str, Any]]:
        """The OpenAI-format messages the model would be sent (PROJECT-*), as the model's
        service takes them: plain JSON objects."""
        return _adapt(_MESSAGES, self._call("GET", "/messages", params=_params({"head": head})))

    def audit(self, head: str | None = None, violations_limit: int | None = None) -> AuditView:
        """The audit of the whole log: the first ``violations_limit`` violations (the server's
        default: 1000) and exact totals (``AuditView.total``, ``violation_counts``)."""
        params = _params({"head": head, "violations_limit": violations_limit})
        return _read(AuditView, self._call("GET", "/audit", params=params))

    def tree(self) -> TreeView:
        return _read(TreeView, self._call("GET", "/tree"))

    def subscribe(self, after_seq: int = -1, **options: Any) -> EventSubscription:
        """A live, self-reconnecting subscription resuming from its last seq (``options``:
        ``EventSubscription``'s, e.g. ``max_retries`` and ``retry_deadline_s``)."""
        return EventSubscription(self.client.api, self.id, after_seq, **options)


def _settled(info: ConversationView) -> bool:
    """No run holds the conversation here and its log says it is not running."""
    return not info.running_here and info.status is not ConversationStatus.RUNNING


def _params(filters: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in filters.items() if value is not None}


T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
_MESSAGES: TypeAdapter[list[dict[str, Any]]] = TypeAdapter(list[dict[str, Any]])


def _read(model: type[M], answer: Any) -> M:
    """``answer`` (decoded JSON) as the typed model the endpoint promises, or BadResponse
    naming what does not fit (a server of another version, a proxy's page...)."""
    try:
        return model.model_validate(answer)
    except ValidationError as error:
        raise _bad_shape(error) from None


def _adapt(adapter: TypeAdapter[T], answer: Any) -> T:
    """``_read`` for a type that is not a model (an event, a list)."""
    try:
        return adapter.validate_python(answer)
    except ValidationError as error:
        raise _bad_shape(error) from None


def _bad_shape(error: ValidationError) -> BadResponse:
    return BadResponse(f"the server's answer is not the expected shape: {error}")
