"""Secrets (API keys, tokens) the tools may use but whose values must never be recorded.

Values registered here are masked as ``<secret:NAME>`` in tool output before it leaves the tool layer.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from treadle.errors import TreadleError

MIN_SECRET_LENGTH = 4
"""Shorter values would mask ordinary text everywhere (and are no secret anyway)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SecretError(TreadleError, ValueError):
    """A secret could not be registered: bad name or a value too short to mask safely."""


class Secrets:
    """A thread-safe registry of named secret values.

    ``mask`` replaces every registered value in a text; ``env`` gives them to a shell as
    environment variables. ``repr`` and ``str`` never show a value.
    """

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, str] = {}
        self._pattern: re.Pattern[str] | None = None
        self._by_value: dict[str, str] = {}
        self._version = 0
        for name, value in (values or {}).items():
            self.add(name, value)

    @classmethod
    def from_environ(cls, names: list[str], environ: Mapping[str, str]) -> Secrets:
        """Secrets for the given variable names that are set (and non-empty) in ``environ``."""
        return cls({name: environ[name] for name in names if environ.get(name)})

    def add(self, name: str, value: str) -> None:
        """Register (or replace) a secret; its value is masked from now on."""
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
            self._rebuild()

    def remove(self, name: str) -> None:
        with self._lock:
            self._values.pop(name, None)
            self._rebuild()

    def _rebuild(self) -> None:
        self._version += 1
        self._by_value = {value: name for name, value in self._values.items()}
        # Longest first, so a secret that contains another one is masked whole.
        ordered = sorted(self._by_value, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    @property
    def version(self) -> int:
        """Changes whenever a secret is added or removed (a shell re-exports on change)."""
        return self._version

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._values)

    def env(self) -> dict[str, str]:
        """The secrets as environment variables (name -> value), for the terminal."""
        with self._lock:
            return dict(self._values)

    def mask(self, text: str) -> str:
        """``text`` with every registered value replaced by ``<secret:NAME>``."""
        with self._lock:
            pattern, by_value = self._pattern, self._by_value
        if pattern is None or not text:
            return text
        return pattern.sub(lambda match: f"<secret:{by_value[match.group(0)]}>", text)

    def mask_around_cut(self, before: str, after: str) -> tuple[str, str]:
        """Mask the two sides of a cut in a text (truncated output), including a secret the cut
        split: its start ending ``before`` or its end starting ``after`` (4 characters or more)."""
        before, after = self.mask(before), self.mask(after)
        for name, value in self.env().items():
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
