-- pop: expire due leases, sweep the registered domains, hand out due hubs, then waiting URLs, one domain turn
-- at a time.  ARGV[7..9]: lease deadline, count, hubs wanted; ARGV[10..14]: list and detail ratios, their credits
-- (seed 004's get_list and get_detail, see spiderd/frontier/pool/split.py) and RESERVE_SCAN; ARGV[15..16]: seconds
-- between domain sweeps, domains per sweep step; ARGV[17]: '1' to hand out each URL's validators (conditional GET),
-- 'h' to hand out those of hubs only (no recrawled kind is kept: a queued URL has some only if it is a hub too,
-- so they are read only while any hub exists), '0' none; ARGV[18]: '1' to group hosts by address (per-IP politeness:
-- GROUPS in common.lua, the ready set then holds groups too, "@address", whose domains take turns in their ring).
-- With turns limited (TURNS in common.lua), the domains of the ready set are those in turn, and benched ones enter
-- when none of them may go now (admit).
-- Returns {url, is_hub, validators, url, is_hub, validators, ...} (validators '' where none are kept, or not
-- asked for), {url, prio, ...} of list entries the pool did not queue (to add), and {waiting URLs wanted, list
-- URLs leased, detail URLs leased}.
-- The definitions below are built once (the library's load); a call's arguments and state are set by setup().
local COUNT, HUBS_WANTED, RATIO0, RATIO1, CREDIT0, CREDIT1, RESERVE_SCAN, SWEEP_EVERY, SWEEP_COUNT
local CONDITIONAL, CONDITIONAL_QUEUED, leased_kind, out, foreign, DEADLINE_S, HELD, KIND_HELD
local HUB_SPAN  -- P meta's hub_span (read by sweep)
-- (numbers given to redis.call as strings: Redis formats a Lua number with %.17g at every call; the batches of
-- expired leases, due hubs and adopted entries, 1000 each, are written as literals: Lua 5.1's limit of 200 locals)
-- a lease record's start: kind, holds a host slot (per address, GROUPS: released by its group of then)
local KIND_HELD_OF = {[false] = {[0] = '01 ', [1] = '11 '}, [true] = {[0] = '0g ', [1] = '1g '}}

local function setup(ARGV)
  COUNT, HUBS_WANTED = arg(ARGV, 8), arg(ARGV, 9)
  RATIO0, RATIO1, CREDIT0, CREDIT1 = arg(ARGV, 10), arg(ARGV, 11), arg(ARGV, 12), arg(ARGV, 13)
  RESERVE_SCAN = arg(ARGV, 14)
  SWEEP_EVERY, SWEEP_COUNT = arg(ARGV, 15), ARGV[16]
  CONDITIONAL = ARGV[17] ~= '0'
  if ARGV[17] == 'h' then ask_filled(HUB, NEXT) end
  CONDITIONAL_QUEUED = ARGV[17] == '1' or (CONDITIONAL and filled(HUB))
  leased_kind = {[0] = 0, [1] = 0}
  out, foreign = {}, {}
  SUM_COUNTS, BATCH_LEASES, BATCH_INFLIGHT, BATCH_READY = true, true, true, true
  DEADLINE_S = ARGV[7]
  GROUPS = ARGV[18] == '1'
  HELD = GROUPS and 'g' or '1'
  KIND_HELD = KIND_HELD_OF[GROUPS]
end

-- Hand out a leased URL (is_hub 1 or 0) with its validators.
local function hand_out(url, fp, is_hub)
  out[#out + 1] = url
  out[#out + 1] = is_hub
  local look = is_hub == 1 and CONDITIONAL or is_hub == 0 and CONDITIONAL_QUEUED
  out[#out + 1] = look and (redis.call('HGET', validators_bucket(fp), fp) or '') or ''
end

-- Another tool's entry (not queued by the pool) for the node to add: held in ADOPTING until that node added it,
-- so a node dying in between loses nothing (the entry is handed to a pop again after the deadline).
local function adopt(url, prio)
  redis.call('ZADD', ADOPTING, DEADLINE_S, prio .. ' ' .. url)
  foreign[#foreign + 1] = url
  foreign[#foreign + 1] = prio
end

local function expire()
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', '(' .. NOW_S, 'LIMIT', '0', '1000')) do
    local kind, domain, url = end_lease(key)
    if not kind then
      redis.call('ZREM', LEASES, key)
    elseif kind ~= 'h' then
      local _, bucket, ms = locate(url)
      enqueue(url, host_of(url), domain, take_again(key) or tonumber(kind), bucket, ms)
    end
  end
  for _, entry in ipairs(redis.call('ZRANGEBYSCORE', ADOPTING, '-inf', '(' .. NOW_S, 'LIMIT', '0', '1000')) do
    local prio, url = string.match(entry, '^(%d) (.*)$')
    adopt(url, tonumber(prio))
  end
end

-- Wake the domains another tool registered: one SSCAN step of spider.website.domains per pop while a sweep is
-- under way (the cursor is shared by every node), a new sweep at most every SWEEP_EVERY seconds.  meta: the
-- call's read of P meta (sweep_cursor, sweep_due, hub_span: pop_hubs').  The step's domains in the ready set are
-- found in one ZMSCORE, and (turns limited) those on the bench in another, with their turns in one HMGET: only
-- the others are read further.
local function sweep(meta)
  HUB_SPAN = meta[3]
  local cursor = meta[1] or '0'
  if cursor == '0' then
    if NOW < tonumber(meta[2] or '0') then return end
    redis.call('HSET', META, 'sweep_due', string.format('%.17g', NOW + SWEEP_EVERY))
  end
  local answer = redis.call('SSCAN', DOMAINS, cursor, 'COUNT', SWEEP_COUNT)
  redis.call('HSET', META, 'sweep_cursor', answer[1])
  local found = answer[2]
  if #found == 0 then return end
  flush_ready()
  local scores, out = read_many('ZMSCORE', READY, found), {}
  for j, domain in ipairs(found) do
    ready[domain] = scores[j] ~= false
    if not scores[j] then out[#out + 1] = domain end
  end
  if #out > 0 and TURNS.on() then
    local benched = read_many('ZMSCORE', TURNS.bench_key, out)
    local rest = {}
    for j, domain in ipairs(out) do
      if benched[j] then TURNS.benched[domain] = true else rest[#rest + 1] = domain end
    end
    out = rest
    TURNS.prefetch(out)
  end
  for _, domain in ipairs(out) do requeue(domain) end
end


-- Hand out due hubs whose host may go now; each is due again a refresh span later.  A due hub that may not go is
-- due again when it may: at its host's next-allowed time (a delay, a throttling block), or HUB_RECHECK seconds on
-- while its host has no free slot or its previous hand-out still holds it (no node is told when those end), so a
-- waiting hub costs no pop until then, where the fetch loop popped again at once.
local HUB_RECHECK = 1
local function pop_hubs()
  if HUBS_WANTED <= 0 then return 0 end
  local span = tonumber(HUB_SPAN or '0')
  local taken = 0
  for _, fp in ipairs(redis.call('ZRANGEBYSCORE', HUBS, '-inf', NOW_S, 'LIMIT', '0', '1000')) do
    local rec = redis.call('HGET', HUB, fp)
    if not rec then
      redis.call('ZREM', HUBS, fp)
    elseif redis.call('HEXISTS', LEASE, 'h' .. fp) == 1 then  -- still held by an earlier hand-out
      redis.call('ZADD', HUBS, score_arg(NOW + HUB_RECHECK), fp)
    else
      local url = string.match(rec, '^%S+ (.*)$')
      local s = slot(host_of(url))
      if gate(s).busy >= s.conc then
        redis.call('ZADD', HUBS, score_arg(NOW + HUB_RECHECK), fp)
      elseif gate(s).next > NOW then
        redis.call('ZADD', HUBS, score_arg(gate(s).next), fp)
      else
        redis.call('ZADD', HUBS, score_arg(NOW + span), fp)
        occupy(s, 1)
        lease('h' .. fp, 'h' .. HELD .. ' ' .. rec, DEADLINE_S)
        hand_out(url, fp, 1)
        taken = taken + 1
        if taken >= HUBS_WANTED then break end
      end
    end
  end
  return taken
end

-- Lease a URL just taken from the head of a queue; nil for an entry the pool did not queue (dropped, or to add).
local function take(url, domain, prio)
  local fp, bucket, member, base = locate_member(url, WAITING_LIST + prio)
  local queued = redis.call('SREM', bucket, member)
  if queued == 0 then
    if not leasing[fp] and redis.call('HEXISTS', LEASE, fp) == 0
      and not known(bucket, setmetatable({base = base}, MEMBERS)) then
      adopt(url, prio)  -- pushed by another tool: the node adds it (canonical, deduplicated) as waiting
    end
    return nil
  end
  lease(fp, KIND_HELD[prio] .. domain .. ' ' .. url, DEADLINE_S)
  hand_out(url, fp, 0)
  return queued
end

-- The first queue of a domain, list URLs first, that holds URLs and whose cap is left: prio, head URL.
local function head_within(domain, caps, want)
  for prio = 0, 1 do
    if caps[prio] > 0 then
      local url = peek(queue(domain, prio), want)
      if url then return prio, url end
    end
  end
  return nil, nil
end

-- One turn of a domain: URLs of its head host, one unless that host has no delay and no other domain is ready,
-- at most caps[prio] of each kind (caps go down by what is taken). nil: the domain has none of those kinds.
-- The caller requeues a domain that took its turn (a number).  g: the group whose turn it is; a domain whose head
-- host is of a group (g nil) is parked in that group's ring, which takes the turn in its place.
local group_turn
local function turn(domain, caps, wanted, alone, g)
  local want = alone and wanted + 1 or 2  -- URLs read from a queue at once: its next heads too when alone
  local prio, url = head_within(domain, caps, want)
  if not url then
    if not head(domain) then requeue(domain) end  -- empty: it leaves the ready set
    return nil
  end
  local s = slot(host_of(url))
  local gs = gate(s)
  if s.g ~= g then
    if g then return 0 end
    requeue(domain)
    local n = group_turn(s.g.host, caps, wanted, alone)
    if n then queue_group(s.g, redis.call('EXISTS', s.g.ring) == 0) end
    return n
  end
  if gs.busy >= s.conc or gs.next > NOW then return 0 end
  local quota = math.min(s.conc - gs.busy, wanted)
  if s.delay > 0 or not alone then quota = math.min(quota, 1) end
  local taken = 0
  while taken < quota and prio <= 1 do
    local q = queue(domain, prio)
    url = caps[prio] > 0 and peek(q, want)
    if not url then
      prio = prio + 1
    elseif host_of(url) ~= s.host or #foreign >= 2000 then
      break
    else
      take_head(q)
      if take(url, domain, prio) then
        taken = taken + 1
        caps[prio] = caps[prio] - 1
        leased_kind[prio] = leased_kind[prio] + 1
      end
    end
  end
  if taken > 0 then
    occupy(s, taken)
    host_waiting(s.host, -taken)
    TURNS.taken(domain, taken)
  end
  return taken
end

-- A group's turn ("@address" in READY): the first domains of its ring (least recently served first) whose head host
-- is still of the group try in turn until one takes URLs, which goes to the ring's end; the others keep their
-- places, and those whose head host is of another group (or none) now, or that are empty, leave the ring.
function group_turn(member, caps, wanted, alone)
  local g = group_slot(string.sub(member, 2))
  if g.next > NOW then return 0 end
  local ring = redis.call('ZRANGE', g.ring, '0', '99')  -- (100 at most)
  local answer = nil
  for _, domain in ipairs(ring) do
    local _, url = head(domain)
    local s = url and slot(host_of(url))
    if not s or s.g ~= g then
      redis.call('ZREM', g.ring, domain)
      requeue(domain)  -- out of the ready set (empty), or where its head host waits now
    else
      local n = turn(domain, caps, wanted, alone and #ring == 1, g)
      if n and n > 0 then
        local _, next_url = head(domain)
        if next_url and slot(host_of(next_url)).g == g then
          redis.call('ZADD', g.ring, NOW_S, domain)
        else  -- drained (out of the ready set: an add wakes it), or its head host waits elsewhere now
          redis.call('ZREM', g.ring, domain)
          requeue(domain)
        end
        return n
      end
      answer = answer or n
    end
  end
  if answer == nil then queue_group(g, redis.call('EXISTS', g.ring) == 0) end  -- (the caller requeues a number)
  return answer
end

local function is_group(member)
  return string.byte(member) == 64  -- '@': a group (no domain name starts so)
end

-- Requeue a member of the ready set taken in turn: a domain, or a group (by its next time; out if its ring is
-- empty or it is full).
local function again(member)
  if not is_group(member) then return requeue(member) end
  local g = group_slot(string.sub(member, 2))
  queue_group(g, redis.call('EXISTS', g.ring) == 0)
end

-- Whether requeue would score a domain (or group) due now (its head's host is free and may go).
local function due(domain)
  if is_group(domain) then
    local g = group_slot(string.sub(domain, 2))
    return g.next <= NOW and (g.cap == 0 or g.busy < g.cap)
  end
  local _, url = head(domain)
  if not url then return false end
  local s = slot(host_of(url))
  return not s.g and s.busy < s.conc and s.next <= NOW
end

-- The domains of the ready set in turn (turns limited: see TURNS in common.lua); one that is not (queued before
-- the limit was set) goes onto the bench, behind those waiting.
local function in_turn(domains)
  if not TURNS.on() then return domains end
  TURNS.prefetch(domains)
  local kept, state = {}, TURNS.state
  for _, domain in ipairs(domains) do
    if state[domain] ~= false then  -- (a group's is nil)
      kept[#kept + 1] = domain
    else
      TURNS.wait(domain)
    end
  end
  return kept
end

-- Let up to `wanted` benched domains enter (the longest waiting first) while there is room; the number let in.
-- Each is queued (an empty one's turn ends at once).
local function admit(wanted)
  if not TURNS.on() then return 0 end
  local n = math.min(TURNS.room(), wanted)
  if n <= 0 then return 0 end
  TURNS.flush_bench()
  local popped = redis.call('ZPOPMIN', TURNS.bench_key, dec(n))
  for i = 1, #popped, 2 do TURNS.admit(popped[i]) end
  for i = 1, #popped, 2 do requeue(popped[i]) end
  return #popped / 2
end

-- Domains in turn give up to caps[prio] URLs of each kind, caps[0] + caps[1] in all when strict (a domain with
-- none of the kinds still wanted keeps its turn, up to RESERVE_SCAN of them), else caps[0] (= caps[1]) of any.
-- The only ready domain that took some and stays due takes the next turn without a new read of READY (it
-- would be the only one again), and is requeued once after its last turn (held).  When none may go, benched
-- domains enter (admit), up to 8 times a call.
local function pop_urls(caps, strict)
  local wanted = strict and caps[0] + caps[1] or caps[0]
  local leased, passed, skipped, rounds = 0, {}, 0, 0
  local domains, held = nil, nil
  local function settle()
    if held then again(held) end
    held = nil
  end
  while wanted > 0 do
    if not domains then
      settle()
      flush_ready()
      domains = in_turn(redis.call('ZRANGEBYSCORE', READY, '-inf', NOW_S, 'LIMIT', '0', dec(wanted + skipped)))
    end
    local got, passing, alone = 0, skipped, #domains == 1
    for _, domain in ipairs(domains) do
      if got >= wanted then break end
      if not passed[domain] then
        local n
        if is_group(domain) then n = group_turn(domain, caps, wanted - got, alone)
        else n = turn(domain, caps, wanted - got, alone) end
        if n then
          got = got + n
          if alone then held = domain else again(domain) end
        elseif strict then
          passed[domain], skipped = true, skipped + 1
        end
      end
    end
    if (got == 0 and skipped == passing) or skipped >= RESERVE_SCAN then
      if skipped >= RESERVE_SCAN or rounds >= 8 or admit(wanted) == 0 then break end
      rounds = rounds + 1
      domains = nil
    else
      wanted = wanted - got
      leased = leased + got
      if not (held and got > 0 and wanted > 0 and due(held)) then
        domains = nil
      end
    end
  end
  settle()
  return leased
end

-- Turns not limited (any more): the turns are forgotten and the bench goes into the ready set, 1000 a pop.
local function unbench()
  ask_filled(TURNS.key, TURNS.bench_key)
  if filled(TURNS.key) then redis.call('DEL', TURNS.key) end
  if not filled(TURNS.bench_key) then return end
  local popped = redis.call('ZPOPMIN', TURNS.bench_key, '1000')
  for i = 1, #popped, 2 do requeue(popped[i]) end
end

-- The URLs of each kind a pop of `wanted` reserves: KindSplit.reserve in spiderd/frontier/pool/split.py.
local NONE = {[0] = 0, [1] = 0}  -- (never changed: pop_urls is given no caps of 0)
local function reserve(wanted)
  if RATIO0 + RATIO1 <= 0 or wanted <= 0 then return NONE end
  local lists = math.min(wanted, math.floor(CREDIT0 + wanted * RATIO0 + 1e-9))
  return {[0] = lists, [1] = math.min(wanted - lists, math.floor(CREDIT1 + wanted * RATIO1 + 1e-9))}
end

-- (per call)
setup(ARGV)
local meta = redis.call('HMGET', META, 'sweep_cursor', 'sweep_due', 'hub_span', 'turn_limit')
TURNS.limit = tonumber(meta[4] or '0')
if TURNS.limit <= 0 then unbench() end
if filled(NEXT) then redis.call('ZREMRANGEBYSCORE', NEXT, '-inf', NOW_S) end
expire()
sweep(meta)
local wanted = COUNT - pop_hubs()
local reserved = reserve(wanted)
local leased = 0
if reserved[0] + reserved[1] > 0 then leased = pop_urls(reserved, true) end
leased = leased + pop_urls({[0] = wanted - leased, [1] = wanted - leased}, false)
if leased > 0 then count('pending', leased) end
trim_taken()
TURNS.flush()
flush_ready()
flush_leases()
flush_inflight()
flush_counts()
return {out, foreign, {wanted, leased_kind[0], leased_kind[1]}}
