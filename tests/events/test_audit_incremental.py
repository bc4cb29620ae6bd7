"""The incremental audit equals a full audit of the same events, however the log is cut into
appends: random logs with branches, legacy parents, new roots, duplicate ids, broken links."""

from hypothesis import given, settings
from hypothesis import strategies as st

from treadle.events.audit import IncrementalAudit, audit_events
from treadle.events.model import (
    ROOT,
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    EventBase,
    MessageEvent,
    ObservationEvent,
    StateChangeEvent,
)

KINDS = ["user", "agent", "action", "action", "observation", "error", "state", "condense"]


@st.composite
def logs(draw: st.DrawFn) -> list[EventBase]:
    events: list[EventBase] = []
    actions: list[ActionEvent] = []
    for index in range(draw(st.integers(0, 40))):
        where = draw(st.sampled_from(["last", "last", "last", "legacy", "fork", "root", "gone"]))
        if not events or where == "root":
            parent: str | None = ROOT
        elif where == "last":
            parent = events[-1].id
        elif where == "legacy":
            parent = None
        elif where == "fork":
            parent = events[draw(st.integers(0, len(events) - 1))].id
        else:
            parent = "not-in-the-log"
        reuse = events and draw(st.integers(0, 15)) == 0
        event_id = events[draw(st.integers(0, len(events) - 1))].id if reuse else f"e{index}"
        kind = draw(st.sampled_from(KINDS))
        common = {"id": event_id, "parent_id": parent}
        if kind in ("user", "agent"):
            event: EventBase = MessageEvent(source=kind, text="hi", **common)
        elif kind == "action":
            response = f"r{draw(st.integers(0, 3))}"
            call = f"c{draw(st.integers(0, 5))}"
            event = ActionEvent(
                llm_response_id=response,
                tool_call_id=call,
                tool_name="terminal",
                arguments={},
                raw_arguments="{}",
                thought=draw(st.sampled_from(["", "why"])),
                **common,
            )
            actions.append(event)  # type: ignore[arg-type]
        elif kind in ("observation", "error") and actions:
            action = actions[draw(st.integers(0, len(actions) - 1))]
            if kind == "observation":
                event = ObservationEvent(
                    action_id=action.id,
                    tool_call_id=action.tool_call_id,
                    tool_name=action.tool_name,
                    content="ok",
                    **common,
                )
            else:
                event = AgentErrorEvent(
                    tool_call_id=action.tool_call_id, tool_name="x", error="bad", **common
                )
        elif kind == "condense":
            earlier = [e.id for e in events] + ["not-an-event", f"e{index + 1}"]
            forgotten = draw(st.lists(st.sampled_from(earlier), max_size=4))
            event = CondensationEvent(forgotten_event_ids=tuple(forgotten), **common)
        else:
            event = (
                StateChangeEvent(key="status", value={"status": "idle"}, **common)
                if kind == "state"
                else MessageEvent(source="user", text="x", **common)
            )
        events.append(event)
    return events


@settings(max_examples=300, deadline=None)
@given(log=logs(), data=st.data())
def test_extending_equals_auditing_the_whole_log(log: list[EventBase], data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(log)), max_size=6)))
    audit = IncrementalAudit(log[: cuts[0]] if cuts else log)
    done = cuts[0] if cuts else len(log)
    for cut in [*cuts[1:], len(log)]:
        audit.extend(log[done:cut])
        done = cut
        prefix = log[:done]
        heads = [None, "not-an-event", *(e.id for e in prefix[-3:]), *(e.id for e in prefix[:2])]
        for head in heads:
            assert audit.report(head) == audit_events(prefix, head=head), (done, head)


def test_appends_on_the_latest_branch_are_walked_not_re_audited() -> None:
    events = [MessageEvent(id="m0", source="user", text="go", parent_id=ROOT)]
    audit = IncrementalAudit(events)
    action = ActionEvent(
        id="a1",
        parent_id="m0",
        llm_response_id="r",
        tool_call_id="c",
        tool_name="t",
        arguments={},
        raw_arguments="{}",
    )
    walk = audit._walk
    audit.extend([action])
    assert audit._walk is walk  # extended in place
    assert audit.report().pending == ["a1"]
    audit.extend([MessageEvent(id="fork", source="user", text="again", parent_id="m0")])
    assert audit._walk is not walk  # a fork from an older event: audited again in full
    assert audit.report() == audit_events([*events, action, audit.events[-1]])


def test_a_link_to_an_id_appended_later_says_what_it_names_as_a_full_audit() -> None:
    first = MessageEvent(id="m0", source="user", text="go", parent_id=ROOT)
    result = ObservationEvent(
        id="o1",
        parent_id="m0",
        action_id="later",
        tool_call_id="c",
        tool_name="t",
        content="ok",
    )
    later = MessageEvent(id="later", source="user", text="x", parent_id="o1")
    audit = IncrementalAudit([first, result])
    assert "is not in the log" in audit.report().violations[0].message
    audit.extend([later])
    assert audit.report() == audit_events([first, result, later])
    assert "names a message" in audit.report().violations[0].message
