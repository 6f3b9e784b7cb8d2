"""The sub-request gate (spiderd.engine.subrequests) on an injected clock: delays between starts, a cap in flight,
the main document booked first, throttle blocks, a cancelled turn; and the hosts a site's pages may reach."""

from __future__ import annotations

from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock

from spiderd.core.rules import Site
from spiderd.engine.politeness import Politeness
from spiderd.engine.subrequests import SiteHosts, SubRequestGate, politeness_limits


def gate(clock: Clock, delay: float = 1.0, concurrency: int = 1) -> SubRequestGate:
    return SubRequestGate(clock, politeness_limits(Politeness(delay=delay, concurrency=concurrency)))


def test_turns_wait_the_delay_and_the_cap() -> None:
    """Two sub-requests to one host with delay 1 and one at a time: the second starts once the first ended and 1 s
    after it started."""
    clock = Clock()
    g = gate(clock)
    first, second = g.acquire("h"), g.acquire("h")
    assert first.called and not second.called
    clock.advance(1.5)
    assert not second.called  # the first is still in flight
    g.release("h")
    assert second.called


def test_main_document_booked_first() -> None:
    """A page's main document fetched at t: its first sub-request waits until t + delay."""
    clock = Clock()
    g = gate(clock, delay=2.0, concurrency=4)
    g.book("h", clock.seconds())
    turn = g.acquire("h")
    clock.advance(1.9)
    assert not turn.called
    clock.advance(0.1)
    assert turn.called


def test_block_and_cancel() -> None:
    """A throttle block holds every turn until its end; a cancelled turn leaves the line."""
    clock = Clock()
    g = gate(clock, delay=0.0, concurrency=4)
    g.block("h", 10.0)
    waiting, given_up = g.acquire("h"), g.acquire("h")
    given_up.cancel()
    given_up.addErrback(lambda f: f.trap(CancelledError))
    clock.advance(9.0)
    assert not waiting.called
    clock.advance(1.0)
    assert waiting.called


def test_robots_crawl_delay_counts() -> None:
    """A robots.txt Crawl-delay longer than the configured delay paces the host's sub-requests."""
    politeness = Politeness(delay=0.5, concurrency=1)
    politeness.set_robots_delay("h", 3.0)
    assert politeness_limits(politeness)("h") == (3.0, 1)
    assert politeness_limits(politeness)("other") == (0.5, 1)


def test_site_hosts() -> None:
    """A site's pages may reach its hosts, their subdomains and its render_hosts, nothing else."""
    site = Site("shop", ("shop.example",), render_hosts=("cdn.example",))
    hosts = SiteHosts()
    assert hosts.refusal(site, "https://shop.example/api/x") == ""
    assert hosts.refusal(site, "https://img.shop.example:8080/a.js") == ""
    assert hosts.refusal(site, "https://cdn.example/lib.js") == ""
    assert "not a host of site shop" in hosts.refusal(site, "https://tracker.example/t.js")
    assert hosts.refusal(site, "data:text/plain,x") != ""
