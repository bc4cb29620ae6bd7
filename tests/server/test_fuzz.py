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


HOSTILE_VALUES = [
    "1e23",
    str(10**23),
    str(-(10**23)),
    str(2**63),
    str(-(2**63) - 1),
    "-1",
    "NaN",
    "%00",
    "%ED%A0%80",  # the UTF-8 bytes of a lone surrogate
    "%FF%FE",
    "..",
    "a%2Fb",
    "x" * 10_000,
]
"""Values put in every path and query parameter: numbers past int64, odd bytes, huge text."""

HOSTILE_BODIES = [
    '{"id": "\\ud800", "title": "\\udfff", "text": "\\ud800", "event_id": "\\ud800"}',
    '{"\\ud800": 1}',
    '{"max_steps": 1e308, "action_ids": [1e23], "limit": -1e23}',
    '{"max_steps": 100000000000000000000000000}',
    "[" * 10_000 + "]" * 10_000,
    '{"a": ' + "[" * 5_000 + "]" * 5_000 + "}",
    "NaN",
    '"\\u0000"',
    "{" + '"k": 1,' * 1000,
]
"""Raw JSON bodies sent to every operation that takes one: surrogates, depth, huge numbers."""


def test_hostile_values_in_every_parameter_and_body_are_never_a_server_error(fuzzed_server):
    import httpx

    base = fuzzed_server.base_url
    settings = {"model": {"kind": "scripted", "responses": [{"text": "hi"}]}, "workspace": "fuzz"}
    made = httpx.post(f"{base}/api/conversations", json={"id": "fuzz", "settings": settings})
    assert made.status_code in (200, 201), made.text  # the target of the bodies below
    schema = httpx.get(f"{base}/openapi.json").json()
    failures: list[str] = []
    calls = 0
    with httpx.Client(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                params = operation.get("parameters", [])
                names = [p["name"] for p in params if p["in"] == "path"]
                queries = [p["name"] for p in params if p["in"] == "query"]
                for value in HOSTILE_VALUES:
                    url = path
                    for name in names:
                        url = url.replace("{" + name + "}", value)
                    tries = [url] + [f"{url}?{query}={value}" for query in queries]
                    for target in tries:
                        response = client.request(method.upper(), base + target)
                        calls += 1
                        if response.status_code >= 500:
                            failures.append(f"{method} {target[:120]}: {response.text[:200]}")
                if "requestBody" in operation:
                    url = path
                    for name in names:
                        url = url.replace("{" + name + "}", "fuzz")
                    for raw in HOSTILE_BODIES:
                        response = client.request(
                            method.upper(),
                            base + url,
                            content=raw.encode(),
                            headers={"content-type": "application/json"},
                        )
                        calls += 1
                        if response.status_code >= 500:
                            failures.append(f"{method} {url} {raw[:40]}: {response.text[:200]}")
    assert failures == []
    assert calls > 300
