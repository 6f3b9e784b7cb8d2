"""A generated, deterministic shop site: the demo's target, the tests' peer, the benchmark's load.

Everything comes from a frozen ``SiteSpec``: the same spec gives byte-identical
pages in any process.  ``render(spec, path)`` is the one source of truth;
``DemoSite`` serves it over HTTP (slow pages wait on an injected clock),
``write_static`` copies it to disk for nginx, and ``spec.expected()`` says
which paths a polite crawl must end up with.

Layout: ``/`` (links every list page), ``/list/<n>.html``, ``/item/<n>.html``,
``/robots.txt`` (disallows ``/private/``) and ``/private/secret.html``.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator, Sequence, cast

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.resource import EncodingResourceWrapper, Resource
from twisted.web.server import NOT_DONE_YET, GzipEncoderFactory, Request, Site

from spiderd.core.reactors import ITCPClock

log = Logger()

Headers = dict[bytes, bytes]
Response = tuple[int, Headers, bytes]

HTML = b"text/html; charset=utf-8"
TEXT = b"text/plain; charset=utf-8"
OFFSITE = ("http://elsewhere.invalid/about.html", "http://elsewhere.invalid/partners/?ref=shop")
UNFETCHABLE = ("mailto:shop@example.invalid", "javascript:void(0)")
PRIVATE = "/private/secret.html"
MIN_DETAIL_SIZE = 1500  # room for a detail page's markup around its padding
_FAULTS = {"not_found": 3, "server_error": 3, "slow": 2, "moved": 1, "found": 1, "chain": 2}
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

    def __post_init__(self) -> None:
        low, high = self.detail_size
        if self.lists < 1 or self.details < 0:
            raise ValueError("a site needs at least one list page and no negative detail count")
        if self.per_list is not None and (self.per_list < 1 or self.per_list * self.lists < self.details):
            raise ValueError("per_list * lists must cover every detail page")
        if not MIN_DETAIL_SIZE <= low <= high:
            raise ValueError(f"detail_size must be (min, max) with {MIN_DETAIL_SIZE} <= min <= max")
        if self.faults and self.details < 2 * sum(_FAULTS.values()):
            raise ValueError(f"faults need at least {2 * sum(_FAULTS.values())} detail pages")

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
            kind: frozenset(_item(i) for i, k in self.kinds.items() if k == kind) for kind in _FAULTS
        }
        spec = self.spec
        offsite = frozenset(OFFSITE if spec.faults else ())
        unfetchable = frozenset(UNFETCHABLE if spec.faults else ())
        if static:
            every = frozenset(_item(i) for i in range(1, spec.details + 1))
            return Expected(_lists(spec), every - by_kind["not_found"], by_kind["not_found"],
                            offsite=offsite, unfetchable=unfetchable)
        redirects = {_item(a): _item(b) for a, (_, b) in self.targets.items()}
        ok = frozenset(_item(i) for i in self.ok)
        return Expected(_lists(spec), ok, by_kind["not_found"], by_kind["server_error"], redirects,
                        by_kind["slow"], offsite=offsite, unfetchable=unfetchable)


def _item(n: int) -> str:
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
    picked = iter(rng.sample(range(1, spec.details + 1), sum(_FAULTS.values())))
    kinds = {next(picked): kind for kind, count in _FAULTS.items() for _ in range(count)}
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
    headers[b"location"] = _item(target).encode()
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


class _Pages(Resource):
    """Serves ``render(spec, path)``; slow pages answer ``spec.slow_delay`` later on ``clock``."""

    isLeaf = True

    def __init__(self, spec: SiteSpec, clock: IReactorTime) -> None:
        super().__init__()
        self.spec = spec
        self.clock = clock
        self._slow = spec.expected().slow

    def render_GET(self, request: Request) -> bytes | int:
        path = request.path.decode("latin-1")
        status, headers, body = render(self.spec, path)
        request.setResponseCode(status)
        for name, value in headers.items():
            request.setHeader(name, value)
        if path in self._slow:
            return self._later(request, body)
        return body

    def _later(self, request: Request, body: bytes) -> int:
        call = self.clock.callLater(self.spec.slow_delay, _finish, request, body)
        request.notifyFinish().addErrback(_gone, call)
        return NOT_DONE_YET


def _finish(request: Request, body: bytes) -> None:
    request.write(body)
    request.finish()


def _gone(reason: Failure, call: IDelayedCall) -> None:
    """The client left before its slow page was due: drop the timer."""
    if call.active():
        call.cancel()


class DemoSite(EncodingResourceWrapper):
    """The whole site as one resource: ``render()``'s pages, gzip-encoded when the client accepts it.

    ``clock`` is the timer source of the slow pages (the reactor, or a ``task.Clock`` in tests).
    """

    def __init__(self, spec: SiteSpec, clock: IReactorTime) -> None:
        super().__init__(_Pages(spec, clock), [GzipEncoderFactory()])
        self.spec = spec
        self.clock = clock


class _QuietSite(Site):
    """A Site without twisted.web's access log (10,000 lines per benchmark run); ``requests``, if given,
    gets ``TIME METHOD PATH USER-AGENT`` per request as it arrives (the cluster test counts fetches per page
    and node)."""

    noisy = False

    def __init__(self, resource: Resource, requests: IO[str] | None = None) -> None:
        super().__init__(resource)
        self.requests = requests

    def getResourceFor(self, request: Request) -> Any:
        if self.requests is not None:
            agent = (request.getHeader(b"user-agent") or b"-").decode("latin-1")
            method, path = request.method.decode("latin-1"), request.path.decode("latin-1")
            self.requests.write(f"{self.reactor.seconds():.3f} {method} {path} {agent}\n")
            self.requests.flush()
        return super().getResourceFor(request)

    def log(self, request: http.Request) -> None:
        pass

    def logPrefix(self) -> str:
        return "DemoSite"


def make_site(spec: SiteSpec, clock: IReactorTime, requests: IO[str] | None = None) -> Site:
    """An HTTP factory serving the spec, gzip-encoded for clients that accept it; ``requests``: see _QuietSite."""
    return _QuietSite(DemoSite(spec, clock), requests)


def listen(spec: SiteSpec, reactor: ITCPClock, port: int = 0, interface: str = "127.0.0.1",
           clock: IReactorTime | None = None, requests: IO[str] | None = None) -> IListeningPort:
    """Serve the spec over TCP with ``reactor`` (its timers too, unless ``clock`` is given)."""
    listening = reactor.listenTCP(
        port,
        make_site(spec, clock or reactor, requests),  # type: ignore[arg-type]  # Twisted's hint takes no Site
        interface=interface,
    )
    log.info("demo site serving {pages} pages on http://{interface}:{port}/",
             pages=spec.lists + spec.details, interface=interface, port=port_of(listening))
    return listening


def port_of(listening: IListeningPort) -> int:
    """The TCP port ``listening`` is bound to (useful after asking for port 0)."""
    address = listening.getHost()
    assert isinstance(address, (IPv4Address, IPv6Address))
    return address.port


def static_paths(spec: SiteSpec) -> Iterator[str]:
    """The site paths a static copy holds, one file each (``/`` is ``/index.html``)."""
    yield from ("/index.html", "/robots.txt", PRIVATE)
    expected = spec.expected(static=True)
    yield from (f"/list/{n}.html" for n in range(1, spec.lists + 1))
    yield from (_item(i) for i in range(1, spec.details + 1) if _item(i) in expected.details_ok)


def write_static(spec: SiteSpec, directory: str | Path) -> list[str]:
    """Write the static copy of the site under ``directory``; return the site paths written.

    500s, slow pages and redirects need a dynamic server, so there they become
    ordinary detail pages; 404s are files that are not written.
    """
    root = Path(directory)
    written = []
    for part in ("list", "item", "private"):
        (root / part).mkdir(parents=True, exist_ok=True)
    for path in static_paths(spec):
        (root / path.lstrip("/")).write_bytes(render(spec, path, static=True)[2])
        written.append(path)
    log.info("wrote {count} files of the demo site to {root}", count=len(written), root=str(root))
    return written


_NGINX_TEMPS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
_NGINX = """\
worker_processes {workers};
pid "{run}/nginx.pid";
error_log "{run}/error.log" warn;
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
    log_not_found off;
    server_tokens off;
    sendfile on;
    keepalive_requests 100000;
    types {{
        text/html html;
        text/plain txt;
    }}
    default_type application/octet-stream;
    charset utf-8;
    gzip {gzip};
    gzip_types text/plain;
{temps}    server {{
        listen 127.0.0.1:{port};
        root "{root}";
        index index.html;
    }}
}}
"""


def nginx_conf(directory: str | Path, port: int, run_dir: str | Path | None = None, workers: int = 2,
               user: str | None = None, gzip: bool = True) -> str:
    """An nginx.conf serving a ``write_static`` copy on 127.0.0.1:``port``.

    Pid file, error log and temp directories go under ``run_dir`` (default: a
    sibling ``<directory>.nginx``, which must exist).  As root, workers run as
    ``user`` (default root, so they can read a private temp dir).  ``gzip``
    compresses HTML for clients that accept it.  Start with
    ``nginx -c CONF -g 'daemon off;'``.
    """
    root = Path(directory).resolve()
    run = Path(run_dir).resolve() if run_dir is not None else root.with_name(root.name + ".nginx")
    if user is None and _is_root():
        user = "root"
    temps = "".join(f'    {kind}_temp_path "{run}/{kind}";\n' for kind in _NGINX_TEMPS)
    lines = f"user {user};\n" if user else ""
    return lines + _NGINX.format(workers=workers, run=run, temps=temps, port=port, root=root,
                                 gzip="on" if gzip else "off")


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _size(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m spiderd.demo.site", description="Serve the demo site.")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port (default 8080)")
    parser.add_argument("--interface", default="127.0.0.1")
    parser.add_argument("--lists", type=int, default=SiteSpec.lists)
    parser.add_argument("--details", type=int, default=SiteSpec.details)
    parser.add_argument("--per-list", type=int, default=None)
    parser.add_argument("--size", type=_size, default=SiteSpec.detail_size, help="MIN-MAX detail page bytes")
    parser.add_argument("--seed", type=int, default=SiteSpec.seed)
    parser.add_argument("--no-faults", dest="faults", action="store_false")
    parser.add_argument("--slow-delay", type=float, default=SiteSpec.slow_delay)
    parser.add_argument("--crawl-delay", type=float, default=None)
    parser.add_argument("--write-static", metavar="DIR", help="write the static copy to DIR and exit")
    parser.add_argument("--requests-log", metavar="FILE", help="append 'TIME METHOD PATH USER-AGENT' per request to FILE")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the site until SIGTERM/SIGINT, announcing ``LISTENING <port>`` on stdout."""
    from twisted.logger import globalLogBeginner, textFileLogObserver

    args = _arguments(argv)
    try:
        spec = SiteSpec(args.lists, args.details, args.per_list, args.size, args.seed, args.faults,
                        args.slow_delay, args.crawl_delay)
    except ValueError as e:
        raise SystemExit(f"python -m spiderd.demo.site: {e}") from None
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    if args.write_static:
        write_static(spec, args.write_static)
        return
    from twisted.internet import reactor

    requests = open(args.requests_log, "a") if args.requests_log else None
    port = listen(spec, cast(ITCPClock, reactor), args.port, args.interface, requests=requests)  # it provides both
    sys.stdout.write(f"LISTENING {port_of(port)}\n")
    sys.stdout.flush()
    reactor.run()


if __name__ == "__main__":
    main()
