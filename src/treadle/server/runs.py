"""Background runs of conversations in a server process, under a run lease.

A run (or a confirmation, which runs tools) happens in a thread; the lease makes sure exactly
one server process runs a conversation at a time. A watcher takes over conversations whose
holder stopped renewing (crashed): it reopens them and runs on, which first closes the calls
the crash interrupted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import SettingsPolicy
from treadle.runtime.status import ConversationStatus
from treadle.runtime.workspace.base import WorkspacePathError
from treadle.server.errors import ApiError
from treadle.server.limits import MAX_RUNNING
from treadle.store.base import ConversationNotFound, EventStore
from treadle.store.leases import SERVER, RunLeases, new_owner

logger = logging.getLogger(__name__)

Operation = Callable[[Conversation], Any]


class RunManager:
    def __init__(
        self,
        store: EventStore,
        leases: RunLeases,
        *,
        lease_ttl_s: float = 10.0,
        takeover: bool = True,
        policy: SettingsPolicy | None = None,
        max_running: int = MAX_RUNNING,
    ) -> None:
        self.store = store
        self.policy = policy or SettingsPolicy()
        """What stored settings may reach when this process opens a conversation."""
        self.leases = leases
        self.owner = new_owner(SERVER)
        self.lease_ttl_s = lease_ttl_s
        self.max_running = max_running
        self._conversations: dict[str, Conversation] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch, name="treadle-lease-watch", daemon=True
        )
        if takeover:
            self._watcher.start()

    def conversation(self, conversation_id: str) -> Conversation:
        """This process's object for a stored conversation (opened from its settings)."""
        with self._lock:
            found = self._conversations.get(conversation_id)
            if found is None:
                found = Conversation.open(self.store, conversation_id, policy=self.policy)
                self._conversations[conversation_id] = found
            return found

    def forget(self, conversation_id: str) -> None:
        with self._lock:
            found = self._conversations.pop(conversation_id, None)
        if found is not None:
            found.close()

    def is_running(self, conversation_id: str) -> bool:
        thread = self._threads.get(conversation_id)
        return thread is not None and thread.is_alive()

    def start(self, conversation_id: str, operation: Operation, name: str) -> None:
        """Run ``operation`` on the conversation in the background; 409 when it is already
        running here or in another server process."""
        conversation = self.conversation(conversation_id)
        try:
            # Confinement is checked again (real paths) at every start: the folder may have
            # been replaced by a symlink since the conversation was opened.
            conversation.workspace.resolve(".")
        except WorkspacePathError as error:
            raise ApiError(409, "not_runnable", str(error)) from None
        with self._lock:
            if self.is_running(conversation_id):
                raise ApiError(409, "already_running", f"conversation {conversation_id} is running")
            running = sum(thread.is_alive() for thread in self._threads.values())
            if running >= self.max_running:
                raise ApiError(
                    429,
                    "too_many_running",
                    f"this server already runs {running} conversations (its --max-running); "
                    "retry when one ends, or pause one",
                )
            if not self.leases.acquire(conversation_id, self.owner, self.lease_ttl_s):
                raise ApiError(
                    409, "already_running", f"conversation {conversation_id} runs in another server"
                )
            thread = threading.Thread(
                target=self._guarded,
                args=(conversation, operation),
                name=f"treadle-{name}-{conversation_id[:8]}",
                daemon=True,
            )
            self._threads[conversation_id] = thread
            thread.start()

    def wait(self, conversation_id: str, timeout: float | None = None) -> None:
        thread = self._threads.get(conversation_id)
        if thread is not None:
            thread.join(timeout)

    def shutdown(self) -> None:
        self._stopping.set()
        with self._lock:
            conversations = list(self._conversations.values())
        for conversation in conversations:
            conversation.pause()
        for thread in list(self._threads.values()):
            thread.join(timeout=10)
        for conversation in conversations:
            conversation.close()
        self.leases.close()

    def _guarded(self, conversation: Conversation, operation: Operation) -> None:
        stop_renewing = threading.Event()
        renewer = threading.Thread(
            target=self._renew, args=(conversation, stop_renewing), daemon=True
        )
        renewer.start()
        try:
            operation(conversation)
        except Exception:  # recorded by the conversation where it can; never kill the server
            logger.exception("run of conversation %s failed", conversation.id)
        finally:
            stop_renewing.set()
            renewer.join()
            self.leases.release(conversation.id, self.owner)

    def _renew(self, conversation: Conversation, stop: threading.Event) -> None:
        while not stop.wait(self.lease_ttl_s / 3):
            if not self.leases.renew(conversation.id, self.owner, self.lease_ttl_s):
                # Another server took over (we stalled past the lease): stop at the next safe point.
                logger.warning("lost the run lease of %s; pausing here", conversation.id)
                conversation.pause()
                return

    def _watch(self) -> None:
        while not self._stopping.wait(self.lease_ttl_s / 2):
            try:
                # Only runs a server started: a dead CLI run waits for someone to run it again.
                for conversation_id in self.leases.expired(kind=SERVER):
                    self._take_over(conversation_id)
            except Exception:
                logger.exception("lease watcher failed; retrying")

    def _take_over(self, conversation_id: str) -> None:
        try:
            conversation = self.conversation(conversation_id)
        except ConversationNotFound:
            return
        if conversation.stored_status()[0] is not ConversationStatus.RUNNING:
            return
        try:
            self.start(conversation_id, lambda c: c.run(), "takeover")
            logger.info("took over conversation %s from a crashed server", conversation_id)
        except ApiError:
            pass  # another server was faster
