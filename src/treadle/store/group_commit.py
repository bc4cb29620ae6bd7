"""Group commit: write units from many threads of one process share a transaction and its
fsync, each acknowledged only once that commit is durable.

A durable SQLite commit costs one fsync of the WAL, whatever it holds, so a process whose many
conversations append at once would otherwise pay one fsync per append, one after another. Here
the first thread to arrive while no commit is under way becomes the *leader*: it takes every
unit waiting (its own among them, up to ``max_units``) and runs each in one transaction; units
queued while those ran join it too (their threads prepared them during this group's SQL, and
would otherwise wait for a whole commit more); then it commits once, hands each caller its own
outcome, and passes the lead to the oldest unit still waiting, whose thread takes the next
group at once. Each waiting thread sleeps on a lock of its own, woken only when its unit is
settled or the lead is handed to it. So:

- a unit's result (or error) reaches its caller only after the COMMIT returned: nothing is
  acknowledged before it is as durable as the connection's ``synchronous`` setting makes it;
- a unit that fails (a refused append) is undone alone: the first of a transaction by rolling
  the transaction back (and beginning it again for the units after it), a later one under a
  SAVEPOINT of its own, or, for a unit the caller declares ``atomic`` (it writes nothing before
  it may fail), with nothing to undo; the others of its group commit as if it had never run;
- a failed COMMIT (disk full, I/O error) fails every unit of the group with it: none of them
  was stored, and each caller may append again;
- one thread alone pays a few lock operations, and no savepoint.

Units run on the leader's thread and connection, in arrival order; a unit must not block on
anything but the database, and should do before ``run`` whatever needs no database: the
leader's work is serialised, the callers' own work overlaps other groups' commits.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

from treadle.store.base import StoreError

T = TypeVar("T")

DEFAULT_MAX_UNITS = 64
"""Units one commit holds at most: bounds the time a unit waits behind others' work."""

_generation = 0
"""Counts forks: a child must not wait for a leader (or a lock) of its parent's threads."""


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


class AbandonedCommit(StoreError):
    """The leader of a unit's group was interrupted (KeyboardInterrupt, SystemExit) before its
    commit: the unit was rolled back with the group, nothing of it was stored."""


ABANDONED = (
    "the commit shared with this append was interrupted: nothing of it was stored; append it again"
)


class _Ticket(Generic[T]):
    __slots__ = ("atomic", "done", "error", "lead", "unit", "value", "wake")

    def __init__(self, unit: Callable[[sqlite3.Connection], T], atomic: bool) -> None:
        self.unit = unit
        self.atomic = atomic
        self.done = False
        self.lead = False
        """Set (with ``wake`` released) when this ticket's thread is to lead the next group."""
        self.value: T | None = None
        self.error: BaseException | None = None
        self.wake: threading.Lock | None = None
        """Held while the thread waits; released once when it is settled or made leader."""

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # set with done, None only for a None result


class GroupCommit:
    """Runs units in shared transactions on the connection ``connection()`` lends (the
    calling thread's, held for the transaction); ``lock`` is held around each group's
    transaction (the store's write lock, so its other writes never interleave);
    ``after_commit`` runs after each successful COMMIT; ``begin`` opens each transaction
    (``BEGIN IMMEDIATE``, however it waits for the file's write lock)."""

    def __init__(
        self,
        connection: Callable[[], AbstractContextManager[sqlite3.Connection]],
        lock: threading.Lock,
        *,
        after_commit: Callable[[], None] = lambda: None,
        max_units: int = DEFAULT_MAX_UNITS,
        begin: Callable[[sqlite3.Connection], object] = lambda conn: conn.execute(
            "BEGIN IMMEDIATE"
        ),
    ) -> None:
        self._connection = connection
        self._begin = begin
        self._lock = lock
        self._after_commit = after_commit
        self._max_units = max_units
        self._state = threading.Lock()
        """Guards ``_waiting`` and ``_leading``; held only for a few list operations."""
        self._waiting: list[_Ticket[object]] = []
        self._leading = False
        self._generation = _generation
        self.groups = 0
        """Commits made (each holding one or more units): for benchmarks and tests."""

    def _reset_after_fork(self) -> None:
        """In a forked child: the parent's waiting units and leader are not this process's."""
        self._state = threading.Lock()
        self._waiting = []
        self._leading = False
        self._generation = _generation

    def run(self, unit: Callable[[sqlite3.Connection], T], *, atomic: bool = False) -> T:
        """Run ``unit(conn)`` inside a transaction shared with the units of other threads;
        its result once the transaction committed, or the error it (or the commit) raised.
        ``atomic``: the unit writes nothing before anything in it may raise (its checks come
        first, then one statement each of which fails whole), so it needs no savepoint."""
        if self._generation != _generation:
            self._reset_after_fork()
        ticket: _Ticket[T] = _Ticket(unit, atomic)
        with self._state:
            self._waiting.append(ticket)  # type: ignore[arg-type]  # outcomes stay per ticket
            if self._leading:
                # Each waiting thread sleeps on a lock of its own: the leader wakes exactly
                # the threads it settled and the one it hands the lead to, not every waiter.
                wake = ticket.wake = threading.Lock()
                wake.acquire()
            else:
                # Nobody leads, so nothing else waits (a lead is handed on while anything
                # does): this thread leads.
                self._leading = True
                wake = None
        if wake is not None:
            try:
                wake.acquire()
            except BaseException:
                self._leave(ticket)  # type: ignore[arg-type]
                raise
            if ticket.done:
                return ticket.outcome()
        # This thread leads, its ticket the oldest waiting: it is among those taken.
        try:
            with self._state:
                group = self._waiting[: self._max_units]
                del self._waiting[: len(group)]
            self._commit(group)
        finally:
            self._hand_over()
        return ticket.outcome()

    def _hand_over(self) -> None:
        """The lead passes to the oldest waiting thread (it takes the next group at once,
        while this one's callers return), or lapses when nothing waits."""
        with self._state:
            if not self._waiting:
                self._leading = False
                return
            successor = self._waiting[0]
            successor.lead = True
        assert successor.wake is not None  # every ticket queued behind a leader has one
        successor.wake.release()

    def _leave(self, ticket: _Ticket[object]) -> None:
        """A waiting thread was interrupted (KeyboardInterrupt): its unit is withdrawn if no
        leader took it yet, and a lead handed to it is passed on, so nobody waits for it."""
        with self._state:
            if ticket in self._waiting:
                self._waiting.remove(ticket)
            if not ticket.lead:
                return
        self._hand_over()

    def _commit(self, group: list[_Ticket[object]]) -> None:
        """One transaction for ``group``; every ticket is settled (and its thread woken) when
        this returns, also when it raises (a BaseException of this thread, re-raised after
        the others are told)."""
        outcomes: list[tuple[object, BaseException | None]] = []
        try:
            with self._lock, self._connection() as conn:
                self._begin(conn)
                try:
                    while True:
                        for ticket in group[len(outcomes) :]:
                            outcomes.append(
                                _run_unit(conn, ticket)
                                if outcomes
                                else _run_first(conn, ticket, self._begin)
                            )
                        # Units queued while these ran join this commit: their threads
                        # prepared them during this group's SQL, and would otherwise wait
                        # for a whole commit more.
                        with self._state:
                            more = self._waiting[: self._max_units - len(group)]
                            del self._waiting[: len(more)]
                        if not more:
                            break
                        group.extend(more)
                    conn.execute("COMMIT")
                    self.groups += 1
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                self._after_commit()
        except Exception as failure:
            # Nothing of the group is stored (a lone unit's own refusal, or a failed commit):
            # each caller gets that error and may try again.
            for ticket in group:
                _settle(ticket, None, failure)
            return
        except BaseException:
            for ticket in group:
                _settle(ticket, None, AbandonedCommit(ABANDONED))
            raise
        for ticket, (value, error) in zip(group, outcomes, strict=True):
            _settle(ticket, value, error)


def _run_unit(
    conn: sqlite3.Connection, ticket: _Ticket[object]
) -> tuple[object, BaseException | None]:
    """Run one unit of a group; its failure undoes only its own writes. An ``atomic`` unit
    runs as it is (it writes nothing before it may fail: a refusal leaves nothing to undo),
    any other under a savepoint. A failure of SQLite itself (the transaction may be gone),
    or an atomic unit that fails after writing, is raised for the whole group."""
    if not ticket.atomic:
        return _in_savepoint(conn, ticket.unit)
    before = conn.total_changes
    try:
        return ticket.unit(conn), None
    except sqlite3.Error:
        raise
    except Exception as error:
        if conn.total_changes != before:
            raise  # its writes cannot be undone alone: nothing of the group is stored
        return None, error


def _run_first(
    conn: sqlite3.Connection,
    ticket: _Ticket[object],
    begin: Callable[[sqlite3.Connection], object],
) -> tuple[object, BaseException | None]:
    """Run the first unit of a transaction, which needs no savepoint: when it fails, the
    whole transaction (nothing but its writes) is rolled back and begun again for the units
    after it. (Under a savepoint SQLite keeps the prior content of each page the unit
    changes, aside: a bulk import alone would pay that for nothing.)"""
    try:
        return ticket.unit(conn), None
    except sqlite3.Error:
        raise
    except Exception as error:
        conn.execute("ROLLBACK")
        begin(conn)
        return None, error


def _in_savepoint(
    conn: sqlite3.Connection, unit: Callable[[sqlite3.Connection], object]
) -> tuple[object, BaseException | None]:
    """Run one unit of a group under its own savepoint: its failure undoes only its writes.
    A failure of SQLite itself (the transaction may be gone) is raised for the whole group."""
    conn.execute("SAVEPOINT treadle_unit")
    try:
        value = unit(conn)
    except sqlite3.Error:
        raise
    except Exception as error:
        conn.execute("ROLLBACK TO treadle_unit")
        conn.execute("RELEASE treadle_unit")
        return None, error
    conn.execute("RELEASE treadle_unit")
    return value, None


def _settle(ticket: _Ticket[object], value: object, error: BaseException | None) -> None:
    ticket.value, ticket.error, ticket.done = value, error, True
    if ticket.wake is not None:  # the leader's own ticket has none: its thread is awake
        ticket.wake.release()
