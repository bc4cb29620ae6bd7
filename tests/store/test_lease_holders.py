"""``RunLeases.holders``: a listed page's lease holders in one read, on both backends; the
same answers as ``holder`` asked one by one."""

from __future__ import annotations

import time

from treadle.store.leases import CLI, SERVER, new_owner, open_leases


def test_holders_of_many_conversations_answer_as_holder_does(store, store_url) -> None:
    leases = open_leases(store_url)
    try:
        server, cli = new_owner(SERVER), new_owner(CLI)
        held = {f"s{n}": server for n in range(300)} | {f"c{n}": cli for n in range(300)}
        for conversation_id, owner in held.items():
            assert leases.acquire(conversation_id, owner, 60)
        assert leases.acquire("stalled", server, 0.001)  # its holder stopped renewing
        assert leases.acquire("released", server, 60)
        leases.release("released", server)
        time.sleep(0.05)
        asked = [*held, "stalled", "released", "never", "s0"]  # past a chunk of ids, repeated
        found = leases.holders(asked)
        assert found == held
        assert found == {cid: leases.holder(cid) for cid in asked if leases.holder(cid)}
        assert leases.holders([]) == {}
    finally:
        leases.close()
