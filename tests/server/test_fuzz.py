"""Fuzz every operation of the OpenAPI schema (schemathesis) against a real server: no 500s.

Workspaces are confined to a temporary root, so fuzzed settings cannot create folders elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from support.server_process import ServerProcess


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "workspaces").mkdir()
    process = ServerProcess(
        f"sqlite:///{folder / 'fuzz.db'}", log_dir=folder, workspace_root=folder / "workspaces"
    ).start()
    yield process
    process.stop()


def test_no_operation_answers_with_a_server_error(fuzzed_server):
    api = schemathesis.openapi.from_url(f"{fuzzed_server.base_url}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 20  # every REST route is in the schema
    failures: list[str] = []
    calls: list[int] = []

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=20,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
        def call(case):
            response = case.call(base_url=fuzzed_server.base_url, timeout=30)
            calls.append(response.status_code)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path}: {response.text[:300]}")

        call()
    assert failures == []
    assert len(calls) >= 10 * len(operations)  # the fuzzer really called the server
