"""How a run that failed ends: the cause recorded as ERROR, the calls it was running closed,
and, while the store is unavailable, tried again for a while before the error reaches the
caller. A run never stays "running" in the log because something raised."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from treadle.errors import TreadleError
from treadle.runtime.status import ConversationStatus
from treadle.runtime.text import storable_text
from treadle.store.base import StoreError, StoreUnavailable

logger = logging.getLogger(__name__)

STORE_RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0)
"""How long a failed run keeps trying to record its ERROR while its store is unavailable."""


def record_failure(
    error: Exception,
    *,
    conversation_id: str,
    mask: Callable[[str], str],
    record: Callable[[str], ConversationStatus],
) -> ConversationStatus:
    """``record`` the masked cause of ``error`` (closing calls, ERROR); while the store is
    unavailable, tried again (STORE_RETRY_DELAYS_S). When even that fails, ``error``
    propagates to the caller."""
    cause = mask(storable_text(failure_text(error)))
    # A traceback only for what is not ours to explain (a bug); the rest is the cause.
    bug = not isinstance(error, TreadleError)
    logger.warning("the run of conversation %s failed: %s", conversation_id, cause, exc_info=bug)
    delays = iter(STORE_RETRY_DELAYS_S)
    while True:
        try:
            return record(cause)
        except StoreUnavailable:
            delay = next(delays, None)
            if delay is None:
                raise error from None
            time.sleep(delay)
        except Exception:
            raise error from None


def failure_text(error: Exception) -> str:
    """The cause of a failed run in one line: our own errors say it; anything else is a bug,
    whose class name helps."""
    if isinstance(error, StoreError):
        return f"the store failed: {error}"
    if isinstance(error, TreadleError):
        return f"the run failed: {error}"
    return f"the run failed: {type(error).__name__}: {error}"
