"""The demo shop's pages, generated and deterministic: the spec, its plan, and ``render(spec, path)``.

Everything comes from a frozen ``SiteSpec``: the same spec gives byte-identical
pages in any process.  ``render(spec, path)`` is the one source of truth (served by
``spiderd.demo.site``, copied to disk by ``spiderd.demo.static``), and
``spec.expected()`` says which paths a polite crawl must end up with.  A few
detail pages of each fault kind misbehave (``fault_shares`` makes them a share
of the site instead: the benchmark's site with errors).

Layout: ``/`` (links every list page), ``/list/<n>.html``, ``/item/<n>.html``,
``/robots.txt`` (disallows ``/private/``) and ``/private/secret.html``.
"""

from __future__ import annotations

import bisect
import functools
import random
from dataclasses import dataclass, field
from typing import Sequence

Headers = dict[bytes, bytes]
Response = tuple[int, Headers, bytes]

HTML = b"text/html; charset=utf-8"
TEXT = b"text/plain; charset=utf-8"
OFFSITE = ("http://elsewhere.invalid/about.html", "http://elsewhere.invalid/partners/?ref=shop")
UNFETCHABLE = ("mailto:shop@example.invalid", "javascript:void(0)")
PRIVATE = "/private/secret.html"
MIN_DETAIL_SIZE = 1500  # room for a detail page's markup around its padding
_FAULTS = {"not_found": 3, "server_error": 3, "slow": 2, "moved": 1, "found": 1, "chain": 2}
SHARED_FAULTS = ("not_found", "server_error", "slow", "moved", "found")  # kinds ``fault_shares`` may scale
_WORDS = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
    "et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip "
    "ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse cillum fugiat nulla "
    "pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim "
    "id est laborum sturdy oak walnut linen cotton wool ceramic glazed handmade vintage compact durable "
    "bright matte polished woven carved brass copper steel garden kitchen study travel winter summer "
    "gift classic modern rustic light heavy soft warm cool quiet simple elegant practical everyday"
).split()
_TAGS = ("new", "sale", "garden", "kitchen", "gift", "outdoor", "vintage", "bestseller", "eco", "limited")


@dataclass(frozen=True)
class SiteSpec:
    """What the site looks like; all of it is derived from these fields and ``seed``."""

    lists: int = 20
    details: int = 1000
    per_list: int | None = None  # None: details spread evenly over the list pages
    detail_size: tuple[int, int] = (2000, 6000)
    seed: int = 0
    faults: bool = True
    slow_delay: float = 2.0
    crawl_delay: float | None = None
    fault_shares: tuple[tuple[str, float], ...] = ()  # (kind, share of the detail pages); others as _FAULTS

    def __post_init__(self) -> None:
        low, high = self.detail_size
        for kind, share in self.fault_shares:
            if kind not in SHARED_FAULTS or not 0 <= share < 1:
                raise ValueError(f"fault_shares: {kind!r} must be one of {', '.join(SHARED_FAULTS)}, "
                                 f"its share in [0, 1)")
        if self.lists < 1 or self.details < 0:
            raise ValueError("a site needs at least one list page and no negative detail count")
        if self.per_list is not None and (self.per_list < 1 or self.per_list * self.lists < self.details):
            raise ValueError("per_list * lists must cover every detail page")
        if not MIN_DETAIL_SIZE <= low <= high:
            raise ValueError(f"detail_size must be (min, max) with {MIN_DETAIL_SIZE} <= min <= max")
        faulty = sum(self.fault_counts().values())
        if self.faults and self.details < 2 * faulty:
            raise ValueError(f"faults need at least {2 * faulty} detail pages")

    def fault_counts(self) -> dict[str, int]:
        """How many detail pages of each fault kind the site has (with ``faults``): ``_FAULTS``'s counts, or
        ``round(share * details)`` (at least 1 for a share above 0) for the kinds ``fault_shares`` names."""
        shares = dict(self.fault_shares)
        return {kind: _share_count(shares[kind], self.details) if kind in shares else count
                for kind, count in _FAULTS.items()}

    def expected(self, static: bool = False) -> Expected:
        """The paths a crawl of this site (or of its static copy) must find, by outcome."""
        return _plan(self).expected(static)


@dataclass(frozen=True)
class Expected:
    """Site paths by what they answer.  ``slow`` pages are also in ``details_ok``.

    ``redirects`` maps a source path to the path its ``Location`` names (one
    source leads to another redirect: the two-hop chain); every final target
    is in ``details_ok``.  ``offsite`` and ``unfetchable`` are hrefs as written.
    """

    lists: frozenset[str]
    details_ok: frozenset[str]
    not_found: frozenset[str] = frozenset()
    server_error: frozenset[str] = frozenset()
    redirects: dict[str, str] = field(default_factory=dict)
    slow: frozenset[str] = frozenset()
    disallowed: frozenset[str] = frozenset({PRIVATE})
    offsite: frozenset[str] = frozenset()
    unfetchable: frozenset[str] = frozenset()

    @property
    def fetched(self) -> frozenset[str]:
        """Every path a robots-obeying crawl that follows redirects requests (robots.txt aside)."""
        return (
            frozenset({"/"}) | self.lists | self.details_ok | self.not_found
            | self.server_error | frozenset(self.redirects)
        )

    def final(self, path: str) -> str:
        """Where ``path`` ends up after following its redirects."""
        while path in self.redirects:
            path = self.redirects[path]
        return path


@dataclass(frozen=True)
class _Plan:
    """Derived once per spec: which items each list links, and which items misbehave."""

    spec: SiteSpec
    starts: tuple[int, ...]  # list n links items starts[n-1] + 1 .. starts[n]
    kinds: dict[int, str]  # item -> not_found | server_error | slow | moved | found | chain
    targets: dict[int, tuple[int, int]]  # redirecting item -> (status, item its Location names)
    ok: tuple[int, ...]  # items that end in a 200 (slow ones included)
    corpus: tuple[str, ...]  # "<p>...</p>\n" paragraphs the descriptions are cut from

    def list_of(self, item: int) -> int:
        """The list page linking ``item``."""
        return bisect.bisect_left(self.starts, item)

    def expected(self, static: bool) -> Expected:
        """See ``SiteSpec.expected``: a static copy keeps only the 404s (missing files) of the faults."""
        by_kind: dict[str, frozenset[str]] = {
            kind: frozenset(item_path(i) for i, k in self.kinds.items() if k == kind) for kind in _FAULTS
        }
        spec = self.spec
        offsite = frozenset(OFFSITE if spec.faults else ())
        unfetchable = frozenset(UNFETCHABLE if spec.faults else ())
        if static:
            every = frozenset(item_path(i) for i in range(1, spec.details + 1))
            return Expected(_lists(spec), every - by_kind["not_found"], by_kind["not_found"],
                            offsite=offsite, unfetchable=unfetchable)
        redirects = {item_path(a): item_path(b) for a, (_, b) in self.targets.items()}
        ok = frozenset(item_path(i) for i in self.ok)
        return Expected(_lists(spec), ok, by_kind["not_found"], by_kind["server_error"], redirects,
                        by_kind["slow"], offsite=offsite, unfetchable=unfetchable)


def _share_count(share: float, details: int) -> int:
    return max(1, round(share * details)) if share > 0 else 0


def item_path(n: int) -> str:
    """The path of detail page ``n``."""
    return f"/item/{n}.html"


def _lists(spec: SiteSpec) -> frozenset[str]:
    return frozenset(f"/list/{n}.html" for n in range(1, spec.lists + 1))


@functools.lru_cache(maxsize=16)
def _plan(spec: SiteSpec) -> _Plan:
    lists, details = spec.lists, spec.details
    if spec.per_list is None:
        starts = tuple(n * details // lists for n in range(lists + 1))
    else:
        starts = tuple(min(n * spec.per_list, details) for n in range(lists + 1))
    kinds, targets = _faults(spec) if spec.faults else ({}, {})
    ok = tuple(i for i in range(1, details + 1) if kinds.get(i, "slow") == "slow")
    return _Plan(spec, starts, kinds, targets, ok, _corpus(spec.seed))


def _faults(spec: SiteSpec) -> tuple[dict[int, str], dict[int, tuple[int, int]]]:
    rng = random.Random(f"{spec.seed}/faults")
    counts = spec.fault_counts()
    picked = iter(rng.sample(range(1, spec.details + 1), sum(counts.values())))
    kinds = {next(picked): kind for kind, count in counts.items() for _ in range(count)}
    steady = [i for i in range(1, spec.details + 1) if i not in kinds]
    codes = {"moved": 301, "found": 302}
    targets = {i: (codes[kind], rng.choice(steady)) for i, kind in kinds.items() if kind in codes}
    first, second = (item for item, kind in kinds.items() if kind == "chain")
    targets[first], targets[second] = (301, second), (302, rng.choice(steady))
    return kinds, targets


@functools.lru_cache(maxsize=16)
def _corpus(seed: int) -> tuple[str, ...]:
    rng = random.Random(f"{seed}/corpus")
    paragraphs = []
    for _ in range(600):
        words = rng.choices(_WORDS, k=rng.randint(20, 90))
        words[0] = words[0].capitalize()
        paragraphs.append("<p>" + " ".join(words) + ".</p>\n")
    return tuple(paragraphs)


def render(spec: SiteSpec, path: str, static: bool = False) -> Response:
    """The response to a GET of ``path`` (a query string is ignored); ``static``: as a static copy serves it."""
    status, headers, body = _render(spec, path.split("?", 1)[0].split("#", 1)[0], static and spec.faults)
    return status, dict(headers), body


@functools.lru_cache(maxsize=1024)
def _render(spec: SiteSpec, path: str, static: bool) -> Response:
    plan = _plan(spec)
    if path in ("/", "/index.html"):
        return _ok(_index(spec))
    if path == "/robots.txt":
        return 200, {b"content-type": TEXT}, _robots(spec).encode()
    if path == PRIVATE:
        return _ok(_page("Staff only", "<h1>Staff only</h1>\n<p>Crawlers that obey robots.txt never see this.</p>\n"))
    number = _number(path, "/list/")
    if number is not None and 1 <= number <= spec.lists:
        return _ok(_list_page(plan, number))
    number = _number(path, "/item/")
    if number is not None and 1 <= number <= spec.details:
        return _item_response(plan, number, static)
    return _error(404, "Not Found")


def _number(path: str, prefix: str) -> int | None:
    stem = path[len(prefix):-len(".html")]
    if path.startswith(prefix) and path.endswith(".html") and stem.isascii() and stem.isdigit() and stem[0] != "0":
        return int(stem)
    return None


def _item_response(plan: _Plan, item: int, static: bool) -> Response:
    kind = plan.kinds.get(item)
    if kind == "not_found":
        return _error(404, "Not Found")
    if static or kind is None or kind == "slow":
        return _ok(_detail(plan, item))
    if kind == "server_error":
        return _error(500, "Internal Server Error")
    code, target = plan.targets[item]
    status, headers, body = _error(code, "Moved")
    headers[b"location"] = item_path(target).encode()
    return status, headers, body


def _ok(html: str) -> Response:
    return 200, {b"content-type": HTML}, html.encode()


def _error(status: int, reason: str) -> Response:
    return status, {b"content-type": HTML}, _page(reason, f"<h1>{status} {reason}</h1>\n").encode()


def _page(title: str, body: str, head: str = "") -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title} - Demo shop</title>\n{head}</head>\n<body>\n{body}</body>\n</html>\n"
    )


def _robots(spec: SiteSpec) -> str:
    delay = "" if spec.crawl_delay is None else f"Crawl-delay: {spec.crawl_delay:g}\n"
    return f"User-agent: *\nDisallow: /private/\n{delay}"


def _index(spec: SiteSpec) -> str:
    links = "".join(
        f'<li><a href="{"/" if n % 2 else ""}list/{n}.html">Catalogue page {n}</a></li>\n'
        for n in range(1, spec.lists + 1)
    )
    body = f'<header><nav><a href="/">Home</a></nav></header>\n<h1>Demo shop</h1>\n<ul class="lists">\n{links}</ul>\n'
    return _page("Demo shop", body + _footer(spec, with_private=False))


def _list_page(plan: _Plan, n: int) -> str:
    """Item links mix absolute and relative paths; page 2 (or the only page) resolves them from ``<base href>``."""
    spec, rng = plan.spec, random.Random(f"{plan.spec.seed}/list/{n}")
    based = n == min(2, spec.lists)
    here = "" if based else "../item/"
    items = "".join(
        f'<li><a href="{here if rng.random() < 0.5 else "/item/"}{i}.html">Item {i}</a></li>\n'
        for i in range(plan.starts[n - 1] + 1, plan.starts[n] + 1)
    )
    lists = "../list/" if based else ""
    pager = (f'<a rel="prev" href="/list/{n - 1}.html">Previous</a>\n' if n > 1 else "") + (
        f'<a rel="next" href="{lists}{n + 1}.html">Next</a>\n' if n < spec.lists else ""
    )
    body = (
        f'<header><nav><a href="/">Home</a>\n{pager}</nav></header>\n<main>\n<h1>Catalogue page {n}</h1>\n'
        f'<ul class="items">\n{items}</ul>\n<p class="pager">\n{pager}</p>\n</main>\n'
    )
    head = '<base href="/item/">\n' if based else ""
    return _page(f"Catalogue page {n}", body + _footer(spec, with_private=n == 1), head)


def _footer(spec: SiteSpec, with_private: bool) -> str:
    hrefs = [("/robots.txt", "Robots")]
    if spec.faults:
        hrefs += list(zip(OFFSITE, ("About us", "Partners"))) + list(zip(UNFETCHABLE, ("Contact", "Top")))
    if with_private:
        hrefs.append((PRIVATE, "Staff only"))
    links = "\n".join(f'<a href="{href}">{text}</a>' for href, text in hrefs)
    return f'<footer>\n{links}\n<p>Demo shop, generated from seed {spec.seed}.</p>\n</footer>\n'


def _detail(plan: _Plan, item: int) -> str:
    spec, rng = plan.spec, random.Random(f"{plan.spec.seed}/item/{item}")
    size = rng.randint(*spec.detail_size)
    tags = "".join(f'<a rel="tag" href="#tag-{t}">{t}</a>\n' for t in rng.sample(_TAGS, rng.randint(2, 4)))
    related = "".join(
        f'<li><a href="{"" if r % 2 else "/item/"}{r}.html">Item {r}</a></li>\n'
        for r in rng.sample(plan.ok, min(len(plan.ok), rng.randint(2, 5)))
    )
    back = f"../list/{plan.list_of(item)}.html"
    price = rng.randint(100, 99999) / 100
    top = (
        f'<header><nav><a href="/">Home</a>\n<a href="{back}">Back to list</a></nav></header>\n<main>\n'
        f'<h1 class="title">Item {item}</h1>\n<span class="price">{price:.2f}</span>\n'
        f'<div class="tags">\n{tags}</div>\n<div class="desc">\n'
    )
    bottom = f'</div>\n<h2>Related</h2>\n<ul class="related">\n{related}</ul>\n</main>\n{_footer(spec, False)}'
    frame = _page(f"Item {item}", top + "\0" + bottom)
    return frame.replace("\0", _padding(plan.corpus, rng, size - len(frame) + 1), 1)


def _padding(corpus: Sequence[str], rng: random.Random, needed: int) -> str:
    """Exactly ``needed`` bytes of paragraphs (ASCII, so characters are bytes)."""
    out, total, at = [], 0, rng.randrange(len(corpus))
    while total + len(corpus[at]) <= needed:
        out.append(corpus[at])
        total += len(corpus[at])
        at = (at + 1) % len(corpus)
    room = needed - total - len("<p></p>\n")
    if room >= 0:
        text = corpus[at][3:3 + room].rsplit(" ", 1)[0] if room else ""
        out.append("<p>" + text.ljust(room) + "</p>\n")
    else:
        out.append("\n" * (needed - total))
    return "".join(out)

