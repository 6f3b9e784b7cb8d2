-- Mind Lua 5.1's limits: this prelude's top level (the library's main chunk, with every body's functions) holds
-- 200 locals, which it has all but reached (one more fits; a second needs another merged or removed: FUNCTION LOAD
-- fails with "more than 200 local variables"), and a function may use 60 upvalues.
--
-- The globals these scripts use, as locals (a global is read through Redis 7's empty proxy table and its
-- __index at every use).  A function library's prelude runs at FUNCTION LOAD, where only `redis` (its loader
-- API: register_function) exists: begin() binds them all at the first call (globals() reads them, declared
-- before the locals shadow their names); an EVAL script binds them at every call.
local function globals()
  return redis, string, math, tonumber, ipairs, unpack, setmetatable, tostring, pairs, rawget, next
end
local redis = redis
local string, math, tonumber, ipairs, unpack, setmetatable, tostring, pairs, rawget, next
local BOUND = false

-- The prelude of every script (the head of the function library): key names, URL states, host slots and domain
-- turns.  ARGV[1..6]: prefix, namespace, seen bucket bits, default delay, default concurrency, now; set for each
-- call by begin() (at the end of this prelude).
local P, NS, BITS, DELAY, CONC, NOW_S, NOW, SPLIT
local READY, NEXT, INFLIGHT, WAITING, CONF, ROBOTS, LEASES, LEASE, FAILS, HUBS, HUB, COUNTERS, META
local CLAIMS  -- fingerprint of a claimed redirect target -> fingerprint of the URL that claimed it
local CHECKPOINTS  -- name -> count, recorded with statuses (set_statuses)
local HOSTS_SEEN  -- host -> new URLs it took in all (the max_urls_per_host budget)
local ADOPTING  -- "prio url" of another tool's list entries a node is adding -> its deadline
local AGAIN  -- fingerprint of a pending URL added again (always) -> prio: queued when the lease ends
local WHY  -- fingerprint -> "at failures reason": a URL's last failure, kept once final (status.lua)
local THROTTLED  -- host -> end of its block by a throttling answer (status.lua; past ones trimmed)
local GROUP  -- host -> its address (per-IP politeness: group.lua)
local DOMAINS
local FINAL_NAME = {'done', 'failed', 'batched'}
local DONE, FAILED, BATCHED, WAITING_LIST = 1, 2, 3, 4  -- state codes; WAITING_LIST + prio is waiting

-- Decimal digits of a whole number below 2^53 (as string.format('%.0f') writes it), in one string: creating a
-- string is among the dearest steps of these scripts, so no conversion and no intermediate strings.
local D1 = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15', '16', '17', '18', '19', '20', '21', '22', '23', '24', '25', '26', '27', '28', '29', '30', '31', '32', '33', '34', '35', '36', '37', '38', '39', '40', '41', '42', '43', '44', '45', '46', '47', '48', '49', '50', '51', '52', '53', '54', '55', '56', '57', '58', '59', '60', '61', '62', '63', '64', '65', '66', '67', '68', '69', '70', '71', '72', '73', '74', '75', '76', '77', '78', '79', '80', '81', '82', '83', '84', '85', '86', '87', '88', '89', '90', '91', '92', '93', '94', '95', '96', '97', '98', '99'}
local D2 = {[0] = '00', '01', '02', '03', '04', '05', '06', '07', '08', '09', '10', '11', '12', '13', '14', '15', '16', '17', '18', '19', '20', '21', '22', '23', '24', '25', '26', '27', '28', '29', '30', '31', '32', '33', '34', '35', '36', '37', '38', '39', '40', '41', '42', '43', '44', '45', '46', '47', '48', '49', '50', '51', '52', '53', '54', '55', '56', '57', '58', '59', '60', '61', '62', '63', '64', '65', '66', '67', '68', '69', '70', '71', '72', '73', '74', '75', '76', '77', '78', '79', '80', '81', '82', '83', '84', '85', '86', '87', '88', '89', '90', '91', '92', '93', '94', '95', '96', '97', '98', '99'}
local function dec(n)
  if n < 100 then return D1[n] end
  local c1 = n % 100
  n = (n - c1) / 100
  if n < 100 then return D1[n] .. D2[c1] end
  local c2 = n % 100
  n = (n - c2) / 100
  if n < 100 then return D1[n] .. D2[c2] .. D2[c1] end
  local c3 = n % 100
  n = (n - c3) / 100
  if n < 100 then return D1[n] .. D2[c3] .. D2[c2] .. D2[c1] end
  local c4 = n % 100
  n = (n - c4) / 100
  if n < 100 then return D1[n] .. D2[c4] .. D2[c3] .. D2[c2] .. D2[c1] end
  local c5 = n % 100
  n = (n - c5) / 100
  if n < 100 then return D1[n] .. D2[c5] .. D2[c4] .. D2[c3] .. D2[c2] .. D2[c1] end
  local c6 = n % 100
  n = (n - c6) / 100
  if n < 100 then return D1[n] .. D2[c6] .. D2[c5] .. D2[c4] .. D2[c3] .. D2[c2] .. D2[c1] end
  local c7 = n % 100
  n = (n - c7) / 100
  if n < 100 then return D1[n] .. D2[c7] .. D2[c6] .. D2[c5] .. D2[c4] .. D2[c3] .. D2[c2] .. D2[c1] end
  return string.format('%.0f', n) .. D2[c7] .. D2[c6] .. D2[c5] .. D2[c4] .. D2[c3] .. D2[c2] .. D2[c1]
end

local function int(n)
  if n < 0 then return '-' .. dec(-n) end
  return dec(n)
end

-- A URL's members in its seen bucket, ms[code] for the state codes 1-5: given by the node (keys.py), or made
-- from ms.base (the fingerprint bits below the bucket, times 8; from ms[1], the done member, if not given) when
-- first asked for.
local MEMBERS = {__index = function(ms, code)
  local base = rawget(ms, 'base')
  if not base then
    base = tonumber(ms[1]) - 1
    ms.base = base
  end
  local m = dec(base + code)
  ms[code] = m
  return m
end}

-- The 64-bit fingerprint (hex), its bucket key and its members.
local function locate_fp(fp)
  local hi, lo = tonumber(string.sub(fp, 1, 8), 16), tonumber(string.sub(fp, 9, 16), 16)
  return fp, P .. 's:' .. dec(math.floor(hi / SPLIT)), setmetatable({base = ((hi % SPLIT) * 4294967296 + lo) * 8},
    MEMBERS)
end

local function locate(url)
  return locate_fp(string.sub(redis.sha1hex(url), 1, 16))
end

-- A URL's fingerprint, bucket key and one member (state code), without the members table (pop's take: one
-- SREM a URL); base gives the others (a members table: setmetatable({base = base}, MEMBERS)).
local function locate_member(url, code)
  local fp = string.sub(redis.sha1hex(url), 1, 16)
  local hi, lo = tonumber(string.sub(fp, 1, 8), 16), tonumber(string.sub(fp, 9, 16), 16)
  local base = ((hi % SPLIT) * 4294967296 + lo) * 8
  return fp, P .. 's:' .. dec(math.floor(hi / SPLIT)), dec(base + code), base
end

-- redis.call(command, key, ...) with a list's items, 1000 of them a call; read_many gathers the replies, one per
-- item (HMGET's values, false where none; ZMSCORE's scores).
local function each_chunk(command, key, items)
  for i = 1, #items, 1000 do redis.call(command, key, unpack(items, i, math.min(i + 999, #items))) end
end
local function read_many(command, key, items)
  local values = {}
  for j = 1, #items, 1000 do
    local got = redis.call(command, key, unpack(items, j, math.min(j + 999, #items)))
    for k = 1, #got do values[j + k - 1] = got[k] end
  end
  return values
end

-- The pool's epoch (P meta's epoch), set from Redis's clock by the first call that finds none: a pool whose data
-- was lost (a Redis restarted empty, a flush) answers another one, and a node that remembers URLs the pool knows
-- (add and seen answer it: known.py) forgets them.
local function epoch()
  local e = redis.call('HGET', META, 'epoch')
  if e then return e end
  local t = redis.call('TIME')
  e = t[1] .. '.' .. t[2]
  redis.call('HSET', META, 'epoch', e)
  return e
end

-- The state code stored for a URL in its bucket (1-3 final, 4-5 waiting), or nil.
local function known(bucket, ms)
  local found = redis.call('SMISMEMBER', bucket, ms[1], ms[2], ms[3], ms[4], ms[5])
  for code = 1, 5 do
    if found[code] == 1 then return code end
  end
  return nil
end

local queues = {[0] = {}, [1] = {}}  -- prio -> domain -> its queue key (built once per script)
local function queue(domain, prio)
  local keys = queues[prio]
  local q = keys[domain]
  if not q then
    q = NS .. domain .. (prio == 0 and '.higher' or '.lower')
    keys[domain] = q
  end
  return q
end

local hosts_of = {}  -- url -> its host, found once per script
local function host_of(url)
  local host = hosts_of[url]
  if not host then
    local at
    host, at = string.match(url, '^[^:/]+://([^/@]*)(@?)')
    if not host then
      host = ''
    elseif at ~= '' then  -- user info: the host follows the last '@' before the path
      host = string.match(string.match(url, '^[^:/]+://([^/]*)'), '([^@]*)$')
    end
    hosts_of[url] = host
  end
  return host
end

local function parse_lease(rec)
  -- kind (0, 1 or h), holds a host slot (1; g: per address, see GROUPS; 0 no; c: a claim), domain, url
  return string.match(rec, '^(.)(.) (%S+) (.*)$')
end

-- Whether a key holds anything, asked once per script (EXISTS): a read of a field of an empty hash or sorted
-- set is skipped.  A script that writes to such a key calls fill(key) (it is then read as usual).
local nonempty = {}
local function filled(key)
  local known_filled = nonempty[key]
  if known_filled == nil then
    known_filled = redis.call('EXISTS', key) == 1
    nonempty[key] = known_filled
  end
  return known_filled
end
local function fill(key)
  nonempty[key] = true
end
-- Whether two keys not yet asked about hold anything, in one EXISTS (the second key named twice: the count's
-- bits say which; each key named costs a lookup, about a fifth of a call's cost).
local function ask_filled(k1, k2)
  local n = redis.call('EXISTS', k1, k2, k2)
  nonempty[k1], nonempty[k2] = n % 2 == 1, n >= 2
end

-- Counter changes (COUNTERS fields, WAITING per host): written at once, or, in a script that sets SUM_COUNTS,
-- summed and written once by flush_counts() before it returns (no script reads them back).
local SUM_COUNTS = false
local counts, count_names, host_counts, count_hosts = {}, {}, {}, {}
local function count(name, change)
  if not SUM_COUNTS then
    redis.call('HINCRBY', COUNTERS, name, int(change))
  elseif counts[name] then
    counts[name] = counts[name] + change
  else
    counts[name] = change
    count_names[#count_names + 1] = name
  end
end

local function host_waiting(host, change)
  if not SUM_COUNTS then
    if tonumber(redis.call('ZINCRBY', WAITING, int(change), host)) <= 0 then redis.call('ZREM', WAITING, host) end
  elseif host_counts[host] then
    host_counts[host] = host_counts[host] + change
  else
    host_counts[host] = change
    count_hosts[#count_hosts + 1] = host
  end
  count('waiting', change)
end

-- A sorted set score as ZADD takes it (whole numbers, the usual case, without a conversion).
local function score_arg(x)
  if x == math.floor(x) and x > -2 ^ 53 and x < 2 ^ 53 then return int(x) end
  return string.format('%.17g', x)
end

-- Hosts' waiting counts: one ZMSCORE, then one ZADD and one ZREM (what ZINCRBY and ZREM at zero did per host);
-- a single host's by ZINCRBY (and ZREM at zero).
local function flush_host_counts()
  local hosts = {}
  for _, host in ipairs(count_hosts) do
    if host_counts[host] ~= 0 then hosts[#hosts + 1] = host end
  end
  if #hosts == 0 then return end
  if #hosts == 1 then
    local host = hosts[1]
    if tonumber(redis.call('ZINCRBY', WAITING, int(host_counts[host]), host)) <= 0 then
      redis.call('ZREM', WAITING, host)
    end
    return
  end
  local scores, add, drop = read_many('ZMSCORE', WAITING, hosts), {}, {}
  for j, host in ipairs(hosts) do
    local score = scores[j]  -- (none: 0, without converting '0')
    if score then score = tonumber(score) else score = 0 end
    score = score + host_counts[host]
    if score <= 0 then
      drop[#drop + 1] = host
    else
      add[#add + 1] = score_arg(score)
      add[#add + 1] = host
    end
  end
  each_chunk('ZADD', WAITING, add)
  each_chunk('ZREM', WAITING, drop)
end

local function flush_counts()
  flush_host_counts()
  for _, name in ipairs(count_names) do
    if counts[name] ~= 0 then redis.call('HINCRBY', COUNTERS, name, int(counts[name])) end
  end
end

-- A host's politeness slot, read once per script: delay, concurrency, requests in flight, next allowed time, and
-- its own adaptive rule {factor, min delay, max delay} if its override has one ("delay concurrency [f min max]");
-- the delay is the larger of the configured one and the robots.txt Crawl-delay (both kept, for hosts.lua).
local slots = {}
-- Requests in flight per host are written at once, or, in a script that sets BATCH_INFLIGHT, kept in the slots
-- (busy_known: hosts whose slot count is to be written) or as changes of hosts not read (busy_change), and
-- written by flush_inflight() in one HMGET (for those changes), one HSET and one HDEL.
local BATCH_INFLIGHT = false
local busy_change, busy_known, busy_hosts = {}, {}, {}
local function busy_touched(host)
  if not busy_known[host] and not busy_change[host] then busy_hosts[#busy_hosts + 1] = host end
end

-- A field's count of requests in flight, with the changes this script made before reading it (BATCH_INFLIGHT).
local function read_busy(field)
  local busy = redis.call('HGET', INFLIGHT, field)  -- (none: 0, without converting '0')
  if busy then busy = tonumber(busy) else busy = 0 end
  if busy_change[field] then  -- released before this read: the slot keeps the count from now on
    busy = busy + busy_change[field]
    busy_change[field] = nil
    busy_known[field] = true
  end
  return busy
end

-- Per-IP politeness ([fetch] politeness = "ip"): a host told its address (GROUP) shares one next-allowed time and
-- one count of requests in flight with the other hosts of that address, the group's slot "@address" in NEXT,
-- INFLIGHT and READY (slots["@address"]: busy, next, cap: the highest concurrency of its hosts seen here); the host's
-- own count and next time are kept too (a host that moves takes its count along).  Its domains wait their turn in
-- the group's ring (RING .. address: domain -> time of its last turn, 0 before one), parked in READY at +inf.
-- Only scripts that set GROUPS (pop.lua, group.lua: the node's option) read a host's group for its slot; a lease
-- taken then is marked 'g' (holds a slot, per address), and its release frees its host's group of that moment.
local GROUPS = false
local RING  -- P .. 'ring:'
local groups_of = {}  -- host -> its address, or false (read once per call)
local function group_of(host)
  local g = groups_of[host]
  if g == nil then
    g = filled(GROUP) and redis.call('HGET', GROUP, host) or false
    groups_of[host] = g
  end
  return g
end

local function group_slot(address)
  local key = '@' .. address
  local g = slots[key]
  if not g then
    g = {host = key, address = address, ring = RING .. address, cap = 0, busy = read_busy(key),
         next = tonumber(filled(NEXT) and redis.call('ZSCORE', NEXT, key) or '0')}
    slots[key] = g
  end
  return g
end

-- The slot whose next time and requests in flight gate a host: its group's, if it has one (GROUPS), else its own.
local function gate(s)
  return s.g or s
end

local function slot(host)
  local s = slots[host]
  if s then return s end
  local delay, conc, adaptive = DELAY, CONC, nil
  if nonempty[CONF] == nil and nonempty[ROBOTS] == nil then ask_filled(CONF, ROBOTS) end
  local override = filled(CONF) and redis.call('HGET', CONF, host)
  if override then
    local f = {}
    for word in string.gmatch(override, '%S+') do f[#f + 1] = tonumber(word) end
    delay, conc = f[1], f[2]
    if f[5] then adaptive = {f[3], f[4], f[5]} end
  end
  local configured, robots = delay, filled(ROBOTS) and redis.call('HGET', ROBOTS, host)
  if robots then robots = tonumber(robots) else robots = 0 end  -- (none: 0, without converting '0')
  delay = math.max(delay, robots)
  local next_t = filled(NEXT) and redis.call('ZSCORE', NEXT, host)
  if next_t then next_t = tonumber(next_t) else next_t = 0 end
  s = {host = host, delay = delay, conc = conc, busy = read_busy(host), next = next_t, adaptive = adaptive,
       configured = configured, crawl_delay = robots}
  slots[host] = s
  local address = GROUPS and group_of(host)
  if address then
    s.g = group_slot(address)
    s.g.cap = math.max(s.g.cap, conc)
  end
  return s
end

-- Hold a host (and, if grouped, its group) until at least time t: its next-allowed time in NEXT.
local function hold(host, t, grouped)
  redis.call('ZADD', NEXT, 'GT', score_arg(t), host)
  fill(NEXT)
  if slots[host] then slots[host].next = math.max(slots[host].next, t) end
  local address = grouped and group_of(host)
  if address then
    local key = '@' .. address
    redis.call('ZADD', NEXT, 'GT', score_arg(t), key)
    if slots[key] then slots[key].next = math.max(slots[key].next, t) end
  end
end

-- URLs are pushed onto a queue at once, or, in a script that sets BATCH_PUSHES, in one RPUSH per queue before
-- the queue is read or changed otherwise, and by flush_pushes() before the script returns.
local BATCH_PUSHES = false
local pushes, pushed = {}, {}
local function push(q, url)
  if not BATCH_PUSHES then
    redis.call('RPUSH', q, url)
  elseif pushes[q] then
    pushes[q][#pushes[q] + 1] = url
  else
    pushes[q] = {url}
    pushed[#pushed + 1] = q
  end
end

local function flush_push(q)
  local urls = pushes[q]
  if urls and #urls > 0 then
    each_chunk('RPUSH', q, urls)
    pushes[q] = {}
  end
end

local function flush_pushes()
  for _, q in ipairs(pushed) do flush_push(q) end
end

-- The first URLs of each queue as this script read them (LRANGE), v[1..#v] (the first read's reply table itself):
-- v[v.at] is its head, the ones before it are taken (pop) but not yet trimmed off (trim); v.whole: the queue ends
-- after them.  Reads skip what is known.
local views = {}
local function peek(q, want)
  if BATCH_PUSHES then flush_push(q) end  -- (pushes are kept only then)
  local v = views[q]
  if not v then
    v = redis.call('LRANGE', q, '0', dec(want - 1))
    v.at, v.whole = 1, #v < want
    views[q] = v
    return v[1] or false
  end
  local at = v.at
  local url = v[at]  -- (no holes: nil when at is past the end)
  if url or v.whole then return url or false end
  local n = #v
  local read = redis.call('LRANGE', q, dec(n), dec(n + want - 1))
  for i = 1, #read do v[n + i] = read[i] end
  v.whole = #read < want
  return v[at] or false
end

-- Take a queue's head (just peeked) off; trim() removes what was taken from Redis (and the view).
local taken_from = {}  -- queues whose heads were taken
local function take_head(q)
  local v = views[q]
  if v.at == 1 then taken_from[#taken_from + 1] = q end
  v.at = v.at + 1
end

-- (its view is dropped, not kept for later reads, which read the queue again)
local function trim(q)
  local v = views[q]
  if v and v.at > 1 then
    redis.call('LTRIM', q, dec(v.at - 1), '-1')
    views[q] = nil
  end
end

-- (a pop's last step)
local function trim_taken()
  for _, q in ipairs(taken_from) do trim(q) end
end

local function head(domain)
  for prio = 0, 1 do
    local url = peek(queue(domain, prio), 1)
    if url then return prio, url end
  end
  return nil, nil
end

-- Score a domain by the time its head URL's host may go, or take it out of the ready set (empty, or that host
-- is full).  It stays in spider.website.domains: seed 002's tools register a domain once and push to it later.
local ready = {}  -- domain -> whether it is in READY, as this script last read or wrote it
-- A script that sets BATCH_READY (pop) keeps requeue's scores {score, domain, ...} for one ZADD, written by
-- flush_ready() before any other command on READY and before the script returns.
local BATCH_READY = false
local ready_adds = {}
local function flush_ready()
  if #ready_adds > 0 then
    each_chunk('ZADD', READY, ready_adds)
    ready_adds = {}
  end
end

-- Score a group in READY by its next time, or take it out: its ring is empty, or its requests in flight fill it
-- (the release of one of them puts it back: wake_group).
local function queue_group(g, empty)
  flush_ready()
  if empty or (g.cap > 0 and g.busy >= g.cap) then
    redis.call('ZREM', READY, g.host)
  else
    redis.call('ZADD', READY, g.next <= NOW and NOW_S or score_arg(g.next), g.host)
  end
end

local function wake_group(address)
  if redis.call('EXISTS', RING .. address) == 1 then
    flush_ready()
    redis.call('ZADD', READY, 'NX', NOW_S, '@' .. address)
  end
end

-- A domain whose head host is of a group waits for the group's turn in its ring (a newcomer first, else in its
-- place), parked in READY at +inf (so wake leaves it there).
local function park(domain, g)
  flush_ready()
  redis.call('ZADD', READY, '+inf', domain)
  ready[domain] = true
  redis.call('ZADD', g.ring, 'NX', '0', domain)
  queue_group(g, false)
end

-- Domains taking turns ([pool] max_active_hosts; Heritrix's active queues).  With P meta's turn_limit above 0
-- (each node writes its own at its start: all should share it), a domain with waiting URLs that is not in turn
-- waits on the bench (P bench: domain -> the time it came; ZADD NX keeps its place) instead of the ready set,
-- until a pop finds no domain in the ready set that may go now: then benched domains enter, the longest waiting
-- first, while fewer than the limit are in turn (P turns: domain -> its URLs handed out by pop whose status has
-- not come).  A domain keeps its turn until it has nothing waiting and no such URL: its turn ends at the status
-- (or the lease's end) that leaves it so, or when a requeue finds it empty with none.  A domain whose head host is
-- in a per-IP group waits in its group's ring (a pop of the group hands it out), never on the bench.
-- One table (Lua 5.1's limit of 200 locals): key, bench_key (the key names); limit (nil: P meta not read yet);
-- state (domain -> its count, or false: not in turn; as this call read or changed it); changed (domains to write
-- back, dirty[domain] set); bench_adds ({time, domain, ...} to bench, benched[domain] set); count (domains in turn,
-- once room() asked: nil before).
local TURNS = {state = {}, dirty = {}, changed = {}, benched = {}, bench_adds = {}}

function TURNS.on()
  local limit = TURNS.limit
  if limit == nil then
    limit = tonumber(redis.call('HGET', META, 'turn_limit') or '0')
    TURNS.limit = limit
  end
  return limit > 0
end

-- A domain's count of URLs handed out in its turn, or false (not in turn): read once per call.
function TURNS.of(domain)
  local c = TURNS.state[domain]
  if c == nil then
    c = redis.call('HGET', TURNS.key, domain)
    if c then c = tonumber(c) end
    TURNS.state[domain] = c
  end
  return c
end

-- The states of several domains in one HMGET (groups, "@address", are not domains: left out).
function TURNS.prefetch(domains)
  local state, ask = TURNS.state, {}
  for _, domain in ipairs(domains) do
    if state[domain] == nil and string.byte(domain) ~= 64 then ask[#ask + 1] = domain end
  end
  if #ask == 0 then return end
  local got = read_many('HMGET', TURNS.key, ask)
  for j, domain in ipairs(ask) do
    local c = got[j]
    if c then c = tonumber(c) end
    state[domain] = c
  end
end

function TURNS.mark(domain, value)
  TURNS.state[domain] = value
  if not TURNS.dirty[domain] then
    TURNS.dirty[domain] = true
    TURNS.changed[#TURNS.changed + 1] = domain
  end
end

-- A domain in turn (as read) took n URLs: n more statuses to come.
function TURNS.taken(domain, n)
  local c = TURNS.state[domain]
  if c then TURNS.mark(domain, c + n) end
end

-- The lease of a URL a pop handed out ended (its status came, or it expired): one status fewer to come.
function TURNS.settled(domain)
  if not TURNS.on() then return end
  local c = TURNS.of(domain)
  if c then TURNS.mark(domain, c > 0 and c - 1 or 0) end
end

function TURNS.admit(domain)
  TURNS.mark(domain, 0)
  if TURNS.count then TURNS.count = TURNS.count + 1 end
end

function TURNS.finish(domain)
  TURNS.mark(domain, false)
  if TURNS.count then TURNS.count = TURNS.count - 1 end
end

-- Out of the ready set (unless known not in it), onto the bench (once a call).
function TURNS.wait(domain)
  if ready[domain] ~= false then
    flush_ready()
    redis.call('ZREM', READY, domain)
    ready[domain] = false
  end
  if not TURNS.benched[domain] then
    TURNS.benched[domain] = true
    local adds = TURNS.bench_adds
    adds[#adds + 1] = NOW_S
    adds[#adds + 1] = domain
  end
end

function TURNS.flush_bench()
  local adds = TURNS.bench_adds
  if #adds == 0 then return end
  for i = 1, #adds, 1000 do redis.call('ZADD', TURNS.bench_key, 'NX', unpack(adds, i, math.min(i + 999, #adds))) end
  TURNS.bench_adds = {}
end

-- Whether a domain has a waiting URL: its queues as this call read them, else whether they exist (one EXISTS).
function TURNS.waiting(domain)
  local q0, q1 = queue(domain, 0), queue(domain, 1)
  if BATCH_PUSHES or views[q0] or views[q1] then return head(domain) ~= nil end
  return redis.call('EXISTS', q0, q1) > 0
end

-- Write the changed counts (a domain left with none to come and nothing waiting: its turn ends) and the bench.
function TURNS.flush()
  TURNS.flush_bench()
  local changed = TURNS.changed
  if #changed == 0 then return end
  local state, set, drop = TURNS.state, {}, {}
  for _, domain in ipairs(changed) do
    local c = state[domain]
    if c == 0 and not TURNS.waiting(domain) then
      c = false
      state[domain] = false
      if TURNS.count then TURNS.count = TURNS.count - 1 end
    end
    if c then
      set[#set + 1] = domain
      set[#set + 1] = dec(c)
    else
      drop[#drop + 1] = domain
    end
  end
  each_chunk('HSET', TURNS.key, set)
  each_chunk('HDEL', TURNS.key, drop)
  TURNS.changed, TURNS.dirty = {}, {}
end

-- Places left for benched domains to enter (counted once a call, after writing what changed).
function TURNS.room()
  if TURNS.count == nil then
    TURNS.flush()
    TURNS.count = redis.call('HLEN', TURNS.key)
  end
  return TURNS.limit - TURNS.count
end

function TURNS.reset()
  TURNS.limit, TURNS.count = nil, nil
  if next(TURNS.state) ~= nil then TURNS.state = {} end
  if #TURNS.changed > 0 then TURNS.changed, TURNS.dirty = {}, {} end
  if #TURNS.bench_adds > 0 then TURNS.bench_adds = {} end
  if next(TURNS.benched) ~= nil then TURNS.benched = {} end
end

-- Whether a domain with waiting URLs waits on the bench (turns are limited and it has none).
function TURNS.out(domain)
  return TURNS.on() and TURNS.of(domain) == false
end

-- Queue a domain: in the ready set at the time its head URL's host may go (parked in its group's ring), out of it
-- (empty, or that host is full; an empty domain with no status to come ends its turn), or on the bench (not in
-- turn, see TURNS).
local function requeue(domain)
  local _, url = head(domain)
  if not url then
    flush_ready()
    redis.call('ZREM', READY, domain)
    ready[domain] = false
    if TURNS.on() and TURNS.of(domain) == 0 then TURNS.finish(domain) end
    return
  end
  if not GROUPS and TURNS.out(domain) then return TURNS.wait(domain) end
  local s = slot(host_of(url))
  if s.g then
    park(domain, s.g)
  elseif GROUPS and TURNS.out(domain) then
    TURNS.wait(domain)
  elseif s.busy >= s.conc then
    flush_ready()
    redis.call('ZREM', READY, domain)
    ready[domain] = false
  else
    local score = s.next <= NOW and NOW_S or score_arg(s.next)
    if BATCH_READY then
      ready_adds[#ready_adds + 1] = score
      ready_adds[#ready_adds + 1] = domain
    else
      redis.call('ZADD', READY, score, domain)
    end
    ready[domain] = true
  end
end

-- Requeue a domain that is not in the ready set (a ready one keeps its place; pop checks it anyway).
local function wake(domain)
  local in_ready = ready[domain]
  if in_ready == nil then
    flush_ready()
    in_ready = redis.call('ZRANK', READY, domain) ~= false
    ready[domain] = in_ready
  end
  if not in_ready then requeue(domain) end
end

-- A field's count of requests in flight goes down by one (its slot's other fields are not read for that).
local function free(field)
  if not BATCH_INFLIGHT then
    local busy = redis.call('HINCRBY', INFLIGHT, field, '-1')
    if slots[field] then slots[field].busy = busy end
    if busy <= 0 then redis.call('HDEL', INFLIGHT, field) end
  elseif slots[field] then
    busy_touched(field)
    busy_known[field] = true
    slots[field].busy = slots[field].busy - 1
  else
    busy_touched(field)
    busy_change[field] = (busy_change[field] or 0) - 1
  end
end

-- A host slot freed (grouped: a lease marked 'g', whose host's group of now is freed too and woken).
local function release(host, domain, grouped)
  free(host)
  local address = grouped and group_of(host)
  if address then
    free('@' .. address)
    wake_group(address)
  end
  wake(domain)
end

local function take_slot(s, taken)
  if BATCH_INFLIGHT then
    busy_touched(s.host)
    busy_known[s.host] = true
    s.busy = s.busy + taken
  else
    s.busy = redis.call('HINCRBY', INFLIGHT, s.host, int(taken))
  end
end

local function occupy(s, taken)
  take_slot(s, taken)
  if s.g then take_slot(s.g, taken) end
  if s.delay > 0 then hold(s.host, NOW + s.delay, s.g ~= nil) end
end

local function flush_inflight()
  local asked = {}
  for _, host in ipairs(busy_hosts) do
    if busy_change[host] then asked[#asked + 1] = host end
  end
  local now_busy = busy_change  -- (none asked: not read)
  if #asked > 0 then
    local values = read_many('HMGET', INFLIGHT, asked)
    now_busy = {}
    for j, host in ipairs(asked) do
      local busy = values[j]
      if busy then busy = tonumber(busy) else busy = 0 end
      now_busy[host] = busy + busy_change[host]
    end
  end
  local set, drop = {}, {}
  for _, host in ipairs(busy_hosts) do
    local busy = busy_known[host] and slots[host].busy or now_busy[host]
    if busy <= 0 then
      drop[#drop + 1] = host
    else
      set[#set + 1] = host
      set[#set + 1] = int(busy)
    end
  end
  each_chunk('HSET', INFLIGHT, set)
  each_chunk('HDEL', INFLIGHT, drop)
end

local registered = {}  -- domains this script put in spider.website.domains
-- Queue a URL (member: its waiting member in its seen bucket); its domain is registered and woken at once, or,
-- given `later` (a list; later[domain] marks a domain listed), listed there once for the caller to register and
-- wake after all its pushes (add.lua).
local function enqueue_member(url, host, domain, prio, bucket, member, later)
  redis.call('SADD', bucket, member)
  local q = queue(domain, prio)
  push(q, url)
  local v = views[q]
  if v and v.whole then v[#v + 1] = url end
  host_waiting(host, 1)
  if later then
    if not later[domain] then
      later[domain] = true
      later[#later + 1] = domain
    end
    return
  end
  if not registered[domain] then
    redis.call('SADD', DOMAINS, domain)
    registered[domain] = true
  end
  wake(domain)
end

local function enqueue(url, host, domain, prio, bucket, ms)
  enqueue_member(url, host, domain, prio, bucket, ms[WAITING_LIST + prio])
end

-- Take a waiting URL out of its queue (claim, or a status for a URL that was never handed out).
local function unqueue(url, host, domain, bucket, ms, code)
  local prio = code - WAITING_LIST
  redis.call('SREM', bucket, ms[code])
  local q = queue(domain, prio)
  flush_push(q)
  trim(q)
  views[q] = nil
  redis.call('LREM', q, '1', url)
  host_waiting(host, -1)
  requeue(domain)  -- its head may have changed
  return prio
end

-- Leases are written at once, or, in a script that sets BATCH_LEASES, by flush_leases() in one HSET and one ZADD
-- (leasing: the fingerprints leased meanwhile).
local BATCH_LEASES = false
local lease_fields, lease_scores, leasing = {}, {}, {}
local function lease(fp, rec, deadline)
  if not BATCH_LEASES then
    redis.call('HSET', LEASE, fp, rec)
    redis.call('ZADD', LEASES, deadline, fp)
    return
  end
  lease_fields[#lease_fields + 1] = fp
  lease_fields[#lease_fields + 1] = rec
  lease_scores[#lease_scores + 1] = deadline
  lease_scores[#lease_scores + 1] = fp
  leasing[fp] = true
end

local function flush_leases()
  each_chunk('HSET', LEASE, lease_fields)
  each_chunk('ZADD', LEASES, lease_scores)
end

-- Drop a lease or hub hold (its record rec, just read), freeing its host slot if it still holds one; returns the
-- record.  A script that sets BATCH_ENDS drops the records in one HDEL and one ZREM by flush_ends() (ended: the
-- keys dropped meanwhile, no longer leased for this script).
local BATCH_ENDS = false
local ended, ended_keys = {}, {}
local function close_lease(key, rec)
  if BATCH_ENDS then
    ended[key] = true
    ended_keys[#ended_keys + 1] = key
  else
    redis.call('HDEL', LEASE, key)
    redis.call('ZREM', LEASES, key)
  end
  local kind, holds, domain, url = parse_lease(rec)
  if holds == '1' or holds == 'g' then release(host_of(url), domain, holds == 'g') end
  if holds == 'c' then redis.call('HDEL', CLAIMS, key) end
  if kind ~= 'h' then
    count('pending', -1)
    if holds ~= 'c' then TURNS.settled(domain) end
  end
  return kind, domain, url
end

local function end_lease(key)
  local rec = not ended[key] and redis.call('HGET', LEASE, key)
  if not rec then return nil end
  return close_lease(key, rec)
end

local function flush_ends()
  each_chunk('HDEL', LEASE, ended_keys)
  each_chunk('ZREM', LEASES, ended_keys)
end

-- The prio of a pending URL added again (always) while leased, forgetting that mark and its failures (it is a
-- new request); nil if it was not added again.
local function take_again(fp)
  local prio = filled(AGAIN) and redis.call('HGET', AGAIN, fp)
  if not prio then return nil end
  redis.call('HDEL', AGAIN, fp)
  redis.call('HDEL', FAILS, fp)
  return tonumber(prio)
end

-- The crawled set of a domain and kind (seed 004): URL -> fetch time.
local CRAWLED_KIND = {[0] = 'list', [1] = 'detail', [2] = 'batched'}  -- 2: detail pages sent in batches
local function crawled(prio, domain)
  return P .. 'crawled:' .. CRAWLED_KIND[prio] .. ':' .. domain
end

-- The linkbase bucket of a fingerprint: one hash per 12 top bits (4096 buckets).
local function link_bucket(fp)
  return P .. 'l:' .. dec(tonumber(string.sub(fp, 1, 3), 16))
end

-- The link-hop bucket of a fingerprint (max_hops): one hash per 12 top bits, fingerprint -> hops from a seed, for
-- waiting and leased URLs at 1 hop or more (add.lua writes it, status.lua drops it at a final status).
local function hops_bucket(fp)
  return P .. 'h:' .. dec(tonumber(string.sub(fp, 1, 3), 16))
end

-- Whether any hop count was ever kept (P meta's hops field, set by add.lua with the first one): until then a
-- final status deletes none (asked once per script).
local hops_marked, hops_ever = false, nil
local function mark_hops()
  if not hops_marked then
    redis.call('HSET', META, 'hops', '1')
    hops_marked, hops_ever = true, true
  end
end
local function hops_kept()
  if hops_ever == nil then hops_ever = redis.call('HEXISTS', META, 'hops') == 1 end
  return hops_ever
end

-- The validators bucket of a fingerprint (conditional GET): one hash per 12 top bits, fingerprint -> "seconds etag".
local function validators_bucket(fp)
  return P .. 'v:' .. dec(tonumber(string.sub(fp, 1, 3), 16))
end

-- A call's per-call state above emptied (begin() below: the flush_* helpers above, run at a script's end, leave
-- theirs as they are; apart from the key names, for Lua 5.1's limit of 60
-- upvalues a function).
-- A list and the tables filled only along with it are made again only if the last call added to the list (a
-- table made and collected at every call is dear); so are two tables seldom filled, if not empty.
local function reset()
  queues, hosts_of, nonempty, slots, views, ready = {[0] = {}, [1] = {}}, {}, {}, {}, {}, {}
  if #taken_from > 0 then taken_from = {} end
  if next(registered) ~= nil then registered = {} end
  SUM_COUNTS, BATCH_INFLIGHT, BATCH_PUSHES, BATCH_LEASES, BATCH_ENDS = false, false, false, false, false
  BATCH_READY = false
  if #ready_adds > 0 then ready_adds = {} end
  if #count_names > 0 then counts, count_names = {}, {} end  -- counts[name] set with count_names' new name
  if #count_hosts > 0 then host_counts, count_hosts = {}, {} end  -- host_counts[host]: likewise
  if #busy_hosts > 0 then busy_change, busy_known, busy_hosts = {}, {}, {} end  -- (busy_touched first)
  if #pushed > 0 then pushes, pushed = {}, {} end
  if #lease_fields > 0 then lease_fields, lease_scores, leasing = {}, {}, {} end
  if #ended_keys > 0 then ended, ended_keys = {}, {} end
  hops_marked, hops_ever = false, nil
  GROUPS = false
  if next(groups_of) ~= nil then groups_of = {} end
  TURNS.reset()
end

-- The key names of a prefix and namespace (concatenations: made again only when a call's differ from the last
-- call's, on a server whose library serves one pool; a separate function for Lua 5.1's limit of 60 upvalues).
local NAMED_P, NAMED_NS = nil, nil
local function name_keys()
  if P == NAMED_P and NS == NAMED_NS then return end
  NAMED_P, NAMED_NS = P, NS
  READY, NEXT, INFLIGHT, WAITING = P .. 'ready', P .. 'next', P .. 'inflight', P .. 'waiting'
  CONF, ROBOTS, LEASES, LEASE = P .. 'conf', P .. 'robots', P .. 'leases', P .. 'lease'
  FAILS, HUBS, HUB, COUNTERS, META = P .. 'fails', P .. 'hubs', P .. 'hub', P .. 'counters', P .. 'meta'
  CLAIMS, CHECKPOINTS, HOSTS_SEEN, ADOPTING = P .. 'claims', P .. 'checkpoints', P .. 'hostseen', P .. 'adopting'
  AGAIN, WHY, THROTTLED, GROUP, RING = P .. 'again', P .. 'why', P .. 'throttled', P .. 'group', P .. 'ring:'
  DOMAINS = NS .. 'spider.website.domains'
  TURNS.key, TURNS.bench_key = P .. 'turns', P .. 'bench'
end

-- A call's start: its arguments (ARGV[1..6]: prefix, namespace, seen bucket bits, default delay, default
-- concurrency, now), key names, and the per-call state above emptied.  As a Redis function library (FUNCTION
-- LOAD, once per server) everything above is built once and begin() runs at every FCALL; as an EVAL script, the
-- whole prelude runs at every call.
local function bind()
  if not BOUND then
    redis, string, math, tonumber, ipairs, unpack, setmetatable, tostring, pairs, rawget, next = globals()
    BOUND = true
  end
end

-- A call's number argument ARGV[i], converted again only when its text differs from the last call's (most are
-- the same at every call; tonumber parses a string twice).
local arg_text, arg_number = {}, {}
local function arg(ARGV, i)
  local text = ARGV[i]
  if text ~= arg_text[i] then arg_text[i], arg_number[i] = text, tonumber(text) end
  return arg_number[i]
end

local function begin(ARGV)
  bind()
  P, NS, BITS = ARGV[1], ARGV[2], arg(ARGV, 3)
  DELAY, CONC, NOW_S = arg(ARGV, 4), arg(ARGV, 5), ARGV[6]
  NOW, SPLIT = tonumber(NOW_S), 2 ^ (32 - BITS)
  name_keys()
  reset()
end

-- The arguments of one of two scripts run in one call (link.py's PAIRS: the statuses waiting with a pop): the
-- common six, then the ARGV[7] arguments after it (which = 1: the first script's) or all after those (2).
local function split_call(ARGV, which)
  bind()
  local n = tonumber(ARGV[7])
  local from, to = 8, 7 + n
  if which == 2 then from, to = 8 + n, #ARGV end
  local args = {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]}
  for i = from, to do args[#args + 1] = ARGV[i] end
  return args
end
