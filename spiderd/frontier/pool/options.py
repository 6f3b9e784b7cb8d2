"""What every pool backend is given, in one frozen value: the ``[pool]`` section, the pool's keys of ``[fetch]``
and what the ``[[sites]]`` ask of it (the LevelDB, memory and Redis pools take the same :class:`PoolOptions`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from spiderd.config.sections import PoolSection
from spiderd.core import status as st


@dataclass(frozen=True)
class PoolOptions:
    """A pool's options (besides its politeness, a live object, and where it keeps its data)."""

    config: PoolSection = field(default_factory=PoolSection)  # thresholds, limits, linkbase, kinds' shares, hops
    max_throttles: int = 10  # [fetch]: a URL's throttled fetches before the next one counts as its failure
    conditional_get: bool = True  # [fetch]: keep hubs' and recrawled pages' validators
    per_ip: bool = False  # [fetch] politeness = "ip": the Redis pool groups hosts by address from its first pop
    recrawl: tuple[tuple[str, str], ...] = ()  # (registered domain, kind) whose done pages are kept in crawled sets
    site_hops: Mapping[str, int] = field(default_factory=dict)  # the sites' own max_hops by registered domain
    done_codes: frozenset[int] = st.DONE_CODES
    final_codes: frozenset[int] = st.FINAL_CODES

    @classmethod
    def of(cls, **values: Any) -> PoolOptions:
        """Options from keywords: ``[pool]`` keys (``failure_threshold=2``) and this class's own (``recrawl=...``);
        an unknown keyword is a TypeError."""
        own = {f.name for f in fields(cls)} - {"config"}
        config = PoolSection(**{key: value for key, value in values.items() if key not in own})
        given = {key: value for key, value in values.items() if key in own}
        if "recrawl" in given:
            given["recrawl"] = tuple((domain, kind) for domain, kind in given["recrawl"])
        return cls(config, **given)
