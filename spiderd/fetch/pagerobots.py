"""A page's own robots directives: ``<meta name="robots">``, ``X-Robots-Tag`` and ``<link rel="canonical">``,
and which of them the crawl honours (``[fetch]`` obey_nofollow, obey_meta_robots, canonical).  Pure, no Twisted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lxml import etree


@dataclass(frozen=True, slots=True)
class PageRobots:
    """Which directives of a page are honoured (``[fetch]`` obey_nofollow, obey_meta_robots, canonical).

    ``agents`` are the meta names and X-Robots-Tag prefixes that speak to us besides ``robots`` (the user
    agent's product token, lower-case).
    """

    nofollow: bool = True  # rel="nofollow" on a link: that link is not followed
    meta: bool = True  # <meta name="robots"> and X-Robots-Tag: noindex, nofollow, none
    canonical: bool = True  # <link rel="canonical"> of a detail page: the item's url
    agents: tuple[str, ...] = ()

    def as_tuple(self) -> tuple[bool, bool, bool, tuple[str, ...]]:
        """Plain data for the parse workers' init message."""
        return (self.nofollow, self.meta, self.canonical, self.agents)



_VALUE_DIRECTIVES = frozenset(("unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"))
_WORDS = re.compile(r"[\s,]+")


class Directives:
    """What a page's robots directives say: noindex, nofollow, and the canonical href of its head."""

    __slots__ = ("noindex", "nofollow", "canonical")

    def __init__(self) -> None:
        self.noindex = self.nofollow = False
        self.canonical: str | None = None

    def add(self, words: str) -> None:
        """Take the words of one meta content or header value (``noindex, nofollow``, ``none``, ``all``)."""
        for word in _WORDS.split(words.lower()):
            if word in ("noindex", "none"):
                self.noindex = True
            if word in ("nofollow", "none"):
                self.nofollow = True

    @classmethod
    def of_header(cls, robots_tag: str, names: frozenset[str]) -> Directives:
        """X-Robots-Tag lines: ``noindex``, or ``<agent>: noindex, nofollow`` (for us only when the agent is
        one of ours), and several agents on one line (``a: noindex, b: nofollow``)."""
        found = cls()
        for line in robots_tag.splitlines():
            ours = True
            for part in line.split(","):
                name, colon, rest = part.partition(":")
                name = name.strip().lower()
                if colon and name not in _VALUE_DIRECTIVES and " " not in name:
                    ours, part = name in names, rest
                if ours:
                    found.add(part)
        return found


def head_directives(root: etree._Element, robots: PageRobots, names: frozenset[str], kind: str) -> Directives:
    """The directives of the page's ``<head>`` that ``robots`` honours (meta robots named one of ``names``,
    link rel=canonical).

    Only the head is read (where libxml2 puts a meta or link that comes before the body's content): reading
    it costs a few microseconds, a walk of the whole tree would cost as much as the links do.
    """
    found = Directives()
    want_canonical = robots.canonical and kind == "detail"
    if not (robots.meta or want_canonical):
        return found
    head = root.find("head")
    if head is None:
        return found
    for element in head.iter("meta", "link"):
        if element.tag == "meta":
            if robots.meta and (element.get("name") or "").strip().lower() in names:
                found.add(element.get("content") or "")
        elif want_canonical and found.canonical is None and "canonical" in (element.get("rel") or "").lower().split():
            found.canonical = element.get("href")
    return found
