"""Tests for spiderd.demo (pages, site, static): determinism, layout, faults, robots, gzip, static copies and the CLI."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urljoin

import lxml.html
import pytest
import treq
from protego import Protego
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.trial import unittest
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from spiderd.demo import pages
from spiderd.demo.pages import PRIVATE, SiteSpec, render
from spiderd.demo.site import listen, make_site, port_of
from spiderd.demo.static import nginx_conf, static_paths, write_static

SMALL = SiteSpec(lists=4, details=60, seed=7)
ROOT = Path(__file__).resolve().parent.parent


def all_paths(spec: SiteSpec) -> list[str]:
    """Every path the site answers 200, 3xx, 404 or 500 for, plus one unknown path."""
    items = [f"/item/{i}.html" for i in range(1, spec.details + 1)]
    return ["/", "/robots.txt", PRIVATE, "/nope.html", *sorted(spec.expected().lists), *items]


def links(spec: SiteSpec, path: str) -> list[str]:
    """The hrefs of ``path`` resolved as a browser would (``<base href>`` included), fragments dropped."""
    doc = lxml.html.document_fromstring(render(spec, path)[2])
    base = urljoin(path, (doc.xpath("//base/@href") or [path])[0])
    return [urljoin(base, href).split("#")[0] for href in doc.xpath("//a/@href")]


def clear_caches() -> None:
    """Forget every cached plan, corpus and page, so the next render starts from scratch."""
    for cached in (pages._render, pages._plan, pages._corpus):
        cached.cache_clear()


def test_same_spec_same_bytes() -> None:
    """Rendering a spec twice, caches cleared in between, gives byte-identical responses."""
    first = [render(SMALL, p) for p in all_paths(SMALL)]
    clear_caches()
    assert [render(SiteSpec(lists=4, details=60, seed=7), p) for p in all_paths(SMALL)] == first


def test_same_bytes_in_another_process() -> None:
    """A process with another hash seed renders the very same site."""
    code = (
        "import hashlib; from spiderd.demo.pages import SiteSpec, render;"
        "s = SiteSpec(lists=4, details=60, seed=7); h = hashlib.sha256();"
        "[h.update(render(s, p)[2]) for p in ['/', '/list/2.html'] + [f'/item/{i}.html' for i in range(1, 61)]];"
        "print(h.hexdigest(), sorted(s.expected().redirects.items()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    h = hashlib.sha256()
    for p in ["/", "/list/2.html"] + [f"/item/{i}.html" for i in range(1, 61)]:
        h.update(render(SMALL, p)[2])
    assert out.stdout.strip() == f"{h.hexdigest()} {sorted(SMALL.expected().redirects.items())}"


def test_other_seed_other_site() -> None:
    """A different seed changes the detail pages and which items misbehave."""
    other = SiteSpec(lists=4, details=60, seed=8)
    ok = sorted(SMALL.expected().details_ok & other.expected().details_ok)
    assert render(SMALL, ok[0])[2] != render(other, ok[0])[2]
    assert SMALL.expected().not_found != other.expected().not_found or SMALL.expected().slow != other.expected().slow


@pytest.mark.parametrize("size", [(2000, 6000), (1500, 1500), (20000, 60000)])
def test_detail_sizes_within_range(size: tuple[int, int]) -> None:
    """Every detail page that answers 200 has a size within ``detail_size``, and sizes vary."""
    spec = SiteSpec(lists=3, details=80, detail_size=size, seed=3)
    sizes = [len(render(spec, p)[2]) for p in spec.expected().details_ok]
    assert size[0] <= min(sizes) and max(sizes) <= size[1]
    assert len(set(sizes)) > 1 or size[0] == size[1]


def test_detail_page_markup() -> None:
    """A detail page has the title, price, description, tags and related links an extractor looks for."""
    path = sorted(SMALL.expected().details_ok)[0]
    doc = lxml.html.document_fromstring(render(SMALL, path)[2])
    number = path.split("/")[-1].split(".")[0]
    assert doc.xpath("string(//h1[@class='title'])") == f"Item {number}"
    assert f"Item {number}" in doc.xpath("string(//title)")
    assert float(doc.xpath("string(//span[@class='price'])")) > 0
    assert len(doc.xpath("//div[@class='desc']//text()")) > 0
    assert 2 <= len(doc.xpath("//a[@rel='tag']")) <= 4
    related = [u for u in links(SMALL, path) if u.startswith("/item/")]
    assert related and set(related) <= SMALL.expected().details_ok


@pytest.mark.parametrize(
    "spec",
    [SMALL, SiteSpec(lists=7, details=100, seed=1), SiteSpec(lists=5, details=42, per_list=10, faults=False),
     SiteSpec(lists=1, details=30, faults=False)],
)
def test_every_detail_linked_from_exactly_one_list(spec: SiteSpec) -> None:
    """Resolving each list page's links (``<base href>`` too) reaches every detail page exactly once."""
    counts = Counter(u for p in spec.expected().lists for u in links(spec, p) if u.startswith("/item/"))
    assert counts == Counter(f"/item/{i}.html" for i in range(1, spec.details + 1))
    if spec.per_list:
        assert max(Counter(p for p in spec.expected().lists for u in links(spec, p) if "/item/" in u).values()) <= 10


def test_index_and_pager_reach_every_list() -> None:
    """The index links every list page, and next/prev links chain them in order."""
    lists = SMALL.expected().lists
    assert set(links(SMALL, "/")) & lists == lists
    for n in range(1, SMALL.lists):
        assert f"/list/{n + 1}.html" in links(SMALL, f"/list/{n}.html")
        assert f"/list/{n}.html" in links(SMALL, f"/list/{n + 1}.html")


def test_list_pages_mix_link_forms() -> None:
    """List pages use absolute and relative item links, and exactly one page has ``<base href>``."""
    pages = [render(SMALL, p)[2] for p in sorted(SMALL.expected().lists)]
    assert sum(b"<base href=" in page for page in pages) == 1
    raw = b"".join(pages)
    assert b'href="/item/' in raw and b'href="../item/' in raw


def test_fault_statuses() -> None:
    """404, 500 and slow pages answer as ``expected()`` says, and unknown paths are 404."""
    expected = SMALL.expected()
    assert all(render(SMALL, p)[0] == 404 for p in expected.not_found | {"/nope.html", "/item/0.html", "/item/61.html"})
    assert all(render(SMALL, p)[0] == 500 for p in expected.server_error)
    assert all(render(SMALL, p)[0] == 200 for p in expected.details_ok)
    assert expected.slow and expected.slow <= expected.details_ok
    sizes = [len(expected.not_found), len(expected.server_error), len(expected.slow), len(expected.redirects)]
    assert sizes == [3, 3, 2, 4]


def test_redirects() -> None:
    """Redirects answer 301 or 302 with a Location; one chain has two hops; all end on a 200 page."""
    expected = SMALL.expected()
    codes = set()
    for source, target in expected.redirects.items():
        status, headers, _ = render(SMALL, source)
        codes.add(status)
        assert status in (301, 302) and headers[b"location"] == target.encode()
        assert expected.final(source) in expected.details_ok
    assert codes == {301, 302}
    chains = [s for s, t in expected.redirects.items() if t in expected.redirects]
    assert len(chains) == 1


def test_expected_partitions_the_items() -> None:
    """Each item is in exactly one of ok, 404, 500 or redirecting, and ``fetched`` covers the crawl."""
    e = SMALL.expected()
    groups = [e.details_ok, e.not_found, e.server_error, frozenset(e.redirects)]
    assert sum(len(g) for g in groups) == SMALL.details
    assert frozenset().union(*groups) == {f"/item/{i}.html" for i in range(1, 61)}
    assert e.fetched == {"/"} | e.lists | frozenset().union(*groups)
    assert PRIVATE in e.disallowed and PRIVATE not in e.fetched


def test_offsite_and_unfetchable_links() -> None:
    """With faults, list pages link off-site, ``mailto:`` and ``javascript:`` URLs; without, they do not."""
    hrefs = set(links(SMALL, "/list/1.html"))
    expected = SMALL.expected()
    assert expected.offsite <= hrefs and expected.unfetchable <= hrefs
    assert all(u.startswith("http://elsewhere.invalid/") for u in expected.offsite)
    assert {u.split(":")[0] for u in expected.unfetchable} == {"mailto", "javascript"}
    clean = SiteSpec(lists=4, details=60, faults=False)
    assert not clean.expected().offsite and not clean.expected().unfetchable
    assert not [u for p in clean.expected().lists for u in links(clean, p) if ":" in u]


def test_no_faults_every_item_ok() -> None:
    """Without faults every item answers 200 and ``expected()`` lists no fault."""
    spec = SiteSpec(lists=2, details=10, faults=False)
    e = spec.expected()
    assert len(e.details_ok) == 10 and not (e.not_found or e.server_error or e.redirects or e.slow)
    assert all(render(spec, p)[0] == 200 for p in e.details_ok)


def test_robots() -> None:
    """robots.txt disallows only /private/, which one list page links and which answers 200."""
    status, headers, body = render(SMALL, "/robots.txt")
    assert status == 200 and headers[b"content-type"].startswith(b"text/plain")
    robots = Protego.parse(body.decode())
    assert not robots.can_fetch("http://h/private/secret.html", "spiderd")
    assert all(robots.can_fetch(f"http://h{p}", "spiderd") for p in SMALL.expected().fetched)
    assert robots.crawl_delay("spiderd") is None
    assert sum(PRIVATE in links(SMALL, p) for p in SMALL.expected().lists) == 1
    assert render(SMALL, PRIVATE)[0] == 200
    delayed = Protego.parse(render(SiteSpec(lists=2, details=30, crawl_delay=1.5), "/robots.txt")[2].decode())
    assert delayed.crawl_delay("spiderd") == 1.5


def test_query_and_index_aliases() -> None:
    """A query string is ignored, and /index.html is the index."""
    assert render(SMALL, "/list/1.html?page=2") == render(SMALL, "/list/1.html")
    assert render(SMALL, "/index.html") == render(SMALL, "/")


@pytest.mark.parametrize(
    "kwargs",
    [{"lists": 0}, {"details": -1}, {"per_list": 2}, {"detail_size": (100, 200)}, {"detail_size": (3000, 2000)},
     {"details": 10}],
)
def test_bad_specs_rejected(kwargs: dict[str, Any]) -> None:
    """Specs that cannot be built (or cannot hold their faults) raise ValueError."""
    with pytest.raises(ValueError):
        SiteSpec(**{"lists": 4, "details": 60, **kwargs})


def test_write_static(tmp_path: Path) -> None:
    """The static copy has one file per served page, equal to render(static=True), and no 404 item."""
    written = write_static(SMALL, tmp_path)
    files = {"/" + str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    expected = SMALL.expected(static=True)
    assert sorted(files) == sorted(written) == sorted(static_paths(SMALL))
    assert len(files) == 3 + SMALL.lists + SMALL.details - len(expected.not_found)
    for path in files:
        assert (tmp_path / path.lstrip("/")).read_bytes() == render(SMALL, path, static=True)[2]
    assert expected.details_ok | expected.lists | {"/index.html", "/robots.txt", PRIVATE} == files
    assert not (files & expected.not_found)


def test_static_expected_drops_dynamic_faults() -> None:
    """A static copy keeps the 404s; 500s, redirects and slow pages become ordinary detail pages."""
    dynamic, static = SMALL.expected(), SMALL.expected(static=True)
    assert static.not_found == dynamic.not_found
    assert not (static.server_error or static.redirects or static.slow)
    assert static.details_ok == dynamic.details_ok | dynamic.server_error | frozenset(dynamic.redirects)
    assert all(render(SMALL, p, static=True)[0] == 200 for p in static.details_ok)
    assert render(SMALL, "/list/1.html", static=True) == render(SMALL, "/list/1.html")


def test_nginx_conf(tmp_path: Path) -> None:
    """The nginx config listens on loopback, serves the directory and keeps its files under the run dir."""
    conf = nginx_conf(tmp_path / "site", 8123, run_dir=tmp_path / "run", workers=1)
    assert "listen 127.0.0.1:8123;" in conf and f'root "{tmp_path / "site"}";' in conf
    assert "access_log off;" in conf and "worker_processes 1;" in conf and "daemon" not in conf
    assert f'pid "{tmp_path / "run"}/nginx.pid";' in conf and f'error_log "{tmp_path / "run"}/error.log"' in conf
    assert ("user root;" in conf) == (os.geteuid() == 0)
    default = nginx_conf(tmp_path / "site", 8123, user="nobody")
    assert f'"{tmp_path / "site.nginx"}/nginx.pid"' in default and "user nobody;" in default


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (optional)")
def test_nginx_accepts_conf(tmp_path: Path) -> None:
    """Where nginx is installed, ``nginx -t`` accepts the generated config."""
    (tmp_path / "run").mkdir()
    write_static(SiteSpec(lists=2, details=30), tmp_path / "site")
    conf = tmp_path / "run" / "nginx.conf"
    conf.write_text(nginx_conf(tmp_path / "site", 8123, run_dir=tmp_path / "run"))
    result = subprocess.run(["nginx", "-t", "-c", str(conf)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


FAULTY = SiteSpec(lists=4, details=1000, seed=7, slow_delay=0.5, fault_shares=(
    ("not_found", 0.02), ("server_error", 0.008), ("moved", 0.003), ("found", 0.002), ("slow", 0.001)))


def test_fault_shares_scale_the_faults() -> None:
    """``fault_shares`` makes each named kind that share of the detail pages; the chain stays one of two hops."""
    e = FAULTY.expected()
    assert FAULTY.fault_counts() == {"not_found": 20, "server_error": 8, "slow": 1, "moved": 3, "found": 2, "chain": 2}
    assert (len(e.not_found), len(e.server_error), len(e.slow), len(e.redirects)) == (20, 8, 1, 7)
    assert len(e.details_ok) == 1000 - 20 - 8 - 7
    codes = Counter(render(FAULTY, p)[0] for p in e.redirects)
    assert codes == {301: 4, 302: 3} and all(e.final(p) in e.details_ok for p in e.redirects)
    assert SiteSpec(lists=4, details=60, seed=7, fault_shares=(("slow", 0.0),)).fault_counts()["slow"] == 0


@pytest.mark.parametrize("shares", [(("chain", 0.1),), (("teapot", 0.1),), (("not_found", 1.0),),
                                    (("not_found", -0.1),), (("not_found", 0.3), ("server_error", 0.3))])
def test_bad_fault_shares_rejected(shares: tuple[tuple[str, float], ...]) -> None:
    """Unknown kinds, the chain, shares outside [0, 1) and faults on more than half the site raise ValueError."""
    with pytest.raises(ValueError):
        SiteSpec(lists=4, details=100, fault_shares=shares)


def test_nginx_conf_answers_the_faults(tmp_path: Path) -> None:
    """With ``faults``, the config answers each 500 and redirect as render() does and slows each slow page."""
    conf = nginx_conf(tmp_path / "site", 8123, run_dir=tmp_path / "run", faults=FAULTY)
    e = FAULTY.expected()
    for path in e.server_error:
        assert f"location = {path} {{ return 500; }}" in conf
    for path, target in e.redirects.items():
        assert f"location = {path} {{ return {render(FAULTY, path)[0]} {target}; }}" in conf
    for path in e.slow:
        assert f"location = {path} {{ limit_rate {int(len(render(FAULTY, path)[2]) / 0.5)}; }}" in conf
    assert "absolute_redirect off;" in conf and "location" not in nginx_conf(tmp_path / "site", 8123)


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (optional)")
def test_nginx_serves_the_faults(tmp_path: Path) -> None:
    """nginx with the faults' config answers every detail page as ``expected()`` says (Location included)."""
    (tmp_path / "run").mkdir()
    write_static(FAULTY, tmp_path / "site")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp_path / "run" / "nginx.conf"
    conf.write_text(nginx_conf(tmp_path / "site", port, run_dir=tmp_path / "run", workers=1, faults=FAULTY))
    server = subprocess.Popen(["nginx", "-c", str(conf), "-g", "daemon off;"])
    try:
        connection = _connect(port)
        e = FAULTY.expected()
        for path in sorted(e.not_found | e.server_error | frozenset(e.redirects) | e.details_ok - e.slow):
            connection.request("GET", path)
            answer = connection.getresponse()
            answer.read()
            assert answer.status == render(FAULTY, path)[0], path
            assert answer.getheader("location") == e.redirects.get(path), path
        connection.close()
    finally:
        server.send_signal(signal.SIGQUIT)
        server.wait(timeout=30)


def _connect(port: int) -> http.client.HTTPConnection:
    """A connection to the server that is starting on ``port`` (it binds within a few seconds)."""
    for _ in range(200):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.connect()
            return connection
        except ConnectionRefusedError:
            time.sleep(0.05)  # waiting for another process to bind, not for a timer
    raise AssertionError(f"nothing listens on port {port}")


@pytest.fixture
def cli() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The CLI serving a small site on a free port, terminated afterwards."""
    args = ["--port", "0", "--lists", "3", "--details", "40", "--size", "3000-4000", "--seed", "5"]
    proc = subprocess.Popen([sys.executable, "-m", "spiderd.demo.site", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith("LISTENING "), (line, proc.poll())
        yield proc, int(line.split()[1])
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_cli_serves_the_site(cli: tuple[subprocess.Popen[bytes], int]) -> None:
    """``python -m spiderd.demo.site --port 0`` announces its port and serves render()'s pages."""
    proc, port = cli
    spec = SiteSpec(lists=3, details=40, detail_size=(3000, 4000), seed=5)
    page = sorted(spec.expected().details_ok - spec.expected().slow)[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=30) as response:
        assert response.read() == render(spec, page)[2]
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(f"http://127.0.0.1:{port}{sorted(spec.expected().server_error)[0]}", timeout=30)
    assert error.value.code == 500
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def test_cli_write_static(tmp_path: Path) -> None:
    """``--write-static DIR`` writes the static copy and exits."""
    args = ["--lists", "2", "--details", "30", "--no-faults", "--write-static", str(tmp_path)]
    subprocess.run([sys.executable, "-m", "spiderd.demo.site", *args], cwd=ROOT, check=True, capture_output=True)
    assert len(list(tmp_path.rglob("*.html"))) == 1 + 2 + 30 + 1


class TrackingProtocol(ProtocolWrapper):
    """Tells its factory once the wrapped protocol has seen the connection go."""

    def connectionLost(self, reason: Any = None) -> None:
        factory = self.factory
        super().connectionLost(reason)
        factory.closed()


class TrackingFactory(WrappingFactory):
    """Wraps the site so a test can wait until every server-side connection has closed."""

    protocol = TrackingProtocol

    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self._waiting: list[Deferred[None]] = []

    def closed(self) -> None:
        """A connection is gone (and its protocol knows): wake the waiters once none is left."""
        while not self.protocols and self._waiting:
            self._waiting.pop().callback(None)

    def drained(self) -> Deferred[None]:
        """Fires once no connection is open."""
        if not self.protocols:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._waiting.append(d)
        return d


class SchedulingClock(Clock):
    """A Clock that says when something is scheduled on it (a slow request has arrived)."""

    def __init__(self) -> None:
        super().__init__()
        self.scheduled: Deferred[None] = Deferred()

    def callLater(self, *args: Any, **kwargs: Any) -> Any:
        call = super().callLater(*args, **kwargs)
        if not self.scheduled.called:
            self.scheduled.callback(None)
        return call


class BodyCollector(Protocol):
    """Collects everything a raw connection receives until the server closes it."""

    def __init__(self) -> None:
        self.data = b""
        self.done: Deferred[bytes] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Any = None) -> None:
        self.done.callback(self.data)


class ServedSiteTests(unittest.TestCase):
    """The site over real HTTP on 127.0.0.1."""

    spec = SMALL

    def serve(self, clock: Any = None) -> str:
        """Listen on a free port; cleanup closes the client pool, the port and every server connection."""
        factory = TrackingFactory(make_site(self.spec, clock or reactor))
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")  # type: ignore[arg-type]
        self.addCleanup(factory.drained)
        self.addCleanup(port.stopListening)
        pool = HTTPConnectionPool(reactor, persistent=True)
        self.addCleanup(pool.closeCachedConnections)
        self.agent = Agent(reactor, pool=pool)
        self.client = HTTPClient(self.agent)
        self.factory = factory
        return f"http://127.0.0.1:{port_of(port)}"

    async def test_pages_match_render(self) -> None:
        """Pages served over HTTP (gzip-decoded by treq) equal render(), with the HTML content type."""
        base = self.serve()
        for path in ["/", "/list/2.html", sorted(self.spec.expected().details_ok - self.spec.expected().slow)[0],
                     "/robots.txt", sorted(self.spec.expected().not_found)[0]]:
            response = await self.client.get(base + path, allow_redirects=False)
            body = await response.content()
            status, headers, expected = render(self.spec, path)
            self.assertEqual((response.code, body), (status, expected))
            self.assertEqual(response.headers.getRawHeaders(b"content-type"), [headers[b"content-type"]])

    async def test_fault_statuses_over_http(self) -> None:
        """500s and 404s answer their status; redirects answer 301/302 with their Location."""
        base, expected = self.serve(), self.spec.expected()
        for path in sorted(expected.server_error | expected.not_found):
            response = await self.client.get(base + path, allow_redirects=False)
            await response.content()
            self.assertEqual(response.code, render(self.spec, path)[0])
        for source, target in sorted(expected.redirects.items()):
            response = await self.client.get(base + source, allow_redirects=False)
            await response.content()
            self.assertIn(response.code, (301, 302))
            self.assertEqual(response.headers.getRawHeaders(b"location"), [target.encode()])

    async def test_redirect_chain_followed(self) -> None:
        """Following the two-hop chain ends on its expected 200 detail page."""
        base, expected = self.serve(), self.spec.expected()
        source = next(s for s, t in expected.redirects.items() if t in expected.redirects)
        response = await self.client.get(base + source)
        await response.content()
        self.assertEqual(response.code, 200)
        self.assertEqual(response.request.absoluteURI.decode(), base + expected.final(source))
        self.assertEqual(len(response.history()), 2)

    async def test_gzip_only_when_accepted(self) -> None:
        """With ``Accept-Encoding: gzip`` the body is gzip of render()'s; without, it is plain."""
        base = self.serve()
        path = "/list/1.html"
        zipped = await self.agent.request(b"GET", (base + path).encode(), Headers({b"accept-encoding": [b"gzip"]}))
        body = await treq.content(zipped)
        self.assertEqual(zipped.headers.getRawHeaders(b"content-encoding"), [b"gzip"])
        self.assertEqual(gzip.decompress(body), render(self.spec, path)[2])
        plain = await self.agent.request(b"GET", (base + path).encode())
        body = await treq.content(plain)
        self.assertIsNone(plain.headers.getRawHeaders(b"content-encoding"))
        self.assertEqual(body, render(self.spec, path)[2])

    async def test_slow_page_waits_for_the_clock(self) -> None:
        """A slow page answers only once the injected clock has advanced by ``slow_delay``."""
        clock = SchedulingClock()
        base = self.serve(clock)
        path = sorted(self.spec.expected().slow)[0]
        d = self.client.get(base + path)
        await clock.scheduled
        clock.advance(self.spec.slow_delay - 0.001)
        self.assertNoResult(d)
        clock.advance(0.001)
        response = await d
        body = await response.content()
        self.assertEqual((response.code, body), (200, render(self.spec, path)[2]))

    async def test_slow_page_cancelled_when_client_leaves(self) -> None:
        """A client that hangs up on a slow page leaves no timer behind."""
        clock = SchedulingClock()
        base = self.serve(clock)
        d = self.client.get(base + sorted(self.spec.expected().slow)[0])
        failures: list[Any] = []
        d.addErrback(failures.append)
        await clock.scheduled
        d.cancel()
        await self.factory.drained()
        self.assertEqual(len(failures), 1)
        self.assertEqual(clock.getDelayedCalls(), [])

    async def test_listen_helper(self) -> None:
        """``listen()`` serves on a free loopback port; an HTTP/1.0 request gets robots.txt."""
        port = listen(self.spec, reactor)
        self.addCleanup(port.stopListening)
        self.assertEqual(port.getHost(), IPv4Address("TCP", "127.0.0.1", port_of(port)))
        self.assertNotEqual(port_of(port), 0)
        collector = BodyCollector()
        await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port_of(port)), collector)
        assert collector.transport is not None
        collector.transport.write(b"GET /robots.txt HTTP/1.0\r\n\r\n")
        raw = await collector.done
        self.assertTrue(raw.startswith(b"HTTP/1.0 200") or raw.startswith(b"HTTP/1.1 200"))
        self.assertTrue(raw.endswith(render(self.spec, "/robots.txt")[2]))
