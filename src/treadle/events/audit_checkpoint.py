"""What an ``IncrementalAudit`` keeps between processes: its checkpoint, and the stand-ins for
the per-event records a restored audit reads from the store only when it needs them.

A checkpoint is the audit's state after a prefix of a log (the first ``count`` events, an
immutable prefix of an append-only log), without the events' ``AuditFacts``: the findings, the
totals, the heads, the walk's int arrays (as raw bytes) and the path state of the branch the
walk ended on (the call, action and forgotten-id tables of that path, its open actions). An
audit restored from it (``IncrementalAudit.restore``) answers ``report`` and walks events
that continue that path exactly as the audit that wrote it, and fetches the few older records
it reads (an action a new result names, the parent of the first new event, a head's id) from a
``FactsSource``: the store's rows. Anything else (a fork from an older event) reads the whole
log and audits it again, as the in-memory audit does.

The format is JSON for the small tables and little-endian 32-bit ints for the arrays, never
pickle: a checkpoint is data read from a database, and reading it runs no code.
"""

from __future__ import annotations

import bisect
import json
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from treadle.events.audit_facts import AuditFacts

FORMAT = 1
"""The checkpoint format this Treadle writes and reads; another one is ignored (rebuilt)."""
MAGIC = b"treadle-audit\x00"

T = TypeVar("T")


class FactsSource(Protocol):
    """Where a restored audit reads the records of events before its checkpoint."""

    def facts(self, start: int, end: int) -> Sequence[AuditFacts]:
        """The records of the events at positions ``start <= position < end``, in order."""
        ...

    def positions(self, ids: Sequence[str], end: int) -> dict[str, int]:
        """The positions below ``end`` of those ``ids`` that are events of the log."""
        ...


class CheckpointError(ValueError):
    """Bytes that are not a checkpoint this Treadle reads (another format, damaged)."""


def encode(
    header: dict[str, Any], arrays: dict[str, array[int]], texts: dict[str, list[str]]
) -> bytes:
    """``header`` (JSON), ``arrays`` (32-bit ints) and ``texts`` (lists of strings, such as
    the keys of a path's call table: NUL-joined UTF-8, which splits back in one call; in the
    header when a string holds a NUL) as one checkpoint."""
    sizes = {name: len(values) for name, values in arrays.items()}
    joined: dict[str, bytes] = {}
    inline: dict[str, list[str]] = {}
    for name, strings in texts.items():
        if any("\x00" in text for text in strings):
            inline[name] = strings
        else:
            joined[name] = "\x00".join(strings).encode("utf-8", "surrogatepass")
    lengths = {name: [len(texts[name]), len(data)] for name, data in joined.items()}
    head = json.dumps(
        {**header, "format": FORMAT, "arrays": sizes, "texts": lengths, "inline": inline},
        separators=(",", ":"),
    ).encode()
    parts = [MAGIC, len(head).to_bytes(8, "little"), head]
    for values in arrays.values():
        if values.itemsize != 4:  # pragma: no cover - every platform Treadle runs on
            raise CheckpointError("C ints are not 32 bits here")
        if sys.byteorder != "little":  # pragma: no cover
            values = array("i", values)
            values.byteswap()
        parts.append(values.tobytes())
    parts.extend(joined.values())
    return b"".join(parts)


def decode(
    data: bytes,
) -> tuple[dict[str, Any], dict[str, array[int]], dict[str, list[str]]]:
    """The header, arrays and texts of a checkpoint; CheckpointError when it is not one."""
    try:
        return _decode(data)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(f"a damaged audit checkpoint: {error!r}") from None


def _decode(
    data: bytes,
) -> tuple[dict[str, Any], dict[str, array[int]], dict[str, list[str]]]:
    view = memoryview(data)
    start = len(MAGIC)
    if bytes(view[:start]) != MAGIC or len(data) < start + 8:
        raise CheckpointError("not an audit checkpoint")
    size = int.from_bytes(view[start : start + 8], "little")
    start += 8
    try:
        header = json.loads(bytes(view[start : start + size]))
    except ValueError as error:
        raise CheckpointError(f"damaged checkpoint header: {error}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError("an audit checkpoint of another format")
    start += size
    arrays: dict[str, array[int]] = {}
    for name, length in header["arrays"].items():
        values = array("i")
        end = start + 4 * int(length)
        if end > len(data):
            raise CheckpointError("a truncated audit checkpoint")
        values.frombytes(view[start:end])
        if sys.byteorder != "little":  # pragma: no cover
            values.byteswap()
        arrays[name] = values
        start = end
    texts: dict[str, list[str]] = dict(header["inline"])
    for name, (count, length) in header["texts"].items():
        end = start + int(length)
        if end > len(data):
            raise CheckpointError("a truncated audit checkpoint")
        text = str(view[start:end], "utf-8", "surrogatepass")
        texts[name] = text.split("\x00") if count else []
        if len(texts[name]) != count:
            raise CheckpointError("a damaged audit checkpoint (texts)")
        start = end
    if start != len(data):
        raise CheckpointError("an audit checkpoint with trailing bytes")
    return header, arrays, texts


class BatchTable:
    """The walk's batch table (first action of a batch on the path -> the batch's actions)
    of a restored audit: kept as two int arrays, a batch made a list only when the walk
    asks for it (the last batch, a batch a condensation forgets part of)."""

    def __init__(self, flat: array[int], lengths: array[int]) -> None:
        self._flat = flat
        self._offsets = array("i", [0]) * (len(lengths) + 1)
        total = 0
        for number, length in enumerate(lengths):
            total += length
            self._offsets[number + 1] = total
        if total != len(flat):
            raise ValueError("batch lengths do not add up")
        self._firsts = array("i", (flat[offset] for offset in self._offsets[:-1]))
        self._lists: dict[int, list[int] | None] = {}
        """Batches made lists (None: deleted)."""

    @staticmethod
    def encode(table: dict[int, list[int]]) -> tuple[array[int], array[int]]:
        """(flat positions, lengths) of ``table``, its batches in the order of their first."""
        flat = array("i")
        lengths = array("i")
        for first in sorted(table):
            flat.extend(table[first])
            lengths.append(len(table[first]))
        return flat, lengths

    def _stored(self, first: int) -> list[int] | None:
        number = bisect.bisect_left(self._firsts, first)
        if number < len(self._firsts) and self._firsts[number] == first:
            return list(self._flat[self._offsets[number] : self._offsets[number + 1]])
        return None

    def _get(self, first: int) -> list[int] | None:
        if first not in self._lists:
            self._lists[first] = self._stored(first)
        return self._lists[first]

    def get(self, first: int, default: T) -> list[int] | T:
        found = self._get(first)
        return default if found is None else found

    def __getitem__(self, first: int) -> list[int]:
        found = self._get(first)
        if found is None:
            raise KeyError(first)
        return found

    def setdefault(self, first: int, default: list[int]) -> list[int]:
        found = self._get(first)
        if found is None:
            found = self._lists[first] = default
        return found

    def __delitem__(self, first: int) -> None:
        if self._get(first) is None:
            raise KeyError(first)
        self._lists[first] = None

    def clear(self) -> None:
        self._flat, self._firsts, self._offsets = array("i"), array("i"), array("i", [0])
        self._lists = {}

    def items(self) -> list[tuple[int, list[int]]]:
        """Every batch, in the order of their first (for a checkpoint of a restored audit)."""
        table = {
            first: list(self._flat[self._offsets[n] : self._offsets[n + 1]])
            for n, first in enumerate(self._firsts)
        }
        for first, found in self._lists.items():
            if found is None:
                table.pop(first, None)
            else:
                table[first] = found
        return sorted(table.items())


class LazyFacts(Sequence[AuditFacts]):
    """The records of a restored audit: those before its checkpoint read from the source on
    first use (and kept), the ones walked since held here."""

    def __init__(self, source: FactsSource, base: int) -> None:
        self.source = source
        self.base = base
        self._read: dict[int, AuditFacts] = {}
        self._tail: list[AuditFacts] = []

    def __len__(self) -> int:
        return self.base + len(self._tail)

    def __getitem__(self, position: int) -> AuditFacts:  # type: ignore[override]  # no slices
        if position < 0:
            position += len(self)
        if position >= self.base:
            return self._tail[position - self.base]
        found = self._read.get(position)
        if found is None:
            found = self._read[position] = self.source.facts(position, position + 1)[0]
        return found

    def many(self, positions: Sequence[int]) -> list[AuditFacts]:
        """The records at ``positions``, the ones not read yet fetched in runs of neighbours."""
        missing = sorted({p for p in positions if p < self.base and p not in self._read})
        start = 0
        while start < len(missing):
            end = start
            while end + 1 < len(missing) and missing[end + 1] == missing[end] + 1:
                end += 1
            for offset, facts in enumerate(self.source.facts(missing[start], missing[end] + 1)):
                self._read[missing[start] + offset] = facts
            start = end + 1
        return [self[position] for position in positions]

    def append(self, facts: AuditFacts) -> None:
        self._tail.append(facts)

    def __iter__(self) -> Iterator[AuditFacts]:
        """Every record (reads the whole prefix: only a full audit again asks this)."""
        yield from self.source.facts(0, self.base)
        yield from self._tail


class LazyIndex:
    """Id -> position of a restored audit: positions before the checkpoint asked of the
    source (and kept), those walked since held here."""

    def __init__(self, source: FactsSource, base: int) -> None:
        self.source = source
        self.base = base
        self._known: dict[str, int] = {}
        self._absent: set[str] = set()

    def prefetch(self, ids: Iterable[str]) -> None:
        wanted = [i for i in dict.fromkeys(ids) if i not in self._known and i not in self._absent]
        if not wanted:
            return
        found = self.source.positions(wanted, self.base)
        self._known.update(found)
        self._absent.update(i for i in wanted if i not in found)

    def get(self, event_id: str, default: T) -> int | T:
        if event_id not in self._known and event_id not in self._absent:
            self.prefetch([event_id])
        return self._known.get(event_id, default)

    def __contains__(self, event_id: object) -> bool:
        return isinstance(event_id, str) and self.get(event_id, None) is not None

    def __getitem__(self, event_id: str) -> int:
        position = self.get(event_id, None)
        if position is None:
            raise KeyError(event_id)
        return position

    def __setitem__(self, event_id: str, position: int) -> None:
        self._known[event_id] = position
        self._absent.discard(event_id)


class TailList(Sequence[T]):
    """A per-event list of a restored audit: entries before the checkpoint derived from the
    records (``old(position)``), the ones grown since held here."""

    def __init__(self, base: int, old: Callable[[int], T]) -> None:
        self.base = base
        self._old = old
        self._tail: list[T] = []

    def __len__(self) -> int:
        return self.base + len(self._tail)

    def __getitem__(self, position: int) -> T:  # type: ignore[override]  # no slices
        if position >= self.base:
            return self._tail[position - self.base]
        return self._old(position)

    def __setitem__(self, position: int, value: T) -> None:
        if position < self.base:
            raise IndexError("a restored audit never changes an entry before its checkpoint")
        self._tail[position - self.base] = value

    def append(self, value: T) -> None:
        self._tail.append(value)


def ints(values: Iterable[int]) -> array[int]:
    return array("i", values)


__all__ = [
    "FORMAT",
    "BatchTable",
    "CheckpointError",
    "FactsSource",
    "LazyFacts",
    "LazyIndex",
    "TailList",
    "decode",
    "encode",
]
