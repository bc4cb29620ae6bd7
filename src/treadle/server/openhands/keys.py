"""The model keys OpenHands SDK clients send (``agent.llm.api_key``), held in this process's
memory only: never stored, never echoed back, masked in every tool output of the conversation.

A conversation created with a key is marked in its metadata (the mark, not the key). When this
process has no key for a marked conversation (the server restarted), the conversation is not
opened here at all, so it can never run keyless nor with the server's own key: the client
sends the key again with ``POST .../secrets`` (``LLM_API_KEY``) or a new create.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from treadle.runtime.errors import NotRunnable
from treadle.runtime.llm.provider import ModelEnvironment
from treadle.runtime.settings import SettingsPolicy
from treadle.server.runs import PolicyFor
from treadle.store.base import EventStore

META_KEY = "openhands"
"""Where a conversation's OpenHands facts live in its metadata (agent spec, key mark)."""
KEY_MARK = "client_key"
"""In ``META_KEY``: true when the conversation's model key came from its client."""
KEY_SECRET_NAMES = ("LLM_API_KEY", "llm_api_key")
"""Secret names ``/secrets`` takes as the conversation's model key."""
MAX_KEY_CHARS = 4096


@dataclass(frozen=True)
class ClientKey:
    key: str
    base_url: str | None


class ClientKeys:
    """conversation id -> its client's key, in memory; thread-safe."""

    def __init__(self) -> None:
        self._keys: dict[str, ClientKey] = {}
        self._lock = threading.Lock()

    def set(self, conversation_id: str, key: str, base_url: str | None) -> None:
        with self._lock:
            self._keys[conversation_id] = ClientKey(key, base_url)

    def get(self, conversation_id: str) -> ClientKey | None:
        with self._lock:
            return self._keys.get(conversation_id)

    def drop(self, conversation_id: str) -> None:
        with self._lock:
            self._keys.pop(conversation_id, None)

    def all_keys(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(entry.key for entry in self._keys.values())

    def policy_for(self, store: EventStore) -> PolicyFor:
        """The ``RunManager.policy_for`` hook over ``store``."""

        def policy_for(conversation_id: str, policy: SettingsPolicy) -> SettingsPolicy:
            entry = self.get(conversation_id)
            if entry is None:
                metadata = store.get_conversation(conversation_id).metadata
                facts = metadata.get(META_KEY)
                if isinstance(facts, dict) and facts.get(KEY_MARK):
                    raise NotRunnable(missing_key_message(conversation_id))
                return policy
            return keyed_policy(policy, entry)

        return policy_for


def keyed_policy(policy: SettingsPolicy, entry: ClientKey) -> SettingsPolicy:
    """``policy`` whose model key is the client's (sent to the client's own base URL, and
    to nowhere the server's key could not go otherwise), masked like the server's keys."""
    environment = policy.provides.model_environment
    own = ModelEnvironment(
        model=environment.model,
        base_url=environment.base_url,
        api_key=entry.key,
        deadline=environment.deadline,
    )
    allowed = policy.allows.key_base_urls + ((entry.base_url,) if entry.base_url else ())
    return SettingsPolicy(
        allows=replace(policy.allows, key_base_urls=allowed),
        provides=replace(
            policy.provides, model_environment=own, masked=(*policy.provides.masked, entry.key)
        ),
    )


def missing_key_message(conversation_id: str) -> str:
    return (
        f"conversation {conversation_id} runs with the model key its OpenHands client sent, "
        "which this server holds in memory only and no longer has (it restarted): send it "
        'again with POST /openhands/api/conversations/{id}/secrets {"secrets": '
        '{"LLM_API_KEY": "..."}} (the SDK\'s update_secrets), or create the conversation again'
    )
