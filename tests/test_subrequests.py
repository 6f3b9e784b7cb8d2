"""Sub-requests in the role's politeness (spiderd.engine.subrequests.HostTurns over the worker's HostQueue), on an
injected clock: they wait for the host's delay and push the role's next page on, run in their page's unit or a free
one (which the role waits for), and a throttle blocks the role's pages too; and the hosts a site's pages may
reach."""

from __future__ import annotations

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock

from spiderd.core.rules import Site
from spiderd.engine.hostqueue import NOW, HostQueue, entry
from spiderd.engine.politeness import Politeness
from spiderd.engine.subrequests import HostTurns, Lent, SiteHosts, SubRequests


class Anyone:
    """A queue entry's owner that may always go."""

    def gate(self, host: str, now: float) -> float:
        return NOW


def role(delay: float = 1.0, concurrency: int = 1) -> tuple[Clock, HostQueue, HostTurns]:
    """A role's politeness as the worker holds it (a HostQueue), and its turns for sub-requests."""
    clock = Clock()
    queue = HostQueue(Politeness(delay=delay, concurrency=concurrency))
    return clock, queue, queue.turns(clock)


def page(queue: HostQueue, clock: Clock, host: str = "h") -> Lent:
    """A page of ``host`` taken from the queue now (its unit held until ``queue.done``), its unit to lend."""
    owner = Anyone()
    queue.add(entry(owner, f"http://{host}/p"))
    assert queue.take(clock.seconds()) is not None
    return Lent(host)


def test_a_sub_request_waits_for_the_pages_delay_and_pushes_the_next_page() -> None:
    """A page taken at 0 with delay 1: its sub-request starts at 1, and the role's next page of the host at 2."""
    clock, queue, turns = role(delay=1.0, concurrency=4)
    lent = page(queue, clock)
    turn = turns.acquire("h", lent)
    queue.add(entry(Anyone(), "http://h/next"))
    clock.advance(0.9)
    assert not turn.called
    clock.advance(0.1)
    assert turn.called
    assert queue.take(clock.seconds()) is None  # the sub-request's start pushed the host on by its delay
    clock.advance(0.9)
    assert queue.take(clock.seconds()) is None
    clock.advance(0.1)
    assert queue.take(clock.seconds()) is not None


def test_the_pages_unit_is_lent_one_sub_request_at_a_time() -> None:
    """With one request at a time per host, a page's sub-requests run in its own unit, one after the other; a
    sub-request of no page there (its page's unit is another host's) waits for a free unit."""
    clock, queue, turns = role(delay=0.0, concurrency=1)
    lent = page(queue, clock)
    first, second = turns.acquire("h", lent), turns.acquire("h", lent)
    stranger = turns.acquire("h", Lent("elsewhere"))
    assert first.called and not second.called and not stranger.called
    turns.release(first.result)
    assert second.called and not stranger.called
    turns.release(second.result)
    queue.done("h", clock.seconds())  # the page's outcome: its unit is free
    assert stranger.called


def test_a_sub_request_holds_a_unit_the_role_waits_for() -> None:
    """A sub-request that took a free unit of a host at its concurrency: the role takes no page of that host
    until it ends."""
    clock, queue, turns = role(delay=0.0, concurrency=1)
    turn = turns.acquire("h")
    assert turn.called
    queue.add(entry(Anyone(), "http://h/p"))
    assert queue.take(clock.seconds()) is None
    turns.release(turn.result)
    assert queue.take(clock.seconds()) is not None


def test_a_throttle_blocks_the_roles_pages_too() -> None:
    """A throttling answer to a sub-request blocks its host in the role's politeness: no page and no sub-request
    goes before the block ends."""
    clock, queue, turns = role(delay=0.0, concurrency=4)
    turns.block("h", 10.0)
    queue.add(entry(Anyone(), "http://h/p"))
    waiting, given_up = turns.acquire("h"), turns.acquire("h")
    given_up.cancel()
    given_up.addErrback(lambda f: f.trap(CancelledError))
    clock.advance(9.0)
    assert not waiting.called and queue.take(clock.seconds()) is None
    clock.advance(1.0)
    assert waiting.called and queue.take(clock.seconds()) is not None


def test_robots_crawl_delay_counts() -> None:
    """A robots.txt Crawl-delay longer than the configured delay paces the host's sub-requests."""
    clock, queue, turns = role(delay=0.5, concurrency=4)
    queue.politeness.set_robots_delay("h", 3.0)
    assert turns.acquire("h").called
    second = turns.acquire("h")
    clock.advance(2.9)
    assert not second.called
    clock.advance(0.1)
    assert second.called


def test_idle_slots_are_forgotten() -> None:
    """A host that only sub-requests reached is forgotten by the role's queue once idle and past its delay."""
    clock, queue, turns = role(delay=1.0, concurrency=4)
    turns.release(turns.acquire("cdn").result)
    clock.advance(1.0)
    queue.take(clock.seconds())
    assert "cdn" not in queue.politeness.hosts


def test_site_hosts() -> None:
    """A site's pages may reach its hosts, their subdomains and its render_hosts, nothing else."""
    site = Site("shop", ("shop.example",), render_hosts=("cdn.example",))
    hosts = SiteHosts()
    assert hosts.refusal(site, "https://shop.example/api/x") == ""
    assert hosts.refusal(site, "https://img.shop.example:8080/a.js") == ""
    assert hosts.refusal(site, "https://cdn.example/lib.js") == ""
    assert "not a host of site shop" in hosts.refusal(site, "https://tracker.example/t.js")
    assert hosts.refusal(site, "data:text/plain,x") != ""


class Never:
    """A fetcher whose fetches never end (until cancelled)."""

    def fetch(self, url: str, **options: object) -> Deferred[None]:
        return Deferred()


def test_a_sub_request_cut_mid_fetch_frees_its_unit() -> None:
    """A sub-request whose page ended while it was being fetched (its Deferred cancelled) frees its host's unit:
    the role's next request to the host may go."""
    clock, queue, turns = role(delay=0.0, concurrency=1)
    subs = SubRequests(clock, Never(), turns)  # type: ignore[arg-type]  # (a stand-in fetcher)
    site = Site("shop", ("h",))
    cut = subs.fetch(site, "http://h/api/1", None, True, lambda wait: None, turns)
    cut.addErrback(lambda f: f.trap(CancelledError))
    following = turns.acquire("h")
    assert not following.called  # the unit is the cut one's
    cut.cancel()
    assert following.called
