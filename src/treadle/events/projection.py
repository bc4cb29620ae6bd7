"""The projection (PROJECT-*): the active path to the OpenAI chat messages the model is sent.

Owns condensation, batching, result placement, dropping unanswered responses and user merging.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from treadle.errors import ContractError
from treadle.events.model import RESULT_KINDS, ActionEvent, CondensationEvent, EventBase

Message = dict[str, Any]
"""One OpenAI chat message (``role``, ``content``, and ``tool_calls`` or ``tool_call_id``)."""

__all__ = [
    "Message",
    "Summary",
    "ViewItem",
    "condensed_view",
    "count_tool_calls",
    "project_messages",
]


def project_messages(path: Sequence[EventBase], *, raw: bool = False) -> list[Message]:
    """The messages the model is sent for ``path`` (root first, as ``path_to_root`` returns it).

    Equals the OpenHands SDK's condensation-aware view (``View.from_events``) turned into
    messages: condensations apply in path order; then, unless ``raw``, a response with a call
    that has no result is left out with its results (PROJECT-UNANSWERED), a result answering
    no call in the view is left out, and a call's first result wins. ``raw=True`` keeps them:
    the plain batching of what condensation left, unanswered calls included (docs/contracts.md, worked
    example 2). One deliberate difference: a result that arrived after some other message is
    moved up to its call, where the SDK would send it late, in an order providers refuse.

    In both modes: consecutive actions of one response are one assistant message
    (PROJECT-BATCH); results follow their call's assistant message in arrival order, and a
    message that arrived before them comes after them (PROJECT-RESULTS); adjacent user texts,
    condensation summaries included, become one user message (PROJECT-USER-MERGE).
    ``reasoning_content`` is present exactly when the reasoning text is non-empty.

    Raises ContractError PROJECT-SHARED-TEXT or PROJECT-DUP-CALL for any batch in the view,
    sent or not (the log is broken either way). Never changes ``path`` or its events
    (PROJECT-PURE).
    """
    drop_unsendable = not raw
    laid = _lay_out_uncondensed(path, drop_unsendable)
    unsent_responses: set[str] = set()
    if laid is None:  # the path holds a condensation: lay out what it leaves instead
        view = _condensed_view(path)
        laid = _lay_out(view, drop_unsendable)
        if drop_unsendable:
            unsent_responses = _partly_forgotten_responses(view, path)
    if drop_unsendable:
        unsent_responses.update(laid.unanswered_responses())
    return _flatten(laid, unsent_responses)


def count_tool_calls(messages: Iterable[Mapping[str, Any]]) -> int:
    """Tool calls across ``messages``; PROJECT-CONSERVE: equals the number of actions projected."""
    return sum(len(message.get("tool_calls") or ()) for message in messages)


# -- condensation: what the view keeps ----------------------------------------------------

_INVISIBLE_KINDS = frozenset({"pause", "state_change", "foreign"})
"""Kinds with no message; they neither appear nor end a batch."""


class Summary:
    """A condensation's summary standing in the view, as the SDK's CondensationSummaryEvent;
    it carries the SDK's derived id so that a later condensation can forget it."""

    __slots__ = ("id", "text")
    kind = "summary"

    def __init__(self, condensation_id: str, text: str) -> None:
        self.id = summary_id(condensation_id)
        self.text = text


ViewItem = EventBase | Summary
"""One item of a condensed view: a model-visible event, or a summary standing in for others."""


def summary_id(condensation_id: str) -> str:
    """The id a condensation's summary has in the view (the SDK's derived id)."""
    return f"{condensation_id}-summary"


def condensed_view(path: Sequence[EventBase]) -> list[ViewItem]:
    """The model-visible events of ``path`` that its condensations leave, in order, with each
    summary where it stands (what the projection lays out; the condenser chooses from it)."""
    return _condensed_view(path)


def _condensed_view(path: Sequence[EventBase]) -> list[Any]:
    """The events of ``path`` that condensations leave, with summaries where they stand.

    As the SDK's View: a condensation acts only on the view built so far, in path order.
    Events that are not model-visible stay out (they have no message).
    """
    view: list[Any] = []
    for event in path:
        if isinstance(event, CondensationEvent):
            view = _apply_condensation(view, event)
        elif event.kind not in _INVISIBLE_KINDS:
            view.append(event)
    return view


def _apply_condensation(view: list[Any], condensation: CondensationEvent) -> list[Any]:
    forgotten = frozenset(condensation.forgotten_event_ids)
    kept = [item for item in view if item.id not in forgotten]
    # The SDK inserts the summary only when both are set; an empty summary still stands.
    if condensation.summary is not None and condensation.summary_offset is not None:
        kept.insert(condensation.summary_offset, Summary(condensation.id, condensation.summary))
    return kept


def _partly_forgotten_responses(view: list[Any], path: Sequence[EventBase]) -> set[str]:
    """Responses with some but not all of their actions in ``view`` (the SDK's
    BatchAtomicity): sending the rest would split the model's answer, so none is sent."""
    in_view = Counter(item.llm_response_id for item in view if item.kind == "action")
    in_path = Counter(event.llm_response_id for event in path if isinstance(event, ActionEvent))
    return {response for response, count in in_view.items() if in_path[response] != count}


# -- the layout: one pass -----------------------------------------------------------------


class _CondensationMet(Exception):
    """The path holds a condensation, so it must be laid out through its view."""


def _lay_out_uncondensed(path: Sequence[EventBase], drop_unsendable: bool) -> _Laid | None:
    """The common case in one pass: the layout of a path with no condensation, else None."""
    try:
        return _lay_out(path, drop_unsendable)
    except _CondensationMet:
        return None
    except ContractError:
        # A later condensation may forget the broken batch: only its view can tell.
        if any(event.kind == "condensation" for event in path):
            return None
        raise


class _Laid:
    """What one pass produced: the messages in arrival order, and where results that
    arrived late (after another message) go back to."""

    __slots__ = ("batch_end", "batch_response", "entries", "late_results", "open_actions")

    def __init__(self) -> None:
        self.entries: list[Message] = []
        self.batch_response: dict[int, str] = {}
        """Entry index of each batch message -> its response id."""
        self.batch_end: dict[int, int] = {}
        """Entry index of each batch message -> index of the last entry of its run: the batch
        message and the results that followed it directly."""
        self.late_results: dict[int, list[Message]] = {}
        """Entry index ending a batch's run -> results of that batch that arrived later."""
        self.open_actions: dict[str, int] = {}
        """Action id -> entry index of its batch, for actions no result answered."""

    def unanswered_responses(self) -> set[str]:
        batch_response = self.batch_response
        return {batch_response[batch] for batch in self.open_actions.values()}


def _lay_out(items: Iterable[Any], drop_unsendable: bool) -> _Laid:
    """Messages for ``items`` (a path or a view) in one pass; a condensation stops it.

    A result is matched to its call by ``action_id``, else ``tool_call_id`` (as
    ``links.pending_actions``), never by position. It joins its batch's run when nothing else
    came in between (the usual case), else it is kept aside to go back there, so a message that
    arrived earlier lands after it. With ``drop_unsendable`` a result answering no call so far,
    or a call already answered, is not sent, and so does not end a batch either.
    This loop is the hot path: locals only, one touch per field, no allocation that is not
    output (allocations feed the cyclic GC, whose passes over a large event heap cost more
    than this whole loop).
    """
    laid = _Laid()
    entries = laid.entries
    batch_response = laid.batch_response
    batch_end = laid.batch_end
    late_results = laid.late_results
    open_actions = laid.open_actions
    batch_of_action: dict[str, int] = {}
    call_id_of_action: dict[str, str] = {}
    action_of_call_id: dict[str, str] = {}
    batch: Message | None = None  # the batch message later actions may still join
    batch_first_id = ""
    tail_batch = -1  # the batch whose run the entries end with, if any
    for item in items:
        kind = item.kind
        if kind == "action":
            response_id = item.llm_response_id
            action_id = item.id
            call_id = item.tool_call_id
            if batch is not None and response_id == batch_response[tail_batch]:
                earlier = action_of_call_id.get(call_id)
                same_batch = earlier is not None and batch_of_action[earlier] == tail_batch
                _check_joins_batch(item, batch_first_id, earlier if same_batch else None)
                batch["tool_calls"].append(_tool_call(item))
            else:
                if tail_batch >= 0:
                    batch_end[tail_batch] = len(entries) - 1
                tail_batch = len(entries)
                batch = _batch_message(item)
                batch_first_id = action_id
                batch_response[tail_batch] = response_id
                entries.append(batch)
            batch_of_action[action_id] = tail_batch
            call_id_of_action[action_id] = call_id
            action_of_call_id[call_id] = action_id
            open_actions[action_id] = tail_batch
            continue
        if kind in RESULT_KINDS:
            answered_id = item.action_id
            if answered_id is None or answered_id not in batch_of_action:
                answered_id = action_of_call_id.get(item.tool_call_id)
            if answered_id is not None and (
                open_actions.pop(answered_id, None) is not None or not drop_unsendable
            ):
                answered_batch = batch_of_action[answered_id]
                message = _tool_message(item, call_id_of_action[answered_id])
                if answered_batch == tail_batch:
                    entries.append(message)
                else:
                    late_results.setdefault(batch_end[answered_batch], []).append(message)
                batch = None
                continue
            if drop_unsendable:
                continue  # not sent (SDK ObservationUniqueness / ToolCallMatching)
            message = _tool_message(item, item.tool_call_id)
        elif kind == "message":
            message = _text_message(item)
        elif kind == "system_prompt":
            message = {"role": "system", "content": _system_text(item)}
        elif kind == "summary":
            message = {"role": "user", "content": item.text}
        elif kind == "condensation":
            raise _CondensationMet
        else:
            continue  # pause, state change, foreign
        if tail_batch >= 0:
            batch_end[tail_batch] = len(entries) - 1
            tail_batch = -1
        batch = None
        entries.append(message)
    if tail_batch >= 0:
        batch_end[tail_batch] = len(entries) - 1
    return laid


def _flatten(laid: _Laid, unsent_responses: set[str]) -> list[Message]:
    """The message list: late results put back after their batch's run, unsent responses
    (their batch messages and results) left out, and adjacent user messages merged
    (PROJECT-USER-MERGE), which is done here so that user messages around a response that is
    not sent merge too."""
    left_out: set[int] = set()
    if unsent_responses:
        batch_end = laid.batch_end
        for batch, response_id in laid.batch_response.items():
            if response_id in unsent_responses:
                left_out.update(range(batch, batch_end[batch] + 1))
    late_results = laid.late_results
    messages: list[Message] = []
    for index, entry in enumerate(laid.entries):
        if index in left_out:
            continue
        if entry["role"] == "user" and messages and messages[-1]["role"] == "user":
            _append_parts(messages[-1], entry["content"])
        else:
            messages.append(entry)
        if late_results:
            late = late_results.get(index)
            if late is not None:
                messages.extend(late)
    return messages


# -- one message each ---------------------------------------------------------------------


def _check_joins_batch(action: Any, first_id: str, same_call_in_batch: str | None) -> None:
    """PROJECT-SHARED-TEXT and PROJECT-DUP-CALL for an action joining a batch;
    ``same_call_in_batch`` is the batch's action with the same tool call id, if any."""
    if action.thought or action.reasoning:
        raise ContractError(
            "PROJECT-SHARED-TEXT",
            f"action {action.id!r} is not the first of response {action.llm_response_id!r} but "
            "carries thought or reasoning; only the first action of a response carries the "
            "shared text, else it would be sent twice",
            event_ids=[first_id, action.id],
        )
    if same_call_in_batch is not None:
        raise ContractError(
            "PROJECT-DUP-CALL",
            f"actions {same_call_in_batch!r} and {action.id!r} of response "
            f"{action.llm_response_id!r} share tool call id {action.tool_call_id!r}",
            event_ids=[same_call_in_batch, action.id],
        )


def _batch_message(first: Any) -> Message:
    """The assistant message of a response, with its first call; later calls join it."""
    thought = first.thought
    message: Message = {
        "role": "assistant",
        # As the SDK: blank text beside tool calls is no text.
        "content": thought if thought and not thought.isspace() else None,
        "tool_calls": [_tool_call(first)],
    }
    reasoning = first.reasoning
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def _tool_call(action: Any) -> Message:
    return {
        "id": action.tool_call_id,
        "type": "function",
        "function": {"name": action.tool_name, "arguments": action.raw_arguments},
    }


def _tool_message(result: Any, tool_call_id: str) -> Message:
    """A result as the tool message answering ``tool_call_id``: the call's id when matched
    (a mismatch is LINK-ID, for the audit; the message must answer a call that was sent)."""
    kind = result.kind
    if kind == "observation":
        content: str | list[Message] = _content(result.content, result.image_urls)
    elif kind == "agent_error":
        content = result.error
    else:  # user_rejection, worded as the SDK's UserRejectObservation
        content = f"Action rejected: {result.reason}"
    return {
        "role": "tool",
        "tool_call_id": tool_call_id,
        "name": result.tool_name,
        "content": content,
    }


def _system_text(event: Any) -> str:
    """The system prompt, then the workspace's instructions recorded with it (as the SDK
    sends its dynamic context: a second text of the same message, joined by a newline)."""
    context = event.context
    return event.text if context is None else f"{event.text}\n{context}"


def _text_message(event: Any) -> Message:
    content = _content(event.text, event.image_urls, event.extended_content)
    message: Message = {"role": event.role, "content": content}
    if event.role == "assistant" and event.reasoning:
        message["reasoning_content"] = event.reasoning
    return message


def _content(
    text: str, image_urls: Sequence[str], extended: Sequence[str] = ()
) -> str | list[Message]:
    """A string, or content parts when there are images (the text part only if non-empty).
    ``extended`` (a message's added skills) follows the message's own content, each its own
    text, as the SDK sends a message's extended content; joined by newlines when plain."""
    if not image_urls:
        if not extended:
            return text
        return "\n".join((text, *extended) if text else extended)
    parts: list[Message] = [{"type": "text", "text": text}] if text else []
    parts.extend({"type": "image_url", "image_url": {"url": url}} for url in image_urls)
    parts.extend({"type": "text", "text": added} for added in extended)
    return parts


def _append_parts(message: Message, content: str | list[Message]) -> None:
    """Merge ``content`` into ``message``, whose content becomes a parts list. Both were built
    by this projection, never taken from an event, so changing them in place is safe."""
    parts = message["content"]
    if type(parts) is str:
        parts = message["content"] = [{"type": "text", "text": parts}]
    if type(content) is str:
        parts.append({"type": "text", "text": content})
    else:
        parts.extend(content)
