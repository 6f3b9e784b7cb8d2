"""A model of the next step for issue 17: nodes that own domains for a while, measured on Redis before it is built.

Not spiderd's pool: the Redis side of a protocol in which a node claims a domain (one owner at a time, a
deadline), takes a run of its URLs in one step, keeps that domain's politeness to itself while it owns it, and
gives the domain back once its run is done.  Redis then does per URL only what no node can keep to itself:

- claim (one script call for many domains): the due domains of ``ready`` (``ZRANGEBYSCORE``), per domain an
  ``LRANGE`` and ``LTRIM`` of up to ``--run`` URLs of its seed-002 list, its owner and deadline (``owner``,
  ``owned``), the run (``run``: domain -> its URLs, for a dead owner's expiry), and per URL one ``SISMEMBER`` of its
  waiting member (a duplicate or another tool's entry is dropped: the real pool would adopt it);
- status (node-computed members): per URL ``SREM`` of its waiting member and ``SADD`` of its done member;
- release (a domain's run finished): the owner, deadline and run dropped, and the domain back in ``ready`` if
  its list holds more;
- add (node-computed members): per link one ``SMISMEMBER`` of its five state members, a new one ``SADD`` of its
  waiting member and ``RPUSH`` (one a domain), one ``ZADD NX`` of the domains to ``ready`` (an owned domain there
  is passed over by the next claim);
- expiry (a claim's first step): owners past their deadline give their unfinished URLs back to their list's head.

Statuses, releases and adds wait up to ``status_wait`` for the next claim, in one call (``step``), as the pool's
statuses wait for its pop.  With ``plain`` (``--owned-plain set`` or ``hash``) the script only claims: statuses
and adds go as plain pipelined commands, and the claim's check of each URL is a read from the node once the claim
answered (``SISMEMBER``; Lua's ``sha1hex`` is not run); ``hash`` keeps a URL's state as one field of a hash a
bucket instead of a member a state (``HashStates``: one command a change, more memory a URL, ``--only
owned-memory``).  Adds there are not atomic: two nodes adding one URL at once may both queue it, and the claim's
check drops the second copy unless both land in one run.

Driven by bench/cluster.py's ``CrawlerModel`` over the same crawl-shaped mix (``--only owned``): Redis CPU a page
(``INFO cpu``) against the pool's own figure (``--only crawler``).  The model leaves out what the pool does
beside this: hubs, the list and detail ratios, per-IP groups, host overrides and robots delays, throttles,
failures and retries, adopting other tools' entries, the budget of URLs a host, stats and ``hosts()``.
"""

from __future__ import annotations

import collections
from typing import Any, Iterable

from twisted.internet import defer

from spiderd.frontier.pool.redis.keys import located
from spiderd.frontier.pool.redis.link import RedisLink

LIBRARY = r"""#!lua name=ownedmodel
local function members(P, split, url)
  local fp = string.sub(redis.sha1hex(url), 1, 16)
  local hi, lo = tonumber(string.sub(fp, 1, 8), 16), tonumber(string.sub(fp, 9, 16), 16)
  return P .. 's:' .. string.format('%d', math.floor(hi / split)), ((hi % split) * 4294967296 + lo) * 8
end

-- step(prefix, bits, now, deadline, node, want, run, n_status, [bucket waiting done]*n, n_release, domain*n,
--      n_add, [domain url bucket m1..m5]*n): statuses, releases and adds, then expiry and a claim of `want` URLs
--      in runs of up to `run` a domain; returns {domain, n, url*n, ...}.
local CLAIM_ONLY = false
local function step(keys, a)
  local P, split, now, deadline, node = a[1], 2 ^ (32 - tonumber(a[2])), a[3], a[4], a[5]
  local want, run = tonumber(a[6]), tonumber(a[7])
  local READY, OWNED, OWNER, RUN, COUNTERS = P .. 'ready', P .. 'owned', P .. 'owner', P .. 'run', P .. 'counters'
  local i = 8
  local n = tonumber(a[i]); i = i + 1
  for _ = 1, n do
    redis.call('SREM', a[i], a[i + 1])
    redis.call('SADD', a[i], a[i + 2])
    i = i + 3
  end
  n = tonumber(a[i]); i = i + 1
  if n > 0 then
    local ds, back = {}, {}
    for k = 1, n do
      local d = a[i]; i = i + 1
      ds[k] = d
      if redis.call('EXISTS', P .. d .. '.lower') == 1 then back[#back + 1] = now; back[#back + 1] = d end
    end
    redis.call('HDEL', OWNER, unpack(ds))
    redis.call('ZREM', OWNED, unpack(ds))
    redis.call('HDEL', RUN, unpack(ds))
    if #back > 0 then redis.call('ZADD', READY, unpack(back)) end
  end
  n = tonumber(a[i]); i = i + 1
  local added, pushes, order = 0, {}, {}
  for _ = 1, n do
    local d, url, bucket = a[i], a[i + 1], a[i + 2]
    local found = redis.call('SMISMEMBER', bucket, a[i + 3], a[i + 4], a[i + 5], a[i + 6], a[i + 7])
    if found[1] + found[2] + found[3] + found[4] + found[5] == 0 then
      redis.call('SADD', bucket, a[i + 7])
      local p = pushes[d]
      if not p then p = {}; pushes[d] = p; order[#order + 1] = d end
      p[#p + 1] = url
      added = added + 1
    end
    i = i + 8
  end
  if added > 0 then
    local wake = {}
    for _, d in ipairs(order) do
      redis.call('RPUSH', P .. d .. '.lower', unpack(pushes[d]))
      wake[#wake + 1] = now; wake[#wake + 1] = d
    end
    redis.call('ZADD', READY, 'NX', unpack(wake))
  end
  -- expiry: a dead owner's unfinished URLs back at their list's head
  for _, d in ipairs(redis.call('ZRANGEBYSCORE', OWNED, '-inf', '(' .. now, 'LIMIT', '0', '100')) do
    local urls = redis.call('HGET', RUN, d)
    if urls then
      for url in string.gmatch(urls, '[^\n]+') do
        local bucket, base = members(P, split, url)
        if redis.call('SISMEMBER', bucket, string.format('%.0f', base + 5)) == 1 then
          redis.call('LPUSH', P .. d .. '.lower', url)
        end
      end
    end
    redis.call('HDEL', OWNER, d); redis.call('HDEL', RUN, d); redis.call('ZREM', OWNED, d)
    redis.call('ZADD', READY, now, d)
  end
  local out, taken, claimed = {}, 0, 0
  if want > 0 then
    local owners, owned, runs = {}, {}, {}
    for _, d in ipairs(redis.call('ZRANGEBYSCORE', READY, '-inf', now, 'LIMIT', '0', tostring(math.ceil(want / run) + 4))) do
      if taken >= want then break end
      redis.call('ZREM', READY, d)
      if redis.call('HEXISTS', OWNER, d) == 0 then
        local q = P .. d .. '.lower'
        local urls = redis.call('LRANGE', q, '0', tostring(run - 1))
        if #urls > 0 then
          redis.call('LTRIM', q, tostring(#urls), '-1')
          local got = CLAIM_ONLY and urls or {}
          for _, url in ipairs(CLAIM_ONLY and {} or urls) do
            local bucket, base = members(P, split, url)
            if redis.call('SISMEMBER', bucket, string.format('%.0f', base + 5)) == 1 then got[#got + 1] = url end
          end
          if #got > 0 then
            out[#out + 1] = d; out[#out + 1] = #got
            for _, url in ipairs(got) do out[#out + 1] = url end
            owners[#owners + 1] = d; owners[#owners + 1] = node
            owned[#owned + 1] = deadline; owned[#owned + 1] = d
            runs[#runs + 1] = d; runs[#runs + 1] = table.concat(got, '\n')
            taken = taken + #got
          end
        end
      end
    end
    if #owners > 0 then
      redis.call('HSET', OWNER, unpack(owners))
      redis.call('ZADD', OWNED, unpack(owned))
      redis.call('HSET', RUN, unpack(runs))
    end
  end
  if added - taken ~= 0 then redis.call('HINCRBY', COUNTERS, 'waiting', tostring(added - taken)) end
  return out
end

redis.register_function('owned_step', function(keys, a) CLAIM_ONLY = false; return step(keys, a) end)
redis.register_function('owned_claim', function(keys, a) CLAIM_ONLY = true; return step(keys, a) end)
"""


class SetStates:
    """URL states as the pool keeps them: a member a state (its bits below the bucket times 8, plus the code) in
    the URL's seen bucket, a set (an intset: 8 bytes a URL)."""

    infix = ""

    def add(self, link: RedisLink, place: tuple[str, int]) -> defer.Deferred[Any]:
        bucket, base = place
        return link.execute("SMISMEMBER", bucket, *[str(base + c) for c in range(1, 6)])

    def queue(self, link: RedisLink, place: tuple[str, int], found: list[int]) -> defer.Deferred[bool]:
        if any(found):
            return defer.succeed(False)
        link.execute("SADD", place[0], str(place[1] + 5))
        return defer.succeed(True)

    def waiting(self, link: RedisLink, place: tuple[str, int]) -> defer.Deferred[Any]:
        return link.execute("SISMEMBER", place[0], str(place[1] + 5))

    def done(self, link: RedisLink, place: tuple[str, int]) -> None:
        link.execute("SREM", place[0], str(place[1] + 5))
        link.execute("SADD", place[0], str(place[1] + 1))


class HashStates:
    """URL states as one field a URL (its bits below the bucket) holding its state code, in a hash a bucket: one
    command a state change (HSETNX adds a URL never seen, HSET marks it done), more memory a URL (see ``--only
    owned-memory``)."""

    infix = "x"

    def add(self, link: RedisLink, place: tuple[str, int]) -> defer.Deferred[Any]:
        return link.execute("HSETNX", place[0], str(place[1] >> 3), "5")

    def queue(self, link: RedisLink, place: tuple[str, int], new: int) -> defer.Deferred[bool]:
        return defer.succeed(bool(new))

    def waiting(self, link: RedisLink, place: tuple[str, int]) -> defer.Deferred[Any]:
        return link.execute("HGET", place[0], str(place[1] >> 3)).addCallback(lambda state: state == "5")

    def done(self, link: RedisLink, place: tuple[str, int]) -> None:
        link.execute("HSET", place[0], str(place[1] >> 3), "1")


SEEN: dict[str, Any] = {"set": SetStates(), "hash": HashStates()}


class OwnedNode:
    """The node side of the model, with the pool's interface as ``CrawlerModel`` drives it: pop hands out URLs of
    the domains this node owns, each domain's URLs one at a time (its politeness, here no delay but one request in
    flight a host); a claim goes out when the owned runs hold fewer than asked for."""

    def __init__(self, link: RedisLink, clock: Any, prefix: str, bits: int, run: int = 16,
                 status_wait: float = 0.05, lease: float = 600.0, plain: str = "") -> None:
        # plain ("set" or "hash"): statuses and adds as plain pipelined commands, the claim's check from the node
        self.plain, self.seen = plain, SEEN[plain or "set"]
        self.adding: defer.Deferred[Any] = defer.succeed(None)
        self.link, self.clock, self.prefix, self.bits = link, clock, prefix, bits
        self.run, self.status_wait, self.lease = run, status_wait, lease
        self.runs: collections.OrderedDict[str, collections.deque[str]] = collections.OrderedDict()
        self.busy: dict[str, int] = collections.Counter()  # domain -> URLs handed out, not done
        self.domain_of: dict[str, str] = {}
        self.statuses: list[str] = []
        self.releases: list[str] = []
        self.adds: list[str] = []
        self.timer: Any = None
        self.calls = 0

    @defer.inlineCallbacks
    def start(self) -> Any:
        yield self.link.execute("FUNCTION", "LOAD", "REPLACE", LIBRARY)

    def domain(self, url: str) -> str:
        """The model's unit of ownership: a URL's host (the pool's is the registered domain; over the mix's
        ``--domains`` hosts the two are the same)."""
        return url.split("/", 3)[2]

    def addmany(self, urls: Iterable[str], detail: bool = True, parent: str | None = None) -> defer.Deferred[None]:
        self.adds += urls
        self.later()
        return defer.succeed(None)

    def fetched(self, url: str, seconds: float) -> None:
        pass

    def set_statuses(self, pairs: list[tuple[str, int]]) -> defer.Deferred[None]:
        for url, _ in pairs:
            self.statuses.append(url)
            d = self.domain_of.pop(url)
            self.busy[d] -= 1
            if not self.busy[d] and not self.runs.get(d):
                del self.busy[d]
                self.runs.pop(d, None)
                self.releases.append(d)
        self.later()
        return defer.succeed(None)

    def later(self) -> None:
        if self.timer is None:
            self.timer = self.clock.callLater(self.status_wait, self.flush)

    def flush(self) -> None:
        self.timer = None
        self.step(0)

    @defer.inlineCallbacks
    def pop(self, wanted: int, hubs: int = 0) -> Any:
        free = sum(1 for d, q in self.runs.items() if q and not self.busy.get(d))
        if free < wanted:
            yield self.step((wanted - free) * self.run)
        out = []
        for d in list(self.runs):
            q = self.runs[d]
            if q and not self.busy.get(d):  # one request in flight a domain
                u = q.popleft()
                self.busy[d] = self.busy.get(d, 0) + 1
                self.domain_of[u] = d
                out.append(u)
                self.runs.move_to_end(d)
                if len(out) >= wanted:
                    break
        return out

    @defer.inlineCallbacks
    def step(self, want: int) -> Any:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        statuses, releases, adds = self.statuses, self.releases, self.adds
        self.statuses, self.releases, self.adds = [], [], []
        now = self.clock.seconds()
        if self.plain:
            self.send_plain(statuses, adds)
            statuses, adds = [], []
        args: list[str] = [self.prefix, str(self.bits), str(int(now)), str(int(now + self.lease)), "node1",
                           str(want), str(self.run), str(len(statuses))]
        for u in statuses:
            _, bucket, base = located(u, self.prefix, self.bits)
            args += [bucket, str(base + 5), str(base + 1)]
        args.append(str(len(releases)))
        args += releases
        args.append(str(len(adds)))
        for u in adds:
            _, bucket, base = located(u, self.prefix, self.bits)
            args += [self.domain(u), u, bucket] + [str(base + c) for c in range(1, 6)]
        self.calls += 1
        out = yield self.link.execute("FCALL", "owned_step" if not self.plain else "owned_claim", "0", *args)
        i, claimed = 0, []
        while i < len(out):
            claimed.append((out[i], out[i + 2:i + 2 + int(out[i + 1])]))
            i += 2 + int(out[i + 1])
        if self.plain:
            claimed = yield self.check(claimed)
        for d, urls in claimed:
            self.runs.setdefault(d, collections.deque()).extend(urls)
        return None

    def send_plain(self, statuses: list[str], adds: list[str]) -> None:
        """Statuses and adds as plain pipelined commands (``seen``'s), statuses not awaited."""
        for u in statuses:
            self.seen.done(self.link, self.place(u))
        if adds:
            self.adding = self.add_plain(adds)

    def place(self, url: str) -> tuple[str, int]:
        _, bucket, base = located(url, self.prefix + self.seen.infix, self.bits)
        return bucket, base

    @defer.inlineCallbacks
    def add_plain(self, adds: list[str]) -> Any:
        places = [self.place(u) for u in adds]
        fresh = yield defer.gatherResults([self.seen.add(self.link, place) for place in places])
        fresh = yield defer.gatherResults([self.seen.queue(self.link, place, new) for place, new in zip(places, fresh)])
        pushes: dict[str, list[str]] = {}
        for u, new in zip(adds, fresh):
            if new:
                pushes.setdefault(self.domain(u), []).append(u)
        for d, urls in pushes.items():
            self.link.execute("RPUSH", self.prefix + d + ".lower", *urls)
        if pushes:
            wake = [x for d in pushes for x in (str(int(self.clock.seconds())), d)]
            self.link.execute("ZADD", self.prefix + "ready", "NX", *wake)
            yield self.link.execute("HINCRBY", self.prefix + "counters", "waiting", str(sum(map(len, pushes.values()))))

    @defer.inlineCallbacks
    def check(self, claimed: list[tuple[str, list[str]]]) -> Any:
        """The claimed URLs still waiting (one read of each's state: a duplicate, or one done since, is dropped)."""
        urls = [u for _, us in claimed for u in us]
        waiting = yield defer.gatherResults([self.seen.waiting(self.link, self.place(u)) for u in urls])
        kept = {u for u, w in zip(urls, waiting) if w}
        return [(d, [u for u in us if u in kept]) for d, us in claimed]

    @defer.inlineCallbacks
    def size(self) -> Any:
        if self.statuses or self.adds or self.releases:
            yield self.step(0)
        yield self.adding
        waiting = yield self.link.execute("HGET", self.prefix + "counters", "waiting")
        return int(waiting or 0) + sum(len(q) for q in self.runs.values())

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)
