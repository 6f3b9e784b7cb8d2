"""The batcher's side of Scrapyd's ``schedule.json``: where a target is, how a batch is cut to fit one
setting, and what counts as an accepted job."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from twisted.internet import defer

from spiderd.config.jobrules import SETTING as RULES_SETTING
from spiderd.core import recrawls
from spiderd.core.reactors import ITCPClock

if TYPE_CHECKING:
    from treq.client import HTTPClient

SETTING_PREFIX = "DISTRIBUTED_START_URLS="


def split(urls: list[str], max_bytes: int) -> list[list[str]]:
    """Consecutive chunks of ``urls`` whose ``DISTRIBUTED_START_URLS=<json>`` fits in ``max_bytes``."""
    chunks: list[list[str]] = []
    current: list[str] = []
    size = len(SETTING_PREFIX) + 2  # the brackets
    for url in urls:
        cost = len(json.dumps(url).encode()) + (2 if current else 0)  # ", " between items
        if current and size + cost > max_bytes:
            chunks.append(current)
            current, size, cost = [], len(SETTING_PREFIX) + 2, cost - 2
        current.append(url)
        size += cost
    if current:
        chunks.append(current)
    return chunks


def split_recrawls(pages: list[recrawls.Recrawl], max_bytes: int) -> list[list[recrawls.Recrawl]]:
    """Consecutive chunks of ``pages`` whose ``DISTRIBUTED_RECRAWL=<json>`` fits in ``max_bytes`` (their
    ``DISTRIBUTED_START_URLS`` is smaller still)."""
    chunks: list[list[recrawls.Recrawl]] = []
    current: list[recrawls.Recrawl] = []
    size = len(recrawls.PREFIX) + 2  # the braces
    for page in pages:
        cost = recrawls.entry_bytes(page) - 2 + (1 if current else 0)  # its "url": {...}, and a comma
        if current and size + cost > max_bytes:
            chunks.append(current)
            current, size, cost = [], len(recrawls.PREFIX) + 2, cost - 1
        current.append(page)
        size += cost
    if current:
        chunks.append(current)
    return chunks


def target_url(target: str) -> tuple[str, tuple[str, str] | None]:
    """``host:port`` or ``http://[user:pass@]host:port`` -> (schedule.json URL, basic auth or None)."""
    if "://" not in target:
        target = "http://" + target
    parts = urlsplit(target)
    auth = (parts.username or "", parts.password or "") if parts.username else None
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else ""
    base = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"
    return base + "/schedule.json", auth


class BatchRefused(Exception):
    """A target answered, but not with Scrapyd's ``"status": "ok"``."""


@defer.inlineCallbacks
def check_answer(response: Any) -> Any:
    body = yield response.content()
    if response.code != 200:
        raise BatchRefused(f"HTTP {response.code}: {body[:200]!r}")
    try:
        answer = json.loads(body)
    except ValueError:
        raise BatchRefused(f"not JSON: {body[:200]!r}") from None
    if not isinstance(answer, dict) or answer.get("status") != "ok":
        message = answer.get("message", answer) if isinstance(answer, dict) else answer
        raise BatchRefused(f"status {answer.get('status') if isinstance(answer, dict) else '?'}: {message}")
    return answer


def make_client(reactor: ITCPClock) -> HTTPClient:
    """A treq client without persistent connections (Scrapyd handles them badly, says seed 003)."""
    from treq.client import HTTPClient
    from twisted.web.client import Agent, HTTPConnectionPool

    return HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))


def schedule_form(project: str, spider: str, batch: int, job_id: str, urls: list[str],
                  feed_uri: str | None = None, rules: str | None = None,
                  recrawled: list[recrawls.Recrawl] | None = None) -> list[tuple[str, str]]:
    """The ``schedule.json`` form of one batch: its URLs in one setting, its job id fixed across resends, its
    site's rules (``rules``: :func:`spiderd.config.jobrules.job_setting`) in another; a batch of recrawls has their
    previous fetches in one more (``DISTRIBUTED_RECRAWL``)."""
    data = [
        ("project", project),
        ("spider", spider),
        ("batch", str(batch)),
        ("jobid", job_id),
        ("setting", SETTING_PREFIX + json.dumps(urls)),
    ]
    if feed_uri:
        data.insert(2, ("setting", f"FEED_URI={feed_uri}"))
    if rules is not None:
        data.append(("setting", f"{RULES_SETTING}={rules}"))
    if recrawled:
        data.append(("setting", recrawls.PREFIX + recrawls.setting_value(recrawled)))
    return data
