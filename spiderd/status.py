"""Fetch outcomes as status codes: HTTP codes, and spiderd's own negative codes.

The pool only needs to know which codes are done, which are final failures and
which are retried; the names are for stats, logs and the API.
"""

from __future__ import annotations

# Retried, like any HTTP code that is neither done nor final.
DNS_ERROR = -1
CONNECT_REFUSED = -2
CONNECTION_LOST = -3
TIMEOUT = -4
NETWORK_ERROR = -5
CONNECT_ERROR = -6
PROCESSING_ERROR = -7  # parsing or storing a fetched page failed

# Final: fetching again would give the same answer.
ROBOTS_DENIED = -10
TOO_LARGE = -11
TOO_MANY_REDIRECTS = -12
BAD_REDIRECT = -13

DONE_CODES = frozenset({200})
FINAL_CODES = frozenset({404, 410, ROBOTS_DENIED, TOO_LARGE, TOO_MANY_REDIRECTS, BAD_REDIRECT})
FAILURE_THRESHOLD = 3

NAMES = {
    DNS_ERROR: "dns",
    CONNECT_REFUSED: "refused",
    CONNECTION_LOST: "reset",
    TIMEOUT: "timeout",
    NETWORK_ERROR: "network",
    CONNECT_ERROR: "connect",
    PROCESSING_ERROR: "processing",
    ROBOTS_DENIED: "robots",
    TOO_LARGE: "too-large",
    TOO_MANY_REDIRECTS: "redirects",
    BAD_REDIRECT: "bad-redirect",
}


def name(code: int) -> str:
    """A short name for a status code: ``"404"``, ``"timeout"``."""
    return NAMES.get(code, str(code))
