"""Properties of the projection over random logs (hypothesis): tool calls are conserved, the
input is never changed, every sent call is answered once right after it, and on SDK-shaped
logs the result equals a literal transcription of the OpenHands SDK 1.58.2 algorithm."""

import json
from dataclasses import dataclass, field

from hypothesis import given, note
from hypothesis import strategies as st

from treadle.events.model import (
    MODEL_VISIBLE_KINDS,
    RESULT_KINDS,
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateChangeEvent,
    SystemPromptEvent,
    UserRejectionEvent,
    event_to_json,
)
from treadle.events.projection import count_tool_calls, project_messages

# -- building logs ------------------------------------------------------------------------


@dataclass
class LogBuilder:
    """A log under construction, with what is known about its calls."""

    events: list = field(default_factory=list)
    pending: list = field(default_factory=list)
    """Actions with no result yet, in call order."""
    answered: list = field(default_factory=list)
    actions_of_response: dict = field(default_factory=dict)
    counter: int = 0

    def new_id(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def user(self, text):
        self.events.append(MessageEvent(id=self.new_id("u"), source="user", text=text))

    def agent_text(self, text, reasoning):
        event = MessageEvent(id=self.new_id("m"), source="agent", text=text, reasoning=reasoning)
        self.events.append(event)

    def invisible(self, which):
        if which == "pause":
            self.events.append(PauseEvent(id=self.new_id("p")))
        else:
            self.events.append(StateChangeEvent(id=self.new_id("s"), key="status", value="x"))

    def response(self, k, thought, reasoning, invisible_between):
        response_id = self.new_id("resp")
        actions = []
        for index in range(k):
            if index and invisible_between:
                self.invisible("state_change")
            action_id = self.new_id("a")
            arguments = json.dumps({"command": f"run {action_id}", "pad": "x" * index})
            action = ActionEvent(
                id=action_id,
                llm_response_id=response_id,
                tool_call_id=f"call-{action_id}",
                tool_name="terminal",
                raw_arguments=arguments,
                thought=thought if index == 0 else "",
                reasoning=reasoning if index == 0 else None,
            )
            self.events.append(action)
            actions.append(action)
        self.actions_of_response[response_id] = actions
        self.pending.extend(actions)
        return actions

    def answer(self, action, how):
        if action in self.pending:
            self.pending.remove(action)
            self.answered.append(action)
        self.events.append(result_event(self.new_id("r"), action, how))

    def stray_result(self):
        ghost = ActionEvent(
            id="ghost",
            llm_response_id="g",
            tool_call_id="call-ghost",
            tool_name="t",
            raw_arguments="",
        )
        self.events.append(result_event(self.new_id("r"), ghost, "observation"))

    def sent_action_count(self):
        """Actions of responses whose every call is answered: what non-raw mode sends."""
        unanswered = {action.llm_response_id for action in self.pending}
        return sum(
            len(actions)
            for response, actions in self.actions_of_response.items()
            if response not in unanswered
        )


def result_event(event_id, action, how):
    if how == "observation":
        return ObservationEvent(
            id=event_id,
            action_id=action.id,
            tool_call_id=action.tool_call_id,
            tool_name=action.tool_name,
            content=f"output of {action.id}",
        )
    if how == "agent_error":
        return AgentErrorEvent(
            id=event_id, tool_call_id=action.tool_call_id, tool_name=action.tool_name, error="bad"
        )
    return UserRejectionEvent(
        id=event_id,
        action_id=action.id,
        tool_call_id=action.tool_call_id,
        tool_name=action.tool_name,
    )


texts = st.text(alphabet="abc xyz", max_size=6)
result_kinds = st.sampled_from(["observation", "agent_error", "user_rejection"])


@st.composite
def interleaved_logs(draw):
    """Responses with k calls whose results arrive in any order, spread among user messages,
    other responses, pauses, duplicate and stray results; some calls stay unanswered."""
    log = LogBuilder()
    log.events.append(SystemPromptEvent(id="sys", text="system"))
    for _ in range(draw(st.integers(0, 25))):
        step = draw(
            st.sampled_from(["user", "agent", "response", "answer", "answer", "invisible", "odd"])
        )
        if step == "user":
            log.user(draw(texts))
        elif step == "agent":
            log.agent_text(draw(texts), draw(st.none() | texts))
        elif step == "response":
            log.response(
                draw(st.integers(1, 4)), draw(texts), draw(st.none() | texts), draw(st.booleans())
            )
        elif step == "answer" and log.pending:
            log.answer(draw(st.sampled_from(log.pending)), draw(result_kinds))
        elif step == "invisible":
            log.invisible(draw(st.sampled_from(["pause", "state_change"])))
        elif step == "odd":
            if log.answered and draw(st.booleans()):
                log.answer(draw(st.sampled_from(log.answered)), draw(result_kinds))  # a duplicate
            else:
                log.stray_result()
    if draw(st.booleans()):  # complete: every call answered, in a random order
        for action in draw(st.permutations(list(log.pending))):
            log.answer(action, draw(result_kinds))
    return log


# -- properties on any log ----------------------------------------------------------------


@given(interleaved_logs())
def test_tool_calls_in_equal_tool_calls_out(log):
    actions = sum(1 for event in log.events if event.kind == "action")
    assert count_tool_calls(project_messages(log.events, raw=True)) == actions
    assert count_tool_calls(project_messages(log.events)) == log.sent_action_count()
    if not log.pending:
        assert count_tool_calls(project_messages(log.events)) == actions


@given(interleaved_logs())
def test_projection_leaves_its_input_unchanged(log):
    path = log.events
    before = [event_to_json(event) for event in path]
    same_objects = list(path)
    for raw in (False, True):
        project_messages(path, raw=raw)
        assert [event_to_json(event) for event in path] == before
        assert len(path) == len(same_objects)
        assert all(a is b for a, b in zip(path, same_objects, strict=True))


@given(interleaved_logs())
def test_every_sent_call_is_answered_once_before_the_next_assistant_message(log):
    messages = project_messages(log.events)
    note(json.dumps(messages, indent=1))
    waiting: list[str] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            assert message["tool_call_id"] in waiting, "a tool message answers no waiting call"
            waiting.remove(message["tool_call_id"])
            continue
        assert not waiting, f"calls {waiting} unanswered before a {role} message"
        if role == "assistant" and message.get("tool_calls"):
            waiting = [tool_call["id"] for tool_call in message["tool_calls"]]
    assert not waiting


@given(interleaved_logs(), st.booleans())
def test_user_texts_keep_their_order_and_adjacent_ones_merge(log, raw):
    messages = project_messages(log.events, raw=raw)
    sent_texts = []
    for previous, message in zip([None, *messages], messages, strict=False):
        if message["role"] != "user":
            continue
        assert previous is None or previous["role"] != "user"
        content = message["content"]
        parts = [content] if isinstance(content, str) else [part["text"] for part in content]
        sent_texts.extend(parts)
    user_texts = [e.text for e in log.events if e.kind == "message" and e.role == "user"]
    assert sent_texts == user_texts


# -- equality with the SDK on SDK-shaped logs ---------------------------------------------


@dataclass
class ReferenceSummary:
    id: str
    text: str
    kind: str = "summary"


def sdk_reference(path):
    """A literal, slow transcription of SDK 1.58.2: ``View.from_events`` (Condensation.apply,
    then ObservationUniqueness, BatchAtomicity and ToolCallMatching enforced to a fixed point,
    all by tool_call_id) and ``LLMConvertibleEvent.events_to_messages``."""
    view = []
    for event in path:
        if event.kind == "condensation":
            view = [item for item in view if item.id not in set(event.forgotten_event_ids)]
            if event.summary is not None and event.summary_offset is not None:
                summary = ReferenceSummary(f"{event.id}-summary", event.summary)
                view.insert(event.summary_offset, summary)
        elif event.kind in MODEL_VISIBLE_KINDS:
            view.append(event)
    while True:
        for enforce in (_uniqueness, _batch_atomicity, _tool_call_matching):
            forget = enforce(view, path)
            if forget:
                view = [item for item in view if item.id not in forget]
                break
        else:
            return _events_to_messages(view)


def _uniqueness(view, _path):
    seen, forget = set(), set()
    for item in view:
        if item.kind in RESULT_KINDS:
            if item.tool_call_id in seen:
                forget.add(item.id)
            seen.add(item.tool_call_id)
    return forget


def _batch_atomicity(view, path):
    def batches(events):
        found = {}
        for event in events:
            if event.kind == "action":
                found.setdefault(event.llm_response_id, set()).add(event.id)
        return found

    everything = batches(path)
    return set().union(
        *(ids for response, ids in batches(view).items() if ids != everything[response])
    )


def _tool_call_matching(view, _path):
    calls = {item.tool_call_id for item in view if item.kind == "action"}
    answers = {item.tool_call_id for item in view if item.kind in RESULT_KINDS}
    return {
        item.id
        for item in view
        if (item.kind == "action" and item.tool_call_id not in answers)
        or (item.kind in RESULT_KINDS and item.tool_call_id not in calls)
    }


def _events_to_messages(view):
    messages = []
    index = 0
    while index < len(view):
        item = view[index]
        if item.kind == "action":
            end = index + 1
            while (
                end < len(view)
                and view[end].kind == "action"
                and view[end].llm_response_id == item.llm_response_id
            ):
                end += 1
            message = {
                "role": "assistant",
                "content": item.thought if item.thought.strip() else None,
                "tool_calls": [
                    {
                        "id": a.tool_call_id,
                        "type": "function",
                        "function": {"name": a.tool_name, "arguments": a.raw_arguments},
                    }
                    for a in view[index:end]
                ],
            }
            if item.reasoning:
                message["reasoning_content"] = item.reasoning
            index = end
        else:
            message = _reference_message(item)
            index += 1
        if messages and messages[-1]["role"] == "user" and message["role"] == "user":
            messages[-1]["content"] = _parts(messages[-1]["content"]) + _parts(message["content"])
        else:
            messages.append(message)
    return messages


def _reference_message(item):
    if item.kind == "summary":
        return {"role": "user", "content": item.text}
    if item.kind == "system_prompt":
        return {"role": "system", "content": item.text}
    if item.kind == "message":
        message = {"role": item.role, "content": item.text}
        if item.role == "assistant" and item.reasoning:
            message["reasoning_content"] = item.reasoning
        return message
    content = {
        "observation": lambda: item.content,
        "agent_error": lambda: item.error,
        "user_rejection": lambda: f"Action rejected: {item.reason}",
    }[item.kind]()
    return {
        "role": "tool",
        "tool_call_id": item.tool_call_id,
        "name": item.tool_name,
        "content": content,
    }


def _parts(content):
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def results_follow_their_calls(messages):
    """Whether each batch is followed by exactly its results: the order providers accept, and
    the one in which the SDK's literal order and Treadle's placement coincide."""
    try:
        waiting: list[str] = []
        for message in messages:
            if message["role"] == "tool":
                waiting.remove(message["tool_call_id"])
            elif waiting:
                return False
            elif message.get("tool_calls"):
                waiting = [tool_call["id"] for tool_call in message["tool_calls"]]
        return not waiting
    except ValueError:
        return False


@st.composite
def sdk_shaped_logs(draw):
    """Logs as the SDK writes them: a response's results follow all its actions (in any
    order); the last response may still wait for results; condensations forget any earlier
    events (summaries too) and put a summary at any offset."""
    log = LogBuilder()
    log.events.append(SystemPromptEvent(id="sys", text="system"))
    forgettable = ["sys"]
    turns = draw(st.integers(0, 10))
    for turn in range(turns):
        step = draw(st.sampled_from(["user", "agent", "response", "response", "condense"]))
        if step == "user":
            log.user(draw(texts))
        elif step == "agent":
            log.agent_text(draw(texts), draw(st.none() | texts))
        elif step == "response":
            actions = log.response(
                draw(st.integers(1, 4)),
                draw(texts),
                draw(st.none() | texts),
                draw(st.booleans()),
            )
            order = draw(st.permutations(actions))
            if turn == turns - 1:  # only the last response may wait (confirmation, running)
                order = order[: draw(st.integers(0, len(order)))]
            for action in order:
                log.answer(action, draw(result_kinds))
        else:
            condensation_id = log.new_id("k")
            forgotten = (
                draw(st.lists(st.sampled_from(forgettable), unique=True)) if forgettable else []
            )
            summary = draw(st.none() | texts)
            offset = draw(st.none() | st.integers(0, len(forgettable)))
            log.events.append(
                CondensationEvent(
                    id=condensation_id,
                    forgotten_event_ids=tuple(forgotten),
                    summary=summary,
                    summary_offset=offset,
                )
            )
            forgettable.append(f"{condensation_id}-summary")
        forgettable.extend(
            e.id for e in log.events if e.id not in forgettable and e.kind != "condensation"
        )
    return log


@given(sdk_shaped_logs())
def test_equals_the_sdk_view_on_sdk_shaped_logs(log):
    expected = sdk_reference(log.events)
    note(json.dumps(expected, indent=1))
    if results_follow_their_calls(expected):
        assert project_messages(log.events) == expected
    else:
        # A summary put between a call and its result: the SDK would send the broken order;
        # Treadle moves the results up to their call (PROJECT-RESULTS), changing nothing else.
        moved = project_messages(log.events)
        assert results_follow_their_calls(moved)
        assert same_messages_apart_from_order(moved, expected)


def same_messages_apart_from_order(ours, theirs):
    """The same messages other than user ones, and the same user text in the same order (user
    messages that became adjacent may merge differently)."""

    def others(messages):
        return sorted(json.dumps(m, sort_keys=True) for m in messages if m["role"] != "user")

    def user_parts(messages):
        return [part for m in messages if m["role"] == "user" for part in _parts(m["content"])]

    return others(ours) == others(theirs) and user_parts(ours) == user_parts(theirs)
