"""Time keys: an event's timestamp as exact microseconds since the epoch, the integer both
backends store and filter by (a float would blur the filters' bounds).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from treadle.events.model import parse_timestamp

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def time_us(moment: datetime) -> int:
    """Microseconds since the epoch, exact (a float would blur the filters' bounds); naive = UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROSECOND


def timestamp_us(timestamp: str) -> int:
    """``time_us`` of an ISO 8601 timestamp as events carry it."""
    return time_us(parse_timestamp(timestamp))
