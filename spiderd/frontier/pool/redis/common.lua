-- Prepended to every script: key names, URL states, host slots and domain turns.
-- ARGV[1..6]: prefix, namespace, seen bucket bits, default delay, default concurrency, now.
local P, NS = ARGV[1], ARGV[2]
local BITS = tonumber(ARGV[3])
local DELAY, CONC = tonumber(ARGV[4]), tonumber(ARGV[5])
local NOW_S = ARGV[6]
local NOW = tonumber(NOW_S)

local READY, NEXT, INFLIGHT, WAITING = P .. 'ready', P .. 'next', P .. 'inflight', P .. 'waiting'
local CONF, ROBOTS, LEASES, LEASE = P .. 'conf', P .. 'robots', P .. 'leases', P .. 'lease'
local FAILS, HUBS, HUB = P .. 'fails', P .. 'hubs', P .. 'hub'
local COUNTERS, META = P .. 'counters', P .. 'meta'
local CLAIMS = P .. 'claims'  -- fingerprint of a claimed redirect target -> fingerprint of the URL that claimed it
local CHECKPOINTS = P .. 'checkpoints'  -- name -> count, recorded with statuses (set_statuses)
local HOSTS_SEEN = P .. 'hostseen'  -- host -> new URLs it took in all (the max_urls_per_host budget)
local ADOPTING = P .. 'adopting'  -- "prio url" of another tool's list entries a node is adding -> its deadline
local AGAIN = P .. 'again'  -- fingerprint of a pending URL added again (always) -> prio: queued when the lease ends
local WHY = P .. 'why'  -- fingerprint -> "at failures reason": a URL's last failure, kept once final (status.lua)
local THROTTLED = P .. 'throttled'  -- host -> end of its block by a throttling answer (status.lua; past ones trimmed)
local DOMAINS = NS .. 'spider.website.domains'
local SUFFIX = {[0] = '.higher', [1] = '.lower'}
local FINAL_NAME = {'done', 'failed', 'batched'}
local DONE, FAILED, BATCHED, WAITING_LIST = 1, 2, 3, 4  -- state codes; WAITING_LIST + prio is waiting
local SPLIT = 2 ^ (32 - BITS)

-- The 64-bit fingerprint (hex), its bucket key and the base of its members (fingerprint bits below the bucket, times 8).
local function locate_fp(fp)
  local hi, lo = tonumber(string.sub(fp, 1, 8), 16), tonumber(string.sub(fp, 9, 16), 16)
  return fp, P .. 's:' .. math.floor(hi / SPLIT), ((hi % SPLIT) * 4294967296 + lo) * 8
end

local function locate(url)
  return locate_fp(string.sub(redis.sha1hex(url), 1, 16))
end

local function member(base, code)
  return string.format('%.0f', base + code)
end

-- The state code stored for a URL in its bucket (1-3 final, 4-5 waiting), or nil.
local function known(bucket, base)
  local found = redis.call('SMISMEMBER', bucket, member(base, 1), member(base, 2), member(base, 3),
    member(base, 4), member(base, 5))
  for code = 1, 5 do
    if found[code] == 1 then return code end
  end
  return nil
end

local function queue(domain, prio)
  return NS .. domain .. SUFFIX[prio]
end

local function host_of(url)
  local netloc = string.match(url, '^[^:/]+://([^/]*)') or ''
  return string.match(netloc, '([^@]*)$')
end

local function parse_lease(rec)
  return string.match(rec, '^(.)(.) (%S+) (.*)$')  -- kind (0, 1 or h), holds a host slot (1, 0; c: a claim), domain, url
end

-- A host's politeness slot, read once per script: delay, concurrency, requests in flight, next allowed time, and
-- its own adaptive rule {factor, min delay, max delay} if its override has one ("delay concurrency [f min max]");
-- the delay is the larger of the configured one and the robots.txt Crawl-delay (both kept, for hosts.lua).
local slots = {}
local function slot(host)
  local s = slots[host]
  if s then return s end
  local delay, conc, adaptive = DELAY, CONC, nil
  local override = redis.call('HGET', CONF, host)
  if override then
    local f = {}
    for word in string.gmatch(override, '%S+') do f[#f + 1] = tonumber(word) end
    delay, conc = f[1], f[2]
    if f[5] then adaptive = {f[3], f[4], f[5]} end
  end
  local configured, robots = delay, tonumber(redis.call('HGET', ROBOTS, host) or '0')
  delay = math.max(delay, robots)
  s = {host = host, delay = delay, conc = conc, busy = tonumber(redis.call('HGET', INFLIGHT, host) or '0'),
       next = tonumber(redis.call('ZSCORE', NEXT, host) or '0'), adaptive = adaptive, configured = configured,
       crawl_delay = robots}
  slots[host] = s
  return s
end

local function head(domain)
  for prio = 0, 1 do
    local url = redis.call('LINDEX', queue(domain, prio), 0)
    if url then return prio, url end
  end
  return nil, nil
end

-- Score a domain by the time its head URL's host may go, or take it out of the ready set (empty, or that host
-- is full).  It stays in spider.website.domains: seed 002's tools register a domain once and push to it later.
local function requeue(domain)
  local _, url = head(domain)
  if not url then
    redis.call('ZREM', READY, domain)
    return
  end
  local s = slot(host_of(url))
  if s.busy >= s.conc then
    redis.call('ZREM', READY, domain)
  else
    redis.call('ZADD', READY, math.max(s.next, NOW), domain)
  end
end

-- Requeue a domain that is not in the ready set (a ready one keeps its place; pop checks it anyway).
local function wake(domain)
  if not redis.call('ZSCORE', READY, domain) then requeue(domain) end
end

local function release(host, domain)
  local s = slot(host)
  s.busy = redis.call('HINCRBY', INFLIGHT, host, -1)
  if s.busy <= 0 then redis.call('HDEL', INFLIGHT, host) end
  wake(domain)
end

local function occupy(s, count)
  s.busy = redis.call('HINCRBY', INFLIGHT, s.host, count)
  if s.delay > 0 then
    redis.call('ZADD', NEXT, 'GT', NOW + s.delay, s.host)
    s.next = math.max(s.next, NOW + s.delay)
  end
end

local function host_waiting(host, change)
  if tonumber(redis.call('ZINCRBY', WAITING, change, host)) <= 0 then redis.call('ZREM', WAITING, host) end
  redis.call('HINCRBY', COUNTERS, 'waiting', change)
end

local function enqueue(url, host, domain, prio, bucket, base)
  redis.call('SADD', bucket, member(base, WAITING_LIST + prio))
  redis.call('RPUSH', queue(domain, prio), url)
  redis.call('SADD', DOMAINS, domain)
  host_waiting(host, 1)
  wake(domain)
end

-- Take a waiting URL out of its queue (claim, or a status for a URL that was never handed out).
local function unqueue(url, host, domain, bucket, base, code)
  local prio = code - WAITING_LIST
  redis.call('SREM', bucket, member(base, code))
  redis.call('LREM', queue(domain, prio), 1, url)
  host_waiting(host, -1)
  requeue(domain)  -- its head may have changed
  return prio
end

local function lease(fp, rec, deadline)
  redis.call('HSET', LEASE, fp, rec)
  redis.call('ZADD', LEASES, deadline, fp)
end

-- Drop a lease or hub hold, freeing its host slot if it still holds one; returns the record.
local function end_lease(key)
  local rec = redis.call('HGET', LEASE, key)
  if not rec then return nil end
  redis.call('HDEL', LEASE, key)
  redis.call('ZREM', LEASES, key)
  local kind, holds, domain, url = parse_lease(rec)
  if holds == '1' then release(host_of(url), domain) end
  if holds == 'c' then redis.call('HDEL', CLAIMS, key) end
  if kind ~= 'h' then redis.call('HINCRBY', COUNTERS, 'pending', -1) end
  return kind, domain, url
end

-- The prio of a pending URL added again (always) while leased, forgetting that mark and its failures (it is a
-- new request); nil if it was not added again.
local function take_again(fp)
  local prio = redis.call('HGET', AGAIN, fp)
  if not prio then return nil end
  redis.call('HDEL', AGAIN, fp)
  redis.call('HDEL', FAILS, fp)
  return tonumber(prio)
end

-- The crawled set of a domain and kind (seed 004): URL -> fetch time.
local CRAWLED_KIND = {[0] = 'list', [1] = 'detail'}
local function crawled(prio, domain)
  return P .. 'crawled:' .. CRAWLED_KIND[prio] .. ':' .. domain
end

-- The linkbase bucket of a fingerprint: one hash per 12 top bits (4096 buckets).
local function link_bucket(fp)
  return P .. 'l:' .. math.floor(tonumber(string.sub(fp, 1, 3), 16))
end

-- The link-hop bucket of a fingerprint (max_hops): one hash per 12 top bits, fingerprint -> hops from a seed, for
-- waiting and leased URLs at 1 hop or more (add.lua writes it, status.lua drops it at a final status).
local function hops_bucket(fp)
  return P .. 'h:' .. math.floor(tonumber(string.sub(fp, 1, 3), 16))
end

-- The validators bucket of a fingerprint (conditional GET): one hash per 12 top bits, fingerprint -> "seconds etag".
local function validators_bucket(fp)
  return P .. 'v:' .. math.floor(tonumber(string.sub(fp, 1, 3), 16))
end
