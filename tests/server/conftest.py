"""Server fixtures: a real ``treadle serve`` on 127.0.0.1 over a fresh SQLite store, settings
with inline scripted responses, and a clean audit of every conversation the test left behind."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.runtime.settings import ConversationSettings


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'server.db'}"


@pytest.fixture
def postgres_store_url() -> Iterator[str]:
    """A fresh schema in the test PostgreSQL, dropped afterwards."""
    base = os.environ.get("TREADLE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"treadle_server_{uuid.uuid4().hex[:10]}"
    yield f"{base}?schema={schema}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def server(store_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(store_url, log_dir=tmp_path).start()
    yield process
    process.stop()
    assert_store_audits_clean(store_url)


@pytest.fixture
def client(server: ServerProcess) -> Iterator[TreadleClient]:
    with TreadleClient(server.base_url) as opened:
        yield opened


@pytest.fixture
def settings_for(tmp_path: Path):
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)

    def make(responses: list[dict], **fields) -> ConversationSettings:
        # Inline: a server never reads a script file a client names.
        return ConversationSettings.scripted_inline(responses, workspace, **fields)

    return make
