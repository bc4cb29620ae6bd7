"""Typed errors shared by every layer, each naming the contract it enforces
(docs/contracts.md).

An error that a user can cause carries a message saying what is wrong and what to do.
"""

from __future__ import annotations

from collections.abc import Iterable


class TreadleError(Exception):
    """Base of every error Treadle raises on purpose."""


class ContractError(TreadleError):
    """A contract (docs/contracts.md) was broken; ``contract`` is its name (e.g. ``TREE-CYCLE``)."""

    def __init__(self, contract: str, message: str, event_ids: Iterable[str] = ()) -> None:
        self.contract = contract
        self.event_ids = tuple(event_ids)
        self.message = message
        super().__init__(f"{contract}: {message}")


class TreeError(ContractError):
    """The parent links of a log do not form a valid tree (TREE-*)."""


class AppendError(ContractError):
    """An append was refused (APPEND-*, TREE-PARENT); nothing was written."""


class EventDecodeError(TreadleError):
    """A serialized event could not be read: names the line and the field at fault."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None) -> None:
        self.line = line
        self.field = field
        self.message = message
        where = []
        if line is not None:
            where.append(f"line {line}")
        if field:
            where.append(f"field '{field}'")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)
