"""Secrets (API keys, tokens) the tools may use but whose values must never be recorded.

Values registered here are masked as ``<secret:NAME>`` in tool output before it leaves the tool
layer: as they are, and in their hex and base64 forms (also broken over lines).
"""

from __future__ import annotations

import base64
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from treadle.errors import TreadleError

MIN_SECRET_LENGTH = 4
"""Shorter values would mask ordinary text everywhere (and are no secret anyway)."""

MIN_ENCODED_LENGTH = 8
"""A hex or base64 form shorter than this is not masked (it would match ordinary text)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LINE_BREAK = r"(?:\r?\n)?"
"""Allowed between any two characters of a form: ``base64`` and ``xxd`` wrap long lines."""


class SecretError(TreadleError, ValueError):
    """A secret could not be registered: bad name or a value too short to mask safely."""


class Secrets:
    """A thread-safe registry of named secret values.

    ``mask`` replaces every registered value (and its hex and base64 forms) in a text; ``env``
    gives the exported ones to a shell as environment variables. ``repr`` and ``str`` never
    show a value.
    """

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, str] = {}
        self._exported: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._by_form: dict[str, str] = {}
        self._version = 0
        for name, value in (values or {}).items():
            self.add(name, value)

    @classmethod
    def from_environ(cls, names: list[str], environ: Mapping[str, str]) -> Secrets:
        """Secrets for the given variable names that are set (and non-empty) in ``environ``."""
        return cls({name: environ[name] for name in names if environ.get(name)})

    def add(self, name: str, value: str, *, export: bool = True) -> None:
        """Register (or replace) a secret; its value is masked from now on. ``export=False``:
        masked only, never given to a shell (e.g. the model's own key)."""
        if not _NAME.fullmatch(name):
            raise SecretError(
                f"secret name {name!r} is not a valid environment variable name "
                "(letters, digits and '_', not starting with a digit)"
            )
        if len(value) < MIN_SECRET_LENGTH:
            raise SecretError(
                f"secret {name} is shorter than {MIN_SECRET_LENGTH} characters: masking it "
                "would garble ordinary output; register the real value"
            )
        with self._lock:
            self._values[name] = value
            if export:
                self._exported.add(name)
            else:
                self._exported.discard(name)
            self._rebuild()

    def remove(self, name: str) -> None:
        with self._lock:
            self._values.pop(name, None)
            self._exported.discard(name)
            self._rebuild()

    def _rebuild(self) -> None:
        self._version += 1
        self._by_form = {}
        for name, value in self._values.items():
            for form in _forms(value):
                self._by_form.setdefault(form, name)
        # Longest first, so a secret that contains another one is masked whole.
        ordered = sorted(self._by_form, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(_broken_over_lines, ordered))) if ordered else None

    @property
    def version(self) -> int:
        """Changes whenever a secret is added or removed (a shell re-exports on change)."""
        return self._version

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._values)

    def env(self) -> dict[str, str]:
        """The exported secrets as environment variables (name -> value), for the terminal."""
        with self._lock:
            return {name: self._values[name] for name in self._exported}

    def mask(self, text: str) -> str:
        """``text`` with every registered value, or hex or base64 form of one, replaced by
        ``<secret:NAME>``."""
        with self._lock:
            pattern, by_form = self._pattern, self._by_form
        if pattern is None or not text:
            return text

        def name_of(match: re.Match[str]) -> str:
            found = match.group(0).replace("\r", "").replace("\n", "")
            return f"<secret:{by_form.get(found) or by_form[found.lower()]}>"

        return pattern.sub(name_of, text)

    def forms(self) -> list[str]:
        """Every text that gives a secret away (values, hex and base64 forms): what output
        streamed in pieces must hold back the start of (``runtime/live_output.py``)."""
        with self._lock:
            return list(self._by_form)

    def mask_around_cut(self, before: str, after: str) -> tuple[str, str]:
        """Mask the two sides of a cut in a text (truncated output), including a secret (or a
        form of one) the cut split: its start ending ``before`` or its end starting ``after``
        (4 characters or more)."""
        before, after = self.mask(before), self.mask(after)
        with self._lock:
            forms = list(self._by_form.items())
        for value, name in forms:
            for length in range(len(value) - 1, MIN_SECRET_LENGTH - 1, -1):
                if before.endswith(value[:length]):
                    before = before[:-length] + f"<secret:{name}>"
                    break
            for length in range(len(value) - 1, MIN_SECRET_LENGTH - 1, -1):
                if after.startswith(value[-length:]):
                    after = f"<secret:{name}>" + after[length:]
                    break
        return before, after

    def mask_json(self, value: Any) -> Any:
        """A copy of a JSON value with every string (keys too) masked."""
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, Mapping):
            return {self.mask(str(key)): self.mask_json(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.mask_json(item) for item in value]
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Secrets(names={self.names()!r})"

    __str__ = __repr__


def _forms(value: str) -> set[str]:
    """The texts that give ``value`` away: itself, its hex (lower case; matched in any case) and
    its base64 and base64url forms at each of the three alignments it can have inside a longer
    encoded stream (only the characters that depend on the value alone)."""
    raw = value.encode("utf-8")
    forms = {value}
    encoded = {raw.hex()}
    for offset in range(3):
        padded = bytes(offset) + raw
        first = -(-8 * offset // 6)  # the first character without bits of the bytes before
        last = 8 * len(padded) // 6  # past the last character without bits of the bytes after
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded.add(encode(padded).decode("ascii")[first:last])
    forms.update(form for form in encoded if len(form) >= MIN_ENCODED_LENGTH)
    return forms


def _broken_over_lines(form: str) -> str:
    pattern = _LINE_BREAK.join(map(re.escape, form))
    # Hex is written in either case (xxd: lower, od/printf %X: upper).
    return (
        f"(?i:{pattern})" if re.fullmatch(r"[0-9a-f]+", form) and form != form.upper() else pattern
    )
