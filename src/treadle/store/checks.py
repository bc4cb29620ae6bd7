"""Input checks a store applies before it writes: conversation ids (``CONVERSATION_ID_RULE``)
and text no store can encode. Both backends refuse the same input with the same error.
"""

from __future__ import annotations

from treadle.data.ids import conversation_id_problem
from treadle.store.base import StoreError


class InvalidConversationId(StoreError, ValueError):
    """A conversation id that breaks ``treadle.data.ids.CONVERSATION_ID_RULE`` (bad input, 422)."""


def check_conversation_id(conversation_id: str) -> str:
    """``conversation_id`` if it follows ``CONVERSATION_ID_RULE``, else InvalidConversationId."""
    problem = conversation_id_problem(conversation_id)
    if problem is not None:
        raise InvalidConversationId(problem)
    return conversation_id


def check_text(name: str, value: str | None) -> None:
    """Refuse text no store can encode (a lone surrogate, from JSON's "\\ud800"), naming it."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise StoreError(
                f"{name} holds a lone surrogate U+{ord(value[error.start]):04X} at position "
                f"{error.start}, which is not text: send valid UTF-8"
            ) from None
