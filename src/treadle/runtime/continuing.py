"""Continuing a stored conversation that has no settings (an imported one): the settings given
to run it are stored with it once, under the run lease the caller holds, beside its metadata."""

from __future__ import annotations

from treadle.data.settings import SETTINGS_KEY, ConversationSettings
from treadle.store.base import EventStore


def store_missing_settings(
    store: EventStore, conversation_id: str, settings: ConversationSettings
) -> bool:
    """Keep ``settings`` with the conversation if it still has none (True); a conversation
    that has its own keeps them (False). The caller holds the run lease, so no other process
    stores others in between."""
    metadata = dict(store.get_conversation(conversation_id).metadata)
    if metadata.get(SETTINGS_KEY) is not None:
        return False
    metadata[SETTINGS_KEY] = settings.to_metadata()
    store.update_conversation(conversation_id, metadata=metadata)
    return True
