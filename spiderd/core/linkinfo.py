"""What the linkbase keeps of a link (seed 004's linkinfo), bounded the same where a page's links are read
(``spiderd.fetch.links``) and where the pool stores them (``spiderd.frontier.pool.crawled``)."""

from __future__ import annotations

MAX_ANCHOR = 200  # characters of anchor text
MAX_XPATH = 500  # characters of the link element's path; a longer one is left out


def clean_anchor(text: str | None) -> str:
    """Anchor text on one line, whitespace collapsed, at most MAX_ANCHOR characters."""
    return " ".join((text or "").split())[:MAX_ANCHOR].rstrip()


def clean_xpath(path: str | None) -> str:
    """The element path as kept: one line of at most MAX_XPATH characters, else left out ("")."""
    path = path or ""
    return "" if len(path) > MAX_XPATH or "\n" in path or "\r" in path else path
