"""Fetch outcomes as status codes: HTTP codes, and spiderd's own negative codes.

The pool only needs to know which codes are done, which are final failures and
which are retried; the names are for stats, logs and the API.
"""

from __future__ import annotations

from spiderd.core.secrets import redact_text

# Retried, like any HTTP code that is neither done nor final.
DNS_ERROR = -1
CONNECT_REFUSED = -2
CONNECTION_LOST = -3
TIMEOUT = -4
NETWORK_ERROR = -5
CONNECT_ERROR = -6
PROCESSING_ERROR = -7  # parsing or storing a fetched page failed
OUT_OF_STEP = -8  # bytes came past an answer on a reused connection: the answer may have been an earlier request's

# Final: fetching again would give the same answer.
ROBOTS_DENIED = -10
TOO_LARGE = -11
TOO_MANY_REDIRECTS = -12
BAD_REDIRECT = -13
# The server's fixed fault (spiderd.fetch.framing): counted as the URL's failure, never retried at network speed.
MALFORMED = -14  # an answer that breaks HTTP/1.1's syntax or framing: headers too long, a bad chunk, ...
CUT_SHORT = -15  # the server closed the connection cleanly before the end its framing announced

DONE_CODES = frozenset({200, 304})  # 304: a conditional GET's page did not change (core.conditional)
FINAL_CODES = frozenset({404, 410, ROBOTS_DENIED, TOO_LARGE, TOO_MANY_REDIRECTS, BAD_REDIRECT, MALFORMED, CUT_SHORT})
FAILURE_THRESHOLD = 3

NAMES = {
    DNS_ERROR: "dns",
    CONNECT_REFUSED: "refused",
    CONNECTION_LOST: "reset",
    TIMEOUT: "timeout",
    NETWORK_ERROR: "network",
    CONNECT_ERROR: "connect",
    PROCESSING_ERROR: "processing",
    OUT_OF_STEP: "out-of-step",
    ROBOTS_DENIED: "robots",
    TOO_LARGE: "too-large",
    TOO_MANY_REDIRECTS: "redirects",
    BAD_REDIRECT: "bad-redirect",
    MALFORMED: "malformed",
    CUT_SHORT: "cut-short",
}


def name(code: int) -> str:
    """A short name for a status code: ``"404"``, ``"timeout"``."""
    return NAMES.get(code, str(code))


# -- why a URL failed -------------------------------------------------------------------------------------

REASON_LENGTH = 200  # a recorded reason is cut here (the pool keeps one per URL that failed)

WORDS = {
    PROCESSING_ERROR: "processing error",
    OUT_OF_STEP: "out of step",
    ROBOTS_DENIED: "robots",
    TOO_LARGE: "too large",
    TOO_MANY_REDIRECTS: "too many redirects",
    BAD_REDIRECT: "bad redirect",
    MALFORMED: "malformed answer",
    CUT_SHORT: "cut short",
}


def reason(code: int, detail: str | None = None) -> str:
    """Why a fetch failed, in a few words: ``http 503``, ``refused: ConnectionRefusedError: ...``,
    ``too large: more than 10485760 bytes``; cut and redacted as :func:`clean` does."""
    kind = f"http {code}" if code > 0 else WORDS.get(code, name(code))
    return clean(f"{kind}: {detail}" if detail else kind)


def recorded(code: int, given: str | None = None) -> str:
    """The reason a pool keeps for a failure with ``code``: ``given`` (cleaned), else the code's words."""
    return clean(given) if given else reason(code)


def clean(text: str) -> str:
    """A reason as the pool records it: on one line, passwords of URIs in it masked, at most REASON_LENGTH
    characters."""
    text = " ".join(redact_text(text).split())
    return text if len(text) <= REASON_LENGTH else text[: REASON_LENGTH - 3] + "..."
