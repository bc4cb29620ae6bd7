"""Holding a run lease for as long as a run lasts: taken on entry, renewed from a thread,
released on exit; a holder that dies stops renewing, so its run shows as interrupted."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from treadle.store.base import StoreError
from treadle.store.leases import RunLeases

logger = logging.getLogger(__name__)


class LeaseTaken(StoreError):
    """Another process holds the run lease of this conversation (it runs there now)."""


class HeldLease:
    """``with HeldLease(leases, conversation_id, owner):`` runs under the lease; ``on_lost`` is
    called (from the renewing thread) when another process took it over (we stalled)."""

    def __init__(
        self,
        leases: RunLeases,
        conversation_id: str,
        owner: str,
        *,
        ttl_s: float = 10.0,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.leases = leases
        self.conversation_id = conversation_id
        self.owner = owner
        self.ttl_s = ttl_s
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._renewer = threading.Thread(
            target=self._renew, name=f"treadle-lease-{conversation_id[:8]}", daemon=True
        )

    def __enter__(self) -> HeldLease:
        if not self.leases.acquire(self.conversation_id, self.owner, self.ttl_s):
            # Named, so the user knows which process to wait for or stop (it may end meanwhile).
            holder = self.leases.holder(self.conversation_id) or "a process that just ended"
            raise LeaseTaken(
                f"conversation {self.conversation_id} is running in another process "
                f"(run lease held by {holder})"
            )
        self._renewer.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._renewer.join()
        try:
            self.leases.release(self.conversation_id, self.owner)
        except (
            Exception
        ):  # the lease expires by itself; a failed release must not mask the run's end
            logger.warning("could not release the run lease of %s", self.conversation_id)

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                held = self.leases.renew(self.conversation_id, self.owner, self.ttl_s)
            except Exception:  # the store may come back before the lease expires: keep trying
                logger.warning("could not renew the run lease of %s", self.conversation_id)
                continue
            if not held:
                logger.warning("lost the run lease of %s", self.conversation_id)
                if self._on_lost is not None:
                    self._on_lost()
                return
