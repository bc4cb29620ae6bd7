"""Which worker a request reaches (``server/workers/routing.py``): read from the path as the
worker's router reads it, a UUID in any form the OpenHands API takes routed as one, ids a
worker makes routed back to it, and paths no route has refused."""

from __future__ import annotations

import uuid

import pytest

from treadle.data import ids
from treadle.data.ids import new_id, slot_of
from treadle.server.workers.routing import (
    Elsewhere,
    check_here,
    every_worker,
    odd_path,
    route_key,
    worker_of,
)

KEY = "3f2b1c9e-8a1d-4e2f-9b7c-1a2b3c4d5e6f"


@pytest.mark.parametrize(
    ("path", "query", "key"),
    [
        (f"/api/conversations/{KEY}/run", b"", KEY),
        (f"/api/conversations/{KEY}", b"", KEY),
        (f"/api/conversations/{KEY}/events/stream", b"after_seq=3", KEY),
        (f"/openhands/api/conversations/{KEY}/events/search", b"", KEY),
        (f"/openhands/sockets/events/{KEY}", b"", KEY),
        ("/openhands/api/bash/bash_commands/abc/stop", b"", "abc"),
        ("/openhands/api/bash/bash_events/search", b"command_id__eq=a&command_id__eq=b", "b"),
        ("/openhands/api/bash/bash_events/search", b"command_id__eq=%61b", "ab"),
        ("/api/conversations", b"", None),
        ("/api/conversations/", b"", None),
        ("/api/conversations//run", b"", None),
        ("/api/evals", b"", None),
        ("/health", b"", None),
    ],
)
def test_the_key_is_the_first_segment_the_router_reads(path, query, key) -> None:
    assert route_key(path, query) == key


def test_a_uuid_in_any_form_goes_to_one_worker() -> None:
    forms = [KEY, KEY.upper(), KEY.replace("-", ""), "{" + KEY + "}", f"urn:uuid:{KEY}"]
    assert len({slot_of(form, 7) for form in forms}) == 1
    assert {worker_of(f"/openhands/api/conversations/{f}", b"", 7) for f in forms} == {
        slot_of(KEY, 7)
    }


def test_ids_a_worker_makes_are_its_own_and_others_are_sent_on() -> None:
    try:
        for slot in range(3):
            ids.set_born_in(slot, 3)
            made = [new_id() for _ in range(20)]
            assert {slot_of(key, 3) for key in made} == {slot}
            for key in made:
                check_here(key)  # ours: no Elsewhere
            other = next(
                k for k in (str(uuid.uuid4()) for _ in range(100)) if slot_of(k, 3) != slot
            )
            with pytest.raises(Elsewhere) as caught:
                check_here(other)
            assert caught.value.slot == slot_of(other, 3)
    finally:
        ids.set_born_in(0, 1)
    check_here(KEY)  # one process: everything is here


@pytest.mark.parametrize(
    ("path", "odd"),
    [
        ("/api/conversations/a/../b/run", True),
        ("/api/conversations/./b", True),
        ("/api/conversations/..", True),
        ("/api/conversations/a..b/run", False),
        ("/api/conversations/.hidden", False),
    ],
)
def test_dot_segments_are_refused(path, odd) -> None:
    assert odd_path(path) is odd


@pytest.mark.parametrize(
    ("method", "path", "query", "every"),
    [
        ("GET", "/openhands/api/bash/bash_events/search", b"", True),
        ("GET", "/openhands/api/bash/bash_events/search", b"kind__eq=BashOutput&limit=5", True),
        ("GET", "/openhands/api/bash/bash_events/search", b"command_id__eq=abc", False),
        ("GET", "/openhands/api/bash/bash_events/search", b"command_id__eq=", False),
        ("POST", "/openhands/api/bash/bash_events/search", b"", False),
        ("GET", "/openhands/api/bash/bash_events/search/", b"", False),
        ("GET", "/api/conversations", b"", False),
    ],
)
def test_only_the_listing_of_every_command_goes_to_every_worker(method, path, query, every):
    assert every_worker(method, path, query) is every
