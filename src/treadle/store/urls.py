"""Store URLs: the default store of this user, and ``open_store`` choosing the backend by scheme.

Forms (SQLAlchemy's convention): ``sqlite:///rel.db``, ``sqlite:////abs.db``, ``postgresql://…``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from treadle.store.base import EventStore, StoreError

ACCEPTED_FORMS = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db (optionally "
    "?durability=durable|fast), postgresql://user@host:port/db (optionally ?schema=NAME)"
)
SQLITE_OPTIONS = ("durability",)


def default_store_dir() -> Path:
    """``$XDG_DATA_HOME/treadle``, else ``~/.local/share/treadle`` (the user's data dir)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "treadle"


def default_store_url() -> str:
    """``$TREADLE_STORE``, else the SQLite file in the user's data dir (created if missing)."""
    configured = os.environ.get("TREADLE_STORE")
    if configured:
        return configured
    directory = default_store_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'treadle.db'}"


def sqlite_path_and_options(url: str) -> tuple[Path, dict[str, str]]:
    """The file and the query options of a ``sqlite:///`` URL; StoreError says what is wrong."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise _bad_url(url, "it is not a sqlite: URL")
    if parts.netloc:
        raise _bad_url(url, f"host {parts.netloc!r} given: a SQLite URL has three slashes")
    path = unquote(parts.path)
    # sqlite:///rel.db -> path "/rel.db" (relative); sqlite:////abs.db -> "//abs.db" (absolute)
    if not path.startswith("/") or len(path) < 2:
        raise _bad_url(url, "no file path given")
    file = path[1:]
    if file == ":memory:":
        raise _bad_url(url, "in-memory stores are not supported: give a file path")
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in SQLITE_OPTIONS:
            raise _bad_url(url, f"unknown option {key!r} (known: {', '.join(SQLITE_OPTIONS)})")
        options[key] = value
    return Path(file), options


def open_store(url: str | None = None, **options: Any) -> EventStore:
    """Open (creating if needed) the store at ``url`` (default: ``default_store_url()``).

    ``options`` go to the backend and override the URL's query (sqlite: ``durability``).
    """
    url = default_store_url() if url is None else url
    if not isinstance(url, str) or not url.strip():
        raise _bad_url(str(url), "it is empty")
    scheme = urlsplit(url).scheme.split("+", 1)[0].lower()
    if scheme == "sqlite":
        from treadle.store.sqlite import SqliteEventStore

        path, url_options = sqlite_path_and_options(url)
        return SqliteEventStore(path, **{**url_options, **options})
    if scheme in ("postgresql", "postgres"):
        try:
            # lazily: psycopg is only needed by those who use PostgreSQL
            from treadle.store.postgres import PostgresEventStore
        except ImportError as error:
            raise StoreError(
                f"cannot open {url!r}: the PostgreSQL backend is not available ({error}); "
                "install psycopg ('pip install psycopg[binary]') or use a sqlite:/// URL"
            ) from None
        return PostgresEventStore(url, **options)
    raise _bad_url(url, f"unknown scheme {scheme!r}" if scheme else "no scheme")


def _bad_url(url: str, problem: str) -> StoreError:
    return StoreError(f"bad store URL {url!r}: {problem}; accepted forms: {ACCEPTED_FORMS}")
