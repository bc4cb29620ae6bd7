"""The audit: each audit-checkable contract passing and broken, on every branch, all at once.

Every breaking case asserts the contract name and the ids the violation names.
"""

import json

import pytest

from treadle.events.audit import AuditReport, IncrementalAudit, audit_events
from treadle.events.model import (
    ROOT,
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateChangeEvent,
    UserRejectionEvent,
)


def user(event_id, parent=None, text="do it"):
    return MessageEvent(id=event_id, source="user", text=text, parent_id=parent)


def agent_says(event_id, parent=None, text="done"):
    return MessageEvent(id=event_id, source="agent", text=text, parent_id=parent)


def act(event_id, parent=None, *, response="r1", call=None, tool="terminal", thought=""):
    return ActionEvent(
        id=event_id,
        parent_id=parent,
        llm_response_id=response,
        tool_call_id=call or f"call-{event_id}",
        tool_name=tool,
        arguments={"command": "ls"},
        raw_arguments='{"command": "ls"}',
        thought=thought,
    )


def obs(event_id, action, parent=None, *, action_id=None, call=None, tool=None):
    return ObservationEvent(
        id=event_id,
        parent_id=parent,
        action_id=action_id or action.id,
        tool_call_id=call or action.tool_call_id,
        tool_name=tool or action.tool_name,
        content="ok",
    )


def found(report: AuditReport, contract: str) -> list[tuple[str, ...]]:
    """The ids named by each violation of ``contract``."""
    return [v.event_ids for v in report.violations if v.contract == contract]


def only(report: AuditReport, contract: str) -> tuple[str, ...]:
    """The ids of the one violation ``report`` has, asserting it is ``contract``."""
    assert report.contracts() == [contract], report.violations
    return report.violations[0].event_ids


# -- the seed's worked examples (docs/contracts.md) -----------------------------------------


def test_seed_example_3_observation_of_y_first_leaves_exactly_x_pending():
    x = act("x", "u1", call="cx")
    y = act("y", "x", call="cy")
    report = audit_events([user("u1", ROOT), x, y, obs("oy", y, "y")])
    assert report.clean
    assert report.pending == ["x"]


def test_seed_example_4_missing_parent():
    report = audit_events([user("root", ROOT), user("b", "ghost")])
    assert only(report, "TREE-MISSING") == ("b", "ghost")


def test_seed_example_4_cycle():
    report = audit_events([user("root", ROOT), user("p", "q"), user("q", "p")])
    assert set(only(report, "TREE-CYCLE")) == {"p", "q"}


def test_seed_example_4_repeated_call_inside_one_response():
    report = audit_events([user("u1", ROOT), act("x", "u1", call="cx"), act("y", "x", call="cx")])
    assert only(report, "PROJECT-DUP-CALL") == ("x", "y")


def test_seed_example_4_repeated_call_across_responses():
    x = act("x", "u1", call="cx")
    z = act("z", "ox", response="r2", call="cx")
    report = audit_events([user("u1", ROOT), x, obs("ox", x, "x"), z, obs("oz", z, "z")])
    assert only(report, "LINK-UNIQUE") == ("x", "z")


def test_seed_example_4_observation_pointing_at_the_wrong_action():
    x = act("x", "u1", call="cx")
    y = act("y", "x", call="cy")
    wrong = obs("oy", y, "y", action_id="x")
    report = audit_events([user("u1", ROOT), x, y, wrong])
    assert only(report, "LINK-ID") == ("oy", "x")
    assert "tool_call_id" in report.violations[0].message


# -- the report --------------------------------------------------------------------------


def test_clean_log_reports_counts_heads_and_focus_head():
    x = act("x", "u1")
    events = [
        user("u1", ROOT),
        x,
        StateChangeEvent(id="s1", key="status", value="running"),
        obs("ox", x, "x"),
        agent_says("a1", "ox"),
    ]
    report = audit_events(events)
    assert report.clean
    assert report.counts == {"message": 2, "action": 1, "observation": 1, "state_change": 1}
    assert report.heads == ["a1"]
    assert report.head == "a1"
    assert report.pending == []
    assert report.notices == []


def test_json_report_has_exactly_the_documented_keys():
    report = audit_events([user("root", ROOT), user("b", "ghost")])
    data = report.to_json_dict()
    assert set(data) == {"violations", "pending", "counts", "heads", "head", "notices"}
    assert data["violations"] == [
        {
            "contract": "TREE-MISSING",
            "event_ids": ["b", "ghost"],
            "message": data["violations"][0]["message"],
        }
    ]
    assert json.loads(json.dumps(data)) == data


def test_empty_log_is_clean():
    report = audit_events([])
    assert report.clean
    assert (report.pending, report.counts, report.heads, report.head) == ([], {}, [], None)


# -- APPEND-DUP-ID ------------------------------------------------------------------------


def test_distinct_ids_pass_and_a_repeated_id_is_named_once_with_its_positions():
    assert audit_events([user("a", ROOT), user("b", "a")]).clean
    report = audit_events([user("a", ROOT), user("b", "a"), user("a", "b"), user("a", "b")])
    assert found(report, "APPEND-DUP-ID") == [("a",)]
    assert "positions 0, 2, 3" in report.violations[0].message


# -- TREE-PARENT, TREE-MISSING, TREE-CYCLE --------------------------------------------------


def test_parent_appended_before_its_child_passes_and_after_it_is_tree_parent():
    assert audit_events([user("a", ROOT), user("b", "a"), user("c", "a")]).clean
    report = audit_events([user("a", ROOT), user("c", "b"), user("b", "a")])
    assert only(report, "TREE-PARENT") == ("c", "b")
    message = report.violations[0].message
    assert "position 1" in message
    assert "position 2" in message


def test_legacy_absent_parent_is_the_previous_event():
    x = act("x")
    assert audit_events([user("u1"), x, obs("ox", x), agent_says("a1")]).clean


def test_events_below_a_missing_parent_are_still_checked():
    events = [
        user("u1", ROOT),
        user("lost", "ghost"),
        act("x", "lost", call="c"),
        act("y", "x", call="c"),
    ]
    report = audit_events(events)
    assert found(report, "TREE-MISSING") == [("lost", "ghost")]
    assert found(report, "PROJECT-DUP-CALL") == [("x", "y")]


def test_self_parent_is_a_cycle_of_one():
    assert only(audit_events([user("a", ROOT), user("b", "b")]), "TREE-CYCLE") == ("b",)


def test_each_cycle_is_reported_once_and_not_also_as_tree_parent():
    events = [
        user("root", ROOT),
        user("a", "c"),
        user("b", "a"),
        user("c", "b"),
        user("tail", "b"),
        user("p", "q"),
        user("q", "p"),
    ]
    report = audit_events(events)
    assert report.contracts() == ["TREE-CYCLE", "TREE-CYCLE"]
    assert [set(ids) for ids in found(report, "TREE-CYCLE")] == [{"a", "b", "c"}, {"p", "q"}]


def test_events_hanging_below_a_cycle_are_still_checked():
    x = act("x", "b", call="c")
    y = act("y", "x", call="c")
    report = audit_events([user("a", "b"), user("b", "a"), x, y])
    assert found(report, "TREE-CYCLE") == [("a", "b")]
    assert found(report, "PROJECT-DUP-CALL") == [("x", "y")]


def test_pending_on_a_head_below_a_missing_parent_or_a_cycle_is_what_can_be_walked():
    report = audit_events([user("lost", "ghost"), act("x", "lost")])
    assert report.pending == ["x"]
    report = audit_events([user("a", "b"), user("b", "a"), act("x", "b")])
    assert report.pending == ["x"]
    assert report.contracts() == ["TREE-CYCLE"]


# -- TREE-HEAD ---------------------------------------------------------------------------


def test_head_not_in_the_log_is_a_violation():
    report = audit_events([user("a", ROOT)], head="nope")
    assert only(report, "TREE-HEAD") == ("nope",)
    assert report.pending == []


def test_lagging_head_is_a_notice_not_a_violation():
    report = audit_events([user("a", ROOT), user("b", "a"), user("c", "b")], head="b")
    assert report.clean
    assert [(n.contract, n.event_ids) for n in report.notices] == [("TREE-HEAD", ("b", "c"))]
    assert report.head == "b"


def test_head_with_only_state_change_children_does_not_lag():
    events = [user("a", ROOT), StateChangeEvent(id="s", parent_id="a", key="k", value=1)]
    report = audit_events(events)
    assert report.head == "a"
    assert report.notices == []


def test_an_old_branch_as_head_gives_its_own_pending():
    x = act("x", "u1")
    old = act("old", "ox", response="r2")
    new = act("new", "ox", response="r3")
    events = [user("u1", ROOT), x, obs("ox", x, "x"), old, new]
    assert audit_events(events, head="old").pending == ["old"]
    assert audit_events(events).pending == ["new"]
    assert audit_events(events).heads == ["old", "new"]


# -- PROJECT-SHARED-TEXT, PROJECT-DUP-CALL, LINK-UNIQUE -----------------------------------


def test_shared_text_on_the_first_action_of_a_batch_passes():
    x = act("x", "u1", thought="both at once")
    y = act("y", "x")
    assert audit_events([user("u1", ROOT), x, y, obs("ox", x, "y"), obs("oy", y, "ox")]).clean


def test_shared_text_on_a_later_action_of_the_batch_is_named():
    events = [user("u1", ROOT), act("x", "u1", thought="one"), act("y", "x", thought="two")]
    assert only(audit_events(events), "PROJECT-SHARED-TEXT") == ("y", "x")


def test_pause_state_change_condensation_do_not_break_a_batch():
    events = [
        user("u1", ROOT),
        act("x", "u1", call="c"),
        PauseEvent(id="p", parent_id="x"),
        StateChangeEvent(id="s", parent_id="p", key="status", value="paused"),
        CondensationEvent(id="k", parent_id="s"),
        act("y", "k", call="c", thought="again"),
    ]
    report = audit_events(events)
    assert found(report, "PROJECT-DUP-CALL") == [("x", "y")]
    assert found(report, "PROJECT-SHARED-TEXT") == [("y", "x")]


def test_a_visible_event_between_same_response_actions_starts_a_new_batch():
    x = act("x", "u1", call="c")
    events = [user("u1", ROOT), x, obs("ox", x, "x"), act("y", "ox", call="c", thought="t")]
    # The same call again is now across batches, and y is the first of its own batch.
    assert only(audit_events(events), "LINK-UNIQUE") == ("x", "y")


def test_the_same_call_id_on_sibling_branches_passes():
    x = act("x", "u1", call="c")
    retry = act("retry", "u1", response="r2", call="c")
    events = [user("u1", ROOT), x, obs("ox", x, "x"), retry, obs("oretry", retry, "retry")]
    assert audit_events(events).clean


# -- LINK-ID -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "named", "why"),
    [
        (lambda x: obs("o", x, "x"), None, None),
        (lambda x: obs("o", x, "x", action_id="nobody"), ("o", "nobody"), "not in the log"),
        (lambda x: obs("o", x, "x", action_id="u1"), ("o", "u1"), "not an action"),
        (lambda x: obs("o", x, "x", call="other"), ("o", "x"), "tool_call_id"),
        (lambda x: obs("o", x, "x", tool="editor"), ("o", "x"), "tool_name"),
        (
            lambda x: UserRejectionEvent(
                id="o", parent_id="x", action_id="x", tool_call_id=x.tool_call_id, tool_name="ed"
            ),
            ("o", "x"),
            "tool_name",
        ),
        (
            lambda x: AgentErrorEvent(
                id="o", parent_id="x", tool_call_id=x.tool_call_id, tool_name="no_such", error="e"
            ),
            None,
            None,
        ),
        (
            lambda x: AgentErrorEvent(
                id="o", parent_id="x", tool_call_id="other", tool_name="terminal", error="e"
            ),
            ("o",),
            "no action on its path",
        ),
        (
            lambda x: AgentErrorEvent(
                id="o", parent_id="x", action_id="x", tool_call_id="other", tool_name="t", error="e"
            ),
            ("o", "x"),
            "tool_call_id",
        ),
    ],
)
def test_result_links_to_its_action(result, named, why):
    x = act("x", "u1", call="cx")
    report = audit_events([user("u1", ROOT), x, result(x)])
    if named is None:
        assert report.clean, report.violations
        return
    assert only(report, "LINK-ID") == named
    assert why in report.violations[0].message


def test_result_whose_action_is_on_a_sibling_branch_is_link_id():
    x = act("x", "u1")
    events = [user("u1", ROOT), x, user("u2", "u1"), obs("ox", x, "u2")]
    report = audit_events(events)
    assert found(report, "LINK-ID") == [("ox", "x")]
    assert "not on its path" in report.violations[0].message


# -- LINK-ONCE ---------------------------------------------------------------------------


def test_one_result_per_call_on_each_of_two_branches_passes():
    x = act("x", "u1")
    assert audit_events([user("u1", ROOT), x, obs("o1", x, "x"), obs("o2", x, "x")]).clean


def test_two_final_results_for_one_call_on_one_path_are_named():
    x = act("x", "u1", call="cx")
    late = AgentErrorEvent(id="e", parent_id="o1", tool_call_id="cx", tool_name="t", error="x")
    report = audit_events([user("u1", ROOT), x, obs("o1", x, "x"), late])
    assert only(report, "LINK-ONCE") == ("x", "o1", "e")


# -- LINK-ORPHAN and pending -------------------------------------------------------------


def test_unanswered_action_with_no_later_turn_is_pending_not_a_violation():
    report = audit_events([user("u1", ROOT), act("x", "u1"), user("u2", "x")])
    assert report.clean
    assert report.pending == ["x"]


def test_unanswered_action_followed_by_another_response_is_an_orphan_named_once():
    y = act("y", "x", response="r2")
    events = [
        user("u1", ROOT),
        act("x", "u1"),
        y,
        obs("oy", y, "y"),
        agent_says("a1", "oy"),
        agent_says("a2", "oy"),  # a second branch asks the model again too
    ]
    report = audit_events(events)
    assert only(report, "LINK-ORPHAN") == ("x", "y")
    assert report.pending == ["x"]


def test_unanswered_action_followed_by_an_agent_message_is_an_orphan():
    report = audit_events([user("u1", ROOT), act("x", "u1"), agent_says("a1", "x")])
    assert only(report, "LINK-ORPHAN") == ("x", "a1")


def test_result_after_the_next_turn_does_not_undo_the_orphan():
    x = act("x", "u1")
    y = act("y", "x", response="r2")
    events = [user("u1", ROOT), x, y, obs("oy", y, "y"), obs("ox", x, "oy")]
    assert only(audit_events(events), "LINK-ORPHAN") == ("x", "y")


def test_answered_on_one_branch_orphaned_on_the_other():
    x = act("x", "u1")
    events = [
        user("u1", ROOT),
        x,
        obs("ox", x, "x"),
        act("good", "ox", response="r2"),
        act("bad", "x", response="r3"),
    ]
    assert only(audit_events(events), "LINK-ORPHAN") == ("x", "bad")


def test_same_response_actions_after_a_break_are_not_a_new_turn():
    x = act("x", "u1")
    y = act("y", "ux")
    events = [user("u1", ROOT), x, user("ux", "x"), y, obs("oy", y, "y")]
    report = audit_events(events)
    assert report.clean
    assert report.pending == ["x"]


# -- all violations, every branch --------------------------------------------------------


def test_every_violation_in_one_log_is_reported():
    x = act("x", "u1", call="c")
    events = [
        user("u1", ROOT),
        x,
        act("y", "x", call="c", thought="again"),  # DUP-CALL + SHARED-TEXT
        obs("ox", x, "y", tool="editor"),  # LINK-ID
        user("u1", "ox"),  # APPEND-DUP-ID
        user("lost", "ghost"),  # TREE-MISSING
        user("p", "q"),  # TREE-CYCLE
        user("q", "p"),
        user("early", "late"),  # TREE-PARENT
        user("late", "u1"),
        agent_says("a1", "ox"),  # LINK-ORPHAN of x and y (ox answers nothing)
    ]
    report = audit_events(events)
    assert sorted(report.contracts()) == sorted(
        [
            "PROJECT-DUP-CALL",
            "PROJECT-SHARED-TEXT",
            "LINK-ID",
            "APPEND-DUP-ID",
            "TREE-MISSING",
            "TREE-CYCLE",
            "TREE-PARENT",
            "LINK-ORPHAN",
            "LINK-ORPHAN",
        ]
    )
    assert found(report, "LINK-ORPHAN") == [("x", "a1"), ("y", "a1")]


def test_a_violation_only_on_a_side_branch_is_found():
    x = act("x", "u1")
    side = act("side", "ox", response="r2", call="dup")
    events = [
        user("u1", ROOT),
        x,
        obs("ox", x, "x"),
        side,
        act("side2", "side", response="r2", call="dup"),
        user("main", "ox"),
        agent_says("answer", "main"),
    ]
    report = audit_events(events)
    assert report.head == "answer"
    assert only(report, "PROJECT-DUP-CALL") == ("side", "side2")


def test_state_from_one_branch_never_leaks_into_its_sibling():
    x = act("x", "u1", call="c")
    events = [
        user("u1", ROOT),
        x,
        obs("ox", x, "x"),
        act("y", "ox", response="r2", call="c2"),  # branch 1 ends open
        act("z", "ox", response="r3", call="c2"),  # branch 2 reuses c2: other path, fine
        obs("oz", act("z", "ox", response="r3", call="c2"), "z"),
        agent_says("a", "oz"),
    ]
    report = audit_events(events)
    assert report.clean, report.violations
    assert report.pending == []


def test_a_new_root_starts_with_an_empty_path():
    events = [
        user("u1", ROOT),
        act("x", "u1", call="c"),  # left open at the end of the first tree
        user("u2", ROOT),
        act("y", "u2", response="r2", call="c"),
        agent_says("a", "y"),
    ]
    report = audit_events(events)
    assert only(report, "LINK-ORPHAN") == ("y", "a")


def test_a_long_chain_has_no_recursion_limit():
    events = [user("u0", ROOT)]
    for i in range(1, 6000):
        response = f"r{i}"
        action = act(f"x{i}", events[-1].id, response=response)
        events += [action, obs(f"o{i}", action, action.id)]
    report = audit_events(events)
    assert report.clean
    assert report.counts == {"message": 1, "action": 5999, "observation": 5999}


# -- CONDENSE-SPLIT, CONDENSE-PENDING, CONDENSE-LOOP -----------------------------------------


def condense(event_id, parent, forgotten, summary="s"):
    return CondensationEvent(
        id=event_id,
        parent_id=parent,
        forgotten_event_ids=forgotten,
        summary=summary,
        summary_offset=1,
    )


def answered_pair():
    x = act("x", "u1", call="cx")
    return [user("u1", ROOT), x, obs("ox", x, "x"), user("u2", "ox")]


def test_forgetting_a_call_and_its_result_together_passes():
    assert audit_events([*answered_pair(), condense("k", "u2", ["x", "ox"])]).clean


def test_forgetting_a_call_without_its_result_is_named():
    report = audit_events([*answered_pair(), condense("k", "u2", ["x"])])
    assert only(report, "CONDENSE-SPLIT") == ("k", "x", "ox")


def test_forgetting_a_result_without_its_call_is_named():
    report = audit_events([*answered_pair(), condense("k", "u2", ["ox"])])
    assert only(report, "CONDENSE-SPLIT") == ("k", "ox", "x")


def test_a_pair_forgotten_over_two_condensations_passes():
    events = [*answered_pair(), condense("k1", "u2", ["x"]), user("u3", "k1")]
    events.append(condense("k2", "u3", ["ox"]))
    report = audit_events(events)
    assert found(report, "CONDENSE-SPLIT") == [("k1", "x", "ox")]  # only the first, at its time


def test_forgetting_part_of_a_batch_is_named():
    x, y = act("x", "u1", call="cx"), act("y", "x", call="cy")
    events = [user("u1", ROOT), x, y, obs("ox", x, "y"), obs("oy", y, "ox"), user("u2", "oy")]
    report = audit_events([*events, condense("k", "u2", ["x", "ox"])])
    assert only(report, "CONDENSE-SPLIT") == ("k", "x", "y")


def test_forgetting_a_pending_call_is_named():
    x = act("x", "u1", call="cx")
    events = [user("u1", ROOT), x, condense("k", "x", ["x"]), obs("ox", x, "k")]
    report = audit_events(events)
    assert only(report, "CONDENSE-PENDING") == ("k", "x")


def test_two_condensations_with_nothing_visible_between_are_named():
    events = [*answered_pair(), condense("k1", "u2", ["x", "ox"])]
    events += [PauseEvent(id="p", parent_id="k1"), condense("k2", "p", [])]
    assert only(audit_events(events), "CONDENSE-LOOP") == ("k1", "k2")
    events[-1] = user("u3", "p")
    events.append(condense("k2", "u3", []))
    assert audit_events(events).clean


def test_condensation_checks_hold_per_branch():
    """A branch where the result was not given yet: forgetting the call there is PENDING;
    on the sibling branch, where it was, the same forgetting passes."""
    x = act("x", "u1", call="cx")
    events = [user("u1", ROOT), x, obs("ox", x, "x"), condense("k1", "ox", ["x", "ox"])]
    events.append(condense("k2", "x", ["x"]))  # a sibling of ox: x is pending there
    report = audit_events(events, head="k1")
    assert report.contracts() == ["CONDENSE-PENDING"]
    incremental = IncrementalAudit()
    for event in events:
        incremental.extend([event])
    assert incremental.report("k1").to_json_dict() == report.to_json_dict()
    assert report.violations[0].event_ids == ("k2", "x")
