"""Header values as text, and HTTP dates (``Last-Modified``, ``Retry-After``) as Unix seconds."""

from __future__ import annotations

import email.utils
import functools
import math

DATES_KEPT = 1024  # the last HTTP dates read, kept with their seconds (a site's pages share a few Last-Modified)


def header_text(value: bytes | str | None) -> str | None:
    """A header's value as stripped text (bytes read as Latin-1, as HTTP's are), or None when absent or empty."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    return text.strip() or None


def http_date(value: bytes | str | None) -> float | None:
    """An HTTP date as Unix seconds; None if absent, malformed, without a zone (an HTTP date is GMT; ``-0000``
    gives a naive datetime) or not finite."""
    text = header_text(value)
    return None if text is None else _seconds(text)


@functools.lru_cache(maxsize=DATES_KEPT)
def _seconds(text: str) -> float | None:
    """:func:`http_date` of a value's text (email.utils' parse costs about 10 us: each text is read once)."""
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    seconds = when.timestamp()
    return seconds if math.isfinite(seconds) else None
