"""The shared frontier on Redis: the IURLPool contract for many nodes, every racy step one Lua script.

Layout (``NS`` is empty by default; tests set it so the seed-002 names are unique):

=====================================  ======  ==================================================
key                                    type    holds
=====================================  ======  ==================================================
``NS spider.website.domains``          set     domains to poll, registered by the pool or by tools; kept (seed 002)
``NS <domain>.higher`` / ``.lower``    list    waiting list (hub) / detail URLs, head first (seed 002)
``NS spider.seed.urls``                set     the seeds: every node's ``set_seeds`` adds, tools add (seed 002)
``P s:<bucket>``                       set     URL states: ``(fingerprint bits below the bucket) * 8 + code``
``P ready``                            zset    domain -> time its head URL's host may go (a lower bound);
                                               per-IP: ``@address`` -> its group's next time, and
                                               +inf for a domain waiting in its group's ring
``P next``                             zset    host (per-IP: and ``@address``, its group) -> next allowed
                                               time (only future times are kept; ``fetched`` raises it
                                               by the adaptive delay; a throttling answer's block,
                                               Retry-After, is one such time, of the host's group too)
``P inflight``                         hash    host (per-IP: and ``@address``) -> requests in flight
``P waiting``                          zset    host -> waiting URLs (the largest host, max_urls_per_host)
``P conf`` / ``P robots``              hash    host -> "delay concurrency [factor min max]" overrides (the
                                               adaptive rule if the host has its own) / Crawl-delay
``P group``                            hash    host -> its address (``[fetch] politeness = "ip"``,
                                               ``set_host_group``: ``group.lua``), read by the scripts
                                               only on nodes with "ip" (pop's last argument)
``P ring:<address>``                   zset    per-IP: domain -> time of its last turn in its group (0:
                                               none yet): the group's domains, least recently served first
``P turns``                            hash    domain taking turns -> its URLs handed out by pop whose
                                               status has not come (``max_active_hosts``: see Turns)
``P bench``                            zset    domain waiting for a turn -> the time it came
``P leases``                           zset    fingerprint (``h`` + fingerprint for a hub) -> lease deadline
``P lease``                            hash    same key -> kind, holds-a-host-slot (1; ``g``: taken with
                                               per-IP, frees its host's group too; 0 no), domain, URL
``P fails``                            hash    fingerprint -> failures, for active URLs that failed before
``P again``                            hash    fingerprint -> prio of a pending URL added again (``always``)
``P throttles``                        hash    fingerprint -> throttled fetches of an active URL (``throttle``)
``P throttled``                        zset    host -> end of its block by a throttling answer (``hosts``;
                                               past ones trimmed at each throttle)
``P why``                              hash    fingerprint -> "at failures reason": the last failure of a URL
                                               that failed (retried or for good), until it is done
``P hubs`` / ``P hub``                 zset    fingerprint -> next due time / hash: fingerprint -> domain, URL
``P counters`` / ``P meta``            hash    waiting pending done failed batched / bucket bits, hub span, sweep,
                                               ``hops`` once any hop count was kept (``P h:``), ``epoch`` (set
                                               by the first add or seen call finding none: known.py),
                                               ``turn_limit`` (the last started node's; see Turns)
``P adopting``                         zset    ``prio url`` of a tool's list entry a node is adding -> deadline
``P batch``                            string  the last batch number handed out (``next_batch``)
``P crawled:<kind>:<domain>``          zset    URL -> fetch time of done pages to recrawl (seed 004)
``P l:<bucket>``                       hash    linkbase: fingerprint -> URL, parent URL, anchor, xpath (seed 004)
``P h:<bucket>``                       hash    link hops (``max_hops``): fingerprint -> hops from a seed of a
                                               waiting or leased URL at 1 hop or more (none without a limit)
``P v:<bucket>``                       hash    validators of a hub or recrawled page (conditional GET):
                                               fingerprint -> "Last-Modified-seconds ETag" ("-" no date)
``P cron:<epoch>``                     string  a seed timer firing claimed by one node (``claim_once``)
``P content:<digest>``                 string  the fingerprint of the URL that first gave this content
                                               (``claim_content``, with ``[items] skip_duplicate_content``)
=====================================  ======  ==================================================

``P inflight`` and ``P lease`` hold one more field, ``~/encoding``, and ``P leases``, ``P ready`` and ``P next``
one more member at +inf (``P waiting``: at 0), longer than 64 bytes, written at each node's start: it keeps the key
a hash table or a skiplist however few hosts there are, or short their URLs (a small one is a listpack, which Redis
scans at every command); no script asks for the field (the export skips it), no read of due times or waiting hosts
reaches the member, and their names hold a '/', which no host or domain read from a list entry does
(``KEEP_HASHTABLE`` and ``KEEP_SKIPLIST`` in :mod:`.keys`).  A node that finds a new epoch (the pool lost
its data) writes them again.  Nodes of an older version sharing the pool count that member among the hosts
waiting and list it in ``hosts()``: upgrade them together.

``P`` is the prefix (``spiderd:``).  A URL's fingerprint is the first 64 bits
of the SHA-1 of its canonical form, so the scripts can compute it themselves
(``redis.sha1hex``) from the URLs they pop out of the seed-002 lists; for the
URLs a node adds or gives a status, the node computes it, with the bucket key
and members (:mod:`.keys`), since hashing and number-to-string work in Lua
costs Redis more than passing the strings.  The top
``seen_bucket_bits`` bits (16) pick the bucket; the other bits times 8 plus a
state code (1 done, 2 failed, 3 batched, 4 waiting list, 5 waiting detail) are
the member, an integer that keeps each bucket an intset (8 bytes a URL) while
it holds at most ``set-max-intset-entries`` (512) members: up to about 25
million URLs with 16 bits; raise the bits for more.  Pending URLs are the only
ones with richer records (``lease``); failure counts exist only for URLs that
failed and are not final.  ``P why`` keeps a URL's last failure (when, its
failures so far, the reason, at most 200 characters) for ``why`` and the
export, also once it failed for good; a URL done after failing drops it.  It
costs about 100 bytes plus the reason per failed URL (``MEMORY USAGE`` of a hash
of 20,000: 108 bytes for ``http 404``, 204 for a refused connection's 95
characters, 300 at most), the one cost that grows with failed URLs besides the
seen bucket's 8 bytes.  Only ``why`` and the export read it: ``DEL P why`` frees
it at any time.

Crawled sets (seed 004) exist only for the (domain, kind) pairs a node is told
to recrawl: an entry costs about 180 bytes for a 70-character URL (``MEMORY
USAGE`` of a set of 20,000), a linkbase entry about 220.  ``recrawl`` takes members fetched before a cut-off and queues them
again (one script, so nodes never queue one twice).  The linkbase (off by
default) spreads its entries over 4096 hashes by the top 12 fingerprint bits;
the first page found linking to a URL is kept (``HSETNX``).  Validators (``[fetch] conditional_get``)
exist only for hubs and the pages of recrawled kinds whose last 200 had an ETag or a Last-Modified, in 4096
hashes by the same 12 bits: about 50 bytes a page for a 9-character ETag while a hash holds at most 128
(``hash-max-listpack-entries``: some 500,000 pages), about 110 beyond; ``pop`` hands each URL's out with it.  A ``cron:<epoch>``
key is set with ``SET NX PX``: the node whose SET succeeds injects the seeds,
every member of ``spider.seed.urls`` (``seed_urls``).

Per-IP politeness (``[fetch] politeness = "ip"``: ``PoolOptions.per_ip``, or a node's first
``set_host_group``).  The hosts of one address share one slot, as the embedded pools' ``HostGroup``: its next
time and requests in flight are ``@address`` in ``P next`` and ``P inflight`` (each host's own are kept too).
A domain whose head host has a group waits in the group's ring (parked in ``P ready`` at +inf, where a wake
leaves it), and the group is a member of ``P ready`` scored by its next time: its turn goes to the first
domains of its ring whose head host is still of the group, until one takes URLs (a host goes while the
group's requests in flight are below its own concurrency; the delay is that host's) and goes to the ring's
end, so the group's domains take turns.  A full group leaves ``P ready``; a release puts it back.  A lease
taken so is marked ``g``: its release frees its host's group of that moment, since ``group.lua`` moves a
host's requests in flight from its old group to its new one (and wakes the old group).  Only ``pop`` and
``group`` read ``P group`` for a host's slot (a throttle reads it to hold the group, and a ``fetched`` entry of
the status call a ``g`` lease's, to free the group and hold it by the adaptive wait); with "host", the default, nothing is read or written for groups but one
``EXISTS`` of ``P group`` in a status call that throttles.  All nodes
should share the setting.  On a cluster the group lives in its host's domain partition: hosts of one address
in different partitions are grouped per partition.

Queues and politeness.  The seed-002 lists are the queues themselves (no
second copy), one pair per registered domain, and politeness is per host, as in
KVPool: a domain's turn hands out URLs from the head of its lists (list URLs
first) while they belong to the head URL's host, and only when that host's
next allowed time has come and it has a free slot, counted over all nodes in
``P next`` and ``P inflight``.  Hosts of one domain therefore queue behind one
another (head-of-line), which is never less polite than KVPool, but a domain
whose head host is slow makes its other hosts wait.  ``P ready`` orders the
domains by the time their turn may come; pop checks each candidate again, so a
score may be early but never late.  Domains take turns round robin, and a host
gets more than one URL in a turn only with no delay and no other domain ready.
With ``list_ratio`` / ``detail_ratio`` (seed 004's get_list, get_detail), a pop
first takes each kind's reserved share, a domain's turn then taking from that
kind's list only, and passes over up to 100 ready domains that have none of it
(see :mod:`spiderd.frontier.pool.split`); the node keeps the credit between pops.

Turns (``[pool] max_active_hosts``, as the embedded pools' hosts; Heritrix's active queues).  With ``P meta``'s
``turn_limit`` above 0, a domain with waiting URLs that is not in turn waits on ``P bench`` (in the order it came:
the time it was benched, then its name; ``ZADD NX`` keeps its place) instead of ``P ready``, until a pop finds no
domain of the ready set that may go now: then the domains benched longest enter (``ZPOPMIN``, as many as URLs are
still wanted, up to 8 times a pop), while ``P turns`` holds fewer than the limit.  A domain keeps its turn until it
has nothing waiting and no URL a pop handed out whose lease is still open: a fetch's end (``fetched``) frees its
host's slot but not its turn, so the links its page brings back (added before its status) follow in the same turn,
and so does a retried URL or one whose lease expired.  The count goes up by a pop's hand-outs and down by each
lease's end (a status, an expiry; not a claim's or a hub's); the status or requeue that leaves a domain with none
and an empty queue ends its turn (one ``EXISTS`` of its two lists, per domain whose count reached 0 in the call).
A pop reads the turns of the ready domains it takes in one ``HMGET`` (one that is not in turn, queued before a
limit was set, goes onto the bench); an add, a status call and a sweep step read those of the domains they may
queue in one ``HMGET``.  A domain whose head host is in a per-IP group waits in its group's ring (outside the
limit), and hubs go at their due time (outside it too).  ``next_due`` is now while a benched domain could enter.
Each node writes its ``turn_limit`` at its start (the last started sets it for all: give every node the same); at 0
pops forget ``P turns`` and move the bench into the ready set, 1000 domains a pop.  On a cluster each partition
has its own turns and bench and takes the limit divided by the partitions, at least 1.

Leases.  A popped URL leaves its list and gets a lease until now +
``pending_threshold``; a hub hand-out gets a hold with the same deadline, so a
dead node's host slots come back too.  Every pop first expires due leases (up
to 1000 a call) and puts their URLs back at the tail of their lists, whoever
leased them.  Unlike LevelDB, where one process owns the store and reopening
returns its leases at once, a restarted node cannot tell its own leases from
those of a live node: they come back when they expire.

Other tools (seed 002's keys are an interface).  A tool may register a domain
(``SADD spider.website.domains``), push URLs onto its lists (``RPUSH`` or, as
seed 002's ``offerUrl``, ``LPUSH``; in any order, any time), read the lists,
and add seeds (``SADD spider.seed.urls``: the next seed-timer firing injects
them with the nodes' own, and ``set_seeds`` only adds).  The pool never removes
a domain from the set (a drained domain only leaves ``P ready``: seed 002's
tools register a domain once and push to it later; the cost is one member per
domain ever queued), so every pop first takes one step of a sweep over the set:
``SSCAN`` of ``DOMAIN_SWEEP_COUNT`` (100) domains, each one not in ``P ready``
scored again (a few reads: its list heads and its head host's slot), the cursor
in ``P meta`` shared by every node; a new sweep starts at most every
``DOMAIN_SWEEP_EVERY`` (10) seconds of the clock.  A pop therefore costs two
``HGET`` and one ``ZRANGEBYSCORE`` (held entries) between sweeps and about 100
domains during one, whatever the size of the set, and a tool's domain is polled
within 10 seconds plus one pop per 100 registered domains (``SCARD`` against
``ZCARD`` would not tell: domains whose head host is full, or drained, are
rightly out of ``P ready``).  An entry a tool pushed is recognised when it
reaches the head of its list: one the pool queued (its waiting state is in the
seen bucket) is handed out; one already done, failed, batched, leased or
waiting in the other list is dropped; one the pool never saw goes, within the
same script, into ``P adopting`` (deadline: now + ``pending_threshold``) and
back to the node, which adds it as any URL (``addmany``: canonical form,
deduplicated, rejected with a reason if bad, the host budget applies) and then
removes it from ``P adopting``.  So a tool's URL is handed out from its next
turn, recorded like the pool's own, and a node that dies in between loses none:
a later pop hands the held entries, once their deadline passed, to its node
(adding twice is harmless).  At most 1000 entries are adopted per pop.  A
tool's URL counts as waiting (``size``, ``stats``) only once adopted, and goes
to the lists of its registered domain (a tool's list named after a subdomain is
polled too).

Time is the injected clock's, passed to every script; nodes should keep their
clocks in step (NTP), since a node running ahead may hand out a host early by
the skew.  Start-up deletes nothing (a host override dropped from the config
stays in ``P conf`` until deleted by hand, or by a reload of a node that had it;
a seed dropped from the config stays in ``spider.seed.urls``: ``SREM`` it).  Statuses (and ``fetched``, which frees a
host slot) given while a status call is on its way go out together in the next
one, before any later call.  All nodes should share the politeness settings (each
sends its defaults).

The scripts are one function library on Redis 7.0 and later (``FUNCTION LOAD`` on
each connection, named after its code's digest; ``FCALL``), so ``common.lua`` is
built once; ``begin(ARGV)`` sets each call's key names and empties its per-call
state (the group flag and the hosts' groups read included).  An older Redis gets
each as an ``EVALSHA`` script, prelude included (:mod:`.link`).

Redis Cluster (``redis+cluster://``): the scripts compute their key names, so
on a cluster each key space above is one partition whose prefix and namespace
end in a hash tag (``P{tag}:``, ``NS{tag}:``), every key of a script is of that
tag's slot, and each script is sent with that prefix as its one declared key,
which routes it (:mod:`.partitioned`, :mod:`.partitions`, :mod:`.cluster`).
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.redis.cluster import is_cluster_url
from spiderd.frontier.pool.redis.durability import Durability
from spiderd.frontier.pool.redis.link import RedisAddress, RedisLink, RedisPoolError, load_scripts, parse_redis_url
from spiderd.frontier.pool.redis.partitioned import PartitionedPool, make_cluster_pool
from spiderd.frontier.pool.redis.pool import RedisPool

__all__ = ["PartitionedPool", "RedisPool", "RedisPoolError", "open_redis_pool"]


def open_redis_pool(
    url: str,
    clock: IReactorTime,
    *,
    prefix: str = "spiderd:",
    namespace: str = "",
    seen_bucket_bits: int = 16,
    connect_timeout: float = 10.0,
    reply_timeout: float = 30.0,
    status_wait: float = 0.0,
    durability: str = "none",
    **options: Any,
) -> defer.Deferred[RedisPool | PartitionedPool]:
    """Connect to ``redis://[:password@]host:port/db`` (or a cluster's ``redis+cluster://[:password@]host:port,...``)
    and open the pool; fails with RedisPoolError naming host:port.

    ``options``: ``options`` (a PoolOptions, as the embedded pool's) and ``politeness``, or the keywords of
    :meth:`~spiderd.frontier.pool.options.PoolOptions.of` (``failure_threshold=2``); ``durability``: ``[pool]
    redis_durability`` (:mod:`.durability`).
    """
    if not 14 <= seen_bucket_bits <= 24:
        return defer.fail(ValueError(f"seen_bucket_bits must be between 14 and 24, not {seen_bucket_bits!r}"))
    try:
        address = url if is_cluster_url(url) else parse_redis_url(url)
        pool, opener = make_redis_pool(address, clock, prefix=prefix, namespace=namespace,
                                       seen_bucket_bits=seen_bucket_bits, connect_timeout=connect_timeout,
                                       reply_timeout=reply_timeout, status_wait=status_wait, durability=durability,
                                       **options)
    except ValueError as e:
        return defer.fail(e)
    return opener().addCallback(lambda _: pool)


def make_redis_pool(
    address: str | RedisAddress, clock: IReactorTime, *, prefix: str, namespace: str = "", seen_bucket_bits: int = 16,
    connect_timeout: float = 10.0, reply_timeout: float = 30.0, options: PoolOptions | None = None,
    politeness: Politeness | None = None, status_wait: float = 0.0, durability: str = "none", **keywords: Any,
) -> tuple[RedisPool | PartitionedPool, Callable[[], defer.Deferred[Any]]]:
    """A pool not connected yet, and the call that connects it (and may be called again after a failure);
    ``keywords`` (without ``options``): those of :meth:`PoolOptions.of`.  A ``redis+cluster://`` address gives the
    partitioned pool (``[pool] redis_partitions`` of the options: its partitions)."""
    options = options or PoolOptions.of(**keywords)
    durable = Durability(durability)
    if isinstance(address, str) and is_cluster_url(address):
        return make_cluster_pool(address, clock, options, prefix=prefix, namespace=namespace,
                                 seen_bucket_bits=seen_bucket_bits, politeness=politeness,
                                 connect_timeout=connect_timeout, reply_timeout=reply_timeout, status_wait=status_wait,
                                 durability=durable)
    if isinstance(address, str):
        address = parse_redis_url(address)
    scripts = load_scripts()
    link = RedisLink(address, scripts.values(), connect_timeout=connect_timeout, reply_timeout=reply_timeout,
                     durability=durable)
    pool = RedisPool(link, scripts, clock, options, prefix=prefix, namespace=namespace,
                     seen_bucket_bits=seen_bucket_bits, politeness=politeness, status_wait=status_wait)

    def opener() -> defer.Deferred[RedisPool]:
        def failed(failure: Failure) -> Failure:
            link.close()
            return failure

        return link.open().addCallback(lambda _: pool.start()).addErrback(failed)

    return pool, opener
