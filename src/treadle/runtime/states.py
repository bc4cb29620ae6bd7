"""The conversation's state machine in one table: for each operation a user (or the run) can
make and each status the log records, what the operation does and what becomes of the calls
without a result. ``Conversation`` asks ``decide`` before it acts; docs/contracts.md ("The
state machine") prints the same table, and a test keeps the two equal.

Two facts decide everything: the status the log records last, and whether calls on the active
path have no result yet (pending). A call without a result is *running* only while the status
is ``running``; under any other status it waits for the user's answer (confirm or reject), so
pausing, interrupting, failing or switching away never closes it as a crash. Only a run that
finds ``running`` recorded with calls open (the process that ran them died) closes them as
``interrupted: "crash"``: those may have started.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from treadle.runtime.status import ConversationStatus as Status

__all__ = ["Op", "Outcome", "Rule", "decide", "markdown_table", "status_after_head_move"]


class Op(StrEnum):
    """What can be asked of a conversation whose run nothing in this process holds (a run in
    progress here takes a pause or an interrupt as a request: see ``Conversation.pause``)."""

    RUN = "run"
    MESSAGE = "message"
    CONFIRM = "confirm"
    REJECT = "reject"
    PAUSE = "pause"
    INTERRUPT = "interrupt"
    SWITCH = "switch"
    FORK = "fork"
    RESTORE = "restore files"
    RAISE_BUDGET = "raise budget"


class Outcome(StrEnum):
    GO = "go"
    """The operation does its work (its row says what)."""
    ANSWER_FIRST = "answer first"
    """A run asks nothing: calls wait for the user's answer; the status becomes waiting."""
    RECOVER = "recover"
    """The calls a dead run left open are closed as ``interrupted: "crash"``, then it goes."""
    PAUSE_NOW = "pause now"
    """Nothing runs: a ``pause`` event and status ``paused`` now; pending calls stay pending
    and confirmable."""
    RECOVER_THEN_PAUSE = "recover, then pause"
    NOTHING_PENDING = "refused: nothing pending"
    NOT_WAITING = "refused: not waiting"


class Group(StrEnum):
    """Statuses that every operation treats alike."""

    RUNNING = "running"
    WAITING = "waiting_for_confirmation"
    PAUSED = "paused"
    ENDED = "idle, finished, error, stuck"


def group_of(status: Status) -> Group:
    if status is Status.RUNNING:
        return Group.RUNNING
    if status is Status.WAITING_FOR_CONFIRMATION:
        return Group.WAITING
    if status is Status.PAUSED:
        return Group.PAUSED
    return Group.ENDED


@dataclass(frozen=True)
class Rule:
    outcome: Outcome
    status: Status | None
    """The status the operation leaves (None: as it was, or as the run ends)."""
    pending: str
    """What becomes of the calls without a result."""
    after: str = ""
    """The status after, in words, when ``status`` cannot say it (None)."""


_GO = Outcome.GO
_KEEP = "kept"
_ANSWER = Rule(Outcome.ANSWER_FIRST, Status.WAITING_FOR_CONFIRMATION, "kept: answer them")
_NOT_WAITING = Rule(Outcome.NOT_WAITING, None, "kept: a run is running them")
_NOTHING = Rule(Outcome.NOTHING_PENDING, None, "none")
_PAUSE_KEEPING = Rule(Outcome.PAUSE_NOW, Status.PAUSED, "kept, still confirmable")

_FOLLOWS = "the new head's: waiting with calls pending there, else idle"
WAITING_GROUPS = (Group.WAITING, Group.PAUSED, Group.ENDED)

TABLE: dict[tuple[Op, Group, bool], Rule] = {}
"""(operation, status group, calls pending) -> rule. Filled below, one line per case."""


def _rows(op: Op, groups: tuple[Group, ...], pending: bool, rule: Rule) -> None:
    for group in groups:
        TABLE[op, group, pending] = rule


_ALL = tuple(Group)
# RUN: asks the model only when every call on the path has a result.
_rows(Op.RUN, _ALL, False, Rule(_GO, Status.RUNNING, "none"))
_rows(Op.RUN, WAITING_GROUPS, True, _ANSWER)
_rows(
    Op.RUN,
    (Group.RUNNING,),
    True,
    Rule(Outcome.RECOVER, Status.RUNNING, 'closed as interrupted: "crash" (they may have run)'),
)
# CONFIRM / REJECT: the calls waiting for an answer, whatever stopped the run since.
for _op, _what in (
    (Op.CONFIRM, "the chosen run; the others kept"),
    (Op.REJECT, "the chosen answered by user_rejection; the others kept"),
):
    _rows(_op, WAITING_GROUPS, True, Rule(_GO, None, _what))
    _rows(_op, (Group.RUNNING,), True, _NOT_WAITING)
    _rows(_op, _ALL, False, _NOTHING)
# PAUSE / INTERRUPT while nothing runs here: paused now; a run elsewhere gets a request.
for _op in (Op.PAUSE, Op.INTERRUPT):
    _rows(_op, _ALL, False, Rule(Outcome.PAUSE_NOW, Status.PAUSED, "none"))
    _rows(_op, WAITING_GROUPS, True, _PAUSE_KEEPING)
    _rows(
        _op,
        (Group.RUNNING,),
        True,
        Rule(Outcome.RECOVER_THEN_PAUSE, Status.PAUSED, 'closed as interrupted: "crash"'),
    )
# MESSAGE: stored at the head (queued while a run holds it); an ended turn becomes idle.
for _pending in (False, True):
    _rows(
        Op.MESSAGE, (Group.RUNNING, Group.WAITING, Group.PAUSED), _pending, Rule(_GO, None, _KEEP)
    )
    _rows(Op.MESSAGE, (Group.ENDED,), _pending, Rule(_GO, Status.IDLE, _KEEP))
    # SWITCH and FORK: the status follows the new head (``status_after_head_move``).
    _rows(Op.SWITCH, _ALL, _pending, Rule(_GO, None, "those of the new path wait", _FOLLOWS))
    _rows(
        Op.FORK,
        _ALL,
        _pending,
        Rule(_GO, None, "copied with the path; the parent's kept", _FOLLOWS),
    )
    _rows(Op.RESTORE, _ALL, _pending, Rule(_GO, None, _KEEP))
    _rows(Op.RAISE_BUDGET, _ALL, _pending, Rule(_GO, None, _KEEP))


def decide(op: Op, status: Status, pending: bool) -> Rule:
    """What ``op`` does from ``status`` with (or without) calls pending on the active path."""
    return TABLE[op, group_of(status), pending]


def status_after_head_move(pending: bool) -> tuple[Status, str]:
    """The status of a conversation whose head just moved (a switch, a fork's first head):
    waiting when calls on the new path have no result (someone must answer them), else idle."""
    if pending:
        return Status.WAITING_FOR_CONFIRMATION, "calls on this branch wait for confirmation"
    return Status.IDLE, ""


def markdown_table() -> str:
    """The table as docs/contracts.md prints it: one row per operation and rule (the status
    groups, and pending or not, that share a rule on one row)."""
    merged: dict[tuple[Op, Rule], dict[bool, list[Group]]] = {}
    for (op, group, pending), rule in TABLE.items():
        merged.setdefault((op, rule), {}).setdefault(pending, []).append(group)
    lines = [
        "| operation | from | calls pending | does | status after | the pending calls |",
        "|---|---|---|---|---|---|",
    ]
    for (op, rule), by_pending in sorted(merged.items(), key=lambda item: _ORDER[item[0][0]]):
        after = rule.after or (rule.status.value if rule.status is not None else "unchanged")
        if len(by_pending) == 2 and by_pending[True] == by_pending[False]:
            rows = [("either", by_pending[True])]
        else:
            rows = [("yes" if p else "no", groups) for p, groups in by_pending.items()]
        for shown, groups in rows:
            source = "any" if len(groups) == len(Group) else ", ".join(g.value for g in groups)
            lines.append(
                f"| {op.value} | {source} | {shown} | {rule.outcome.value} | {after} | "
                f"{rule.pending} |"
            )
    return "\n".join(lines)


_ORDER = {op: index for index, op in enumerate(Op)}
