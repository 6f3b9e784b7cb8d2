-- set_status, for one or more URLs: end each URL's lease (or take it out of its queue), then record done,
-- failed, or queue a retry.  ARGV[7]: failure threshold, ARGV[8]: max throttles; then outcome (done, final or retry), url, host, domain,
-- the kinds kept in crawled sets for that domain ('0' list, '1' detail, '-' none), the reason of a failure, and
-- the fetch's validators ("seconds etag"; '' none; '~' leave those kept alone: conditional GET is off), and the
-- URL's fingerprint, seen bucket and member for state 1 (done) in it (computed by the node: keys.py).
-- A done URL whose kind is known (it was leased or waiting; not a hub) and kept goes into its crawled set.
-- A leased URL added again (always) meanwhile is queued again instead, whatever the outcome.
-- A failure is kept as the URL's last one (WHY: "at failures reason") until the URL is done after it.
-- An entry whose outcome is 'checkpoint' records a count instead: name in the url's place, count in the host's.
-- An outcome 'throttle <outcome> <block_end>' (a 429 or 503: throttle) blocks the host in NEXT until then (a later
-- block wins; THROTTLED keeps it for hosts.lua) and queues the URL again without a failure, up to ARGV[8] throttles of it (THROTTLES counts them);
-- past them it is recorded as <outcome>.  A done or final URL drops its count.
-- Validators are kept (VALIDATORS) only for hubs and the kinds kept in crawled sets: a done URL of those keeps the
-- ones given (none given: drops them), a final one drops them; a hub is done again at every hand-out.
-- An entry whose outcome is 'fetched' (RedisPool.fetched) frees the host slot of a handed-out URL or hub, its lease
-- staying: url, the fetch's duration in seconds ('' if not known), the node's adaptive rule (factor, min delay, max
-- delay) for hosts whose override in CONF has none, '', then the fingerprint.  With a factor above 0, the host's next
-- allowed time becomes at least now + factor x duration, within the bounds (only ever later); a lease marked 'g'
-- (per-IP politeness) frees and paces the host's group too.  These entries are applied before the statuses: a
-- URL's fetched is given before its status, and a batch never spans a pop or claim.
-- Returns url, reason of each URL that failed for good (for the log).
-- The definitions below are built once (the library's load); a call's arguments and state are set below them.
local THRESHOLD, MAX_THROTTLES, finals
local THROTTLES  -- fingerprint -> throttled fetches of an active URL

-- Block host (and its group, per-IP politeness) until the time given; true if the URL's throttle is still within
-- MAX_THROTTLES (counted).
local function throttled(fp, host, block_end)
  hold(host, block_end, true)
  redis.call('ZREMRANGEBYSCORE', THROTTLED, '-inf', NOW_S)
  redis.call('ZADD', THROTTLED, 'GT', score_arg(block_end), host)
  if tonumber(filled(THROTTLES) and redis.call('HGET', THROTTLES, fp) or '0') >= MAX_THROTTLES then return false end
  redis.call('HINCRBY', THROTTLES, fp, '1')
  fill(THROTTLES)
  return true
end

-- Keep a done URL's validators (or drop them: none given, or a final failure: done false).
local function keep_validators(fp, done, validators)
  if validators == '~' then return end
  if done and validators ~= '' then
    redis.call('HSET', validators_bucket(fp), fp, validators)
  else
    redis.call('HDEL', validators_bucket(fp), fp)
  end
end

-- done_m: the URL's done member in its bucket (its members table, ms, is made only where other members are needed)
local function set_status(outcome, url, host, domain, kept, reason, validators, fp, bucket, done_m, hub_key, hub_rec,
                          rec)
  hosts_of[url] = host  -- (a lease record's URL is this one: its host is not parsed again)
  local hub = hub_rec and not ended[hub_key] and close_lease(hub_key, hub_rec) ~= nil
  local prio, was_known = 0, true
  local kind = rec and not ended[fp] and close_lease(fp, rec)
  local again = kind and take_again(fp)
  if again then  -- added again while leased: this fetch's outcome makes way for a new one
    if outcome == 'done' and (hub or string.find(kept, kind, 1, true)) then keep_validators(fp, true, validators) end
    enqueue(url, host, domain, again, bucket, setmetatable({done_m}, MEMBERS))
    return
  elseif kind then
    prio = tonumber(kind)
  else
    local ms = setmetatable({done_m}, MEMBERS)
    local code = known(bucket, ms)
    if code and code >= WAITING_LIST then
      prio = unqueue(url, host, domain, bucket, ms, code)
    elseif code then
      if outcome ~= 'retry' and validators ~= '~' and (hub or redis.call('HEXISTS', HUB, fp) == 1) then
        keep_validators(fp, outcome == 'done', validators)  -- a hub: done again at every hand-out
      end
      return  -- already final
    else
      was_known = false
    end
  end
  local failures = filled(FAILS) and redis.call('HGET', FAILS, fp)
  if failures then failures = tonumber(failures) else failures = 0 end  -- (none: 0, without converting '0')
  local fallback, block_end
  if outcome ~= 'done' then fallback, block_end = string.match(outcome, '^throttle (%S+) (%S+)$') end
  if fallback then
    if throttled(fp, host, tonumber(block_end)) then
      redis.call('HSET', WHY, fp, NOW_S .. ' ' .. int(failures) .. ' ' .. reason)
      enqueue(url, host, domain, prio, bucket, setmetatable({done_m}, MEMBERS))
      return
    end
    outcome = fallback
  end
  if outcome ~= 'done' then
    redis.call('HSET', WHY, fp, NOW_S .. ' ' .. int(failures + 1) .. ' ' .. reason)
  end
  if outcome == 'retry' and failures < THRESHOLD then
    redis.call('HSET', FAILS, fp, int(failures + 1))
    fill(FAILS)
    enqueue(url, host, domain, prio, bucket, setmetatable({done_m}, MEMBERS))
  else
    local code = outcome == 'done' and DONE or FAILED
    if filled(THROTTLES) then redis.call('HDEL', THROTTLES, fp) end
    if hops_kept() then redis.call('HDEL', hops_bucket(fp), fp) end
    if failures > 0 then
      redis.call('HDEL', FAILS, fp)
      if code == DONE then redis.call('HDEL', WHY, fp) end
    end
    redis.call('SADD', bucket, code == DONE and done_m or setmetatable({done_m}, MEMBERS)[code])
    count(FINAL_NAME[code], 1)
    local in_set = was_known and string.find(kept, D1[prio], 1, true)
    if code == DONE and in_set then
      redis.call('ZADD', crawled(prio, domain), NOW_S, url)
    end
    if hub or in_set then keep_validators(fp, code == DONE, validators) end
    if code == FAILED then
      finals[#finals + 1] = url
      finals[#finals + 1] = reason
    end
  end
end

-- Pace a host (and its group: grouped, a lease marked 'g') by a fetch's duration (a 'fetched' entry's; rule: the
-- node's default adaptive rule, unless the host's override in CONF has its own: read only if CONF holds any).
local function pace(host, elapsed, rule, grouped)
  if not elapsed then return end
  if filled(CONF) then rule = slot(host).adaptive or rule end
  if rule[1] <= 0 then return end
  local wait = math.min(rule[3], math.max(rule[2], rule[1] * math.max(0, elapsed)))
  if wait > 0 then hold(host, NOW + wait, grouped) end
end

-- The 'fetched' entries: every one's hub hold and lease records in one HMGET, the records that still hold a slot
-- rewritten (holds 0) in one HSET.
-- The node's adaptive rule of the 'fetched' entry at i, as numbers (made again only when its words differ from
-- the last entry's: one node gives every entry the same).
local rule_words, rule
local function rule_of(ARGV, i)
  if ARGV[i + 3] ~= rule_words[1] or ARGV[i + 4] ~= rule_words[2] or ARGV[i + 5] ~= rule_words[3] then
    rule_words = {ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]}
    rule = {tonumber(rule_words[1]), tonumber(rule_words[2]), tonumber(rule_words[3])}
  end
  return rule
end

-- domains: the statuses' domains, whose turns (limited: TURNS) are read with those of the 'fetched' entries' in
-- one HMGET before any is freed.
local function free_slots(ARGV, domains)
  local keys, at = {}, {}
  for i = 9, #ARGV, 10 do
    if ARGV[i] == 'fetched' then
      keys[#keys + 1] = 'h' .. ARGV[i + 7]
      keys[#keys + 1] = ARGV[i + 7]
      at[#at + 1] = i
    end
  end
  local recs = #keys > 0 and read_many('HMGET', LEASE, keys) or {}
  if TURNS.on() then
    for k = 1, #keys do
      if recs[k] then domains[#domains + 1] = string.match(recs[k], '^.. (%S+)') end
    end
    TURNS.prefetch(domains)
  end
  if #keys == 0 then return end
  local freed, fields = {}, {}
  for n, i in ipairs(at) do
    for k = 2 * n - 1, 2 * n do
      local rec, key = recs[k], keys[k]
      if rec and not freed[key] then
        local kind, holds, domain, url = parse_lease(rec)
        if holds == '1' or holds == 'g' then
          freed[key] = true
          fields[#fields + 1] = key
          fields[#fields + 1] = kind .. '0 ' .. domain .. ' ' .. url
          local host, grouped = host_of(url), holds == 'g'
          pace(host, tonumber(ARGV[i + 2]), rule_of(ARGV, i), grouped)
          release(host, domain, grouped)
          break
        end
      end
    end
  end
  each_chunk('HSET', LEASE, fields)
end

-- (per call)
THRESHOLD, MAX_THROTTLES, THROTTLES = tonumber(ARGV[7]), tonumber(ARGV[8]), P .. 'throttles'
finals, rule_words, rule = {}, {}, nil
SUM_COUNTS, BATCH_ENDS, BATCH_INFLIGHT = true, true, true
local domains = {}
for i = 9, #ARGV, 10 do
  if ARGV[i] ~= 'checkpoint' and ARGV[i] ~= 'fetched' then domains[#domains + 1] = ARGV[i + 3] end
end
free_slots(ARGV, domains)

-- Every URL's hub hold and lease records, read in one HMGET before any is ended (a later entry for the same URL
-- then finds it in ended, as a read after the first one's HDEL would find nothing).
local lease_keys = {}
for i = 9, #ARGV, 10 do
  if ARGV[i] ~= 'checkpoint' and ARGV[i] ~= 'fetched' then
    lease_keys[#lease_keys + 1] = 'h' .. ARGV[i + 7]
    lease_keys[#lease_keys + 1] = ARGV[i + 7]
  end
end
local recs = read_many('HMGET', LEASE, lease_keys)

local n = 0
for i = 9, #ARGV, 10 do
  if ARGV[i] == 'checkpoint' then
    redis.call('HSET', CHECKPOINTS, ARGV[i + 1], ARGV[i + 2])
  elseif ARGV[i] ~= 'fetched' then
    n = n + 2
    set_status(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7],
      ARGV[i + 8], ARGV[i + 9], lease_keys[n - 1],
      recs[n - 1], recs[n])
  end
end
flush_ends()
TURNS.flush()
flush_inflight()
flush_counts()
return finals
