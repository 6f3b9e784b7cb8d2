-- add: queue URLs unless known (or, with always, unless waiting; a pending one is queued when its lease ends).
-- ARGV[7..9]: always (1/0), prio, new URLs a host may take in all (its budget: link traps); ARGV[10]: the
-- fingerprint of the page the URLs were found on ('' none: seeds, hubs, the API), whose hop count + 1 is theirs
-- when a hop limit is set; then url, host, domain, hop limit (0 none), fingerprint, seen bucket and its five
-- members in the bucket (state codes 1-5) per URL (the node computes the last seven: keys.py).  Returns {added,
-- host-full, past the hop limit, the pool's epoch, {positions (1-based) of the URLs refused as host-full or past the
-- hop limit}}.  Re-adds (always) do not count against the budget.
local ALWAYS, PRIO, MAX = ARGV[7] == '1', tonumber(ARGV[8]), tonumber(ARGV[9])
local LIMITED = MAX > 0  -- 0: no budget, so no hostseen read or write per URL
local HOPS = 0  -- the URLs' hops from a seed: kept (hops_bucket) only when 1 or more
if ARGV[10] ~= '' then
  local parent = ARGV[10]
  HOPS = tonumber(redis.call('HGET', hops_bucket(parent), parent) or '0') + 1
end
local added, full, far, refused = 0, 0, 0, {}
SUM_COUNTS, BATCH_PUSHES = true, true
local fps = {}
for i = 15, #ARGV, 11 do fps[#fps + 1] = ARGV[i] end
local leased = read_many('HMGET', LEASE, fps)  -- every URL's lease, read at once
local n = 0
local to_wake = {}  -- the call's domains, registered and woken once after its pushes (enqueue_member's later)
for i = 11, #ARGV, 11 do
  n = n + 1
  local url, host, domain, hop_limit = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local fp, bucket = ARGV[i + 4], ARGV[i + 5]  -- the member of state code c: ARGV[i + 5 + c] (no table per URL)
  if leased[n] then
    if ALWAYS then added = added + redis.call('HSETNX', AGAIN, fp, PRIO) end
  else
    local found, code = redis.call('SMISMEMBER', bucket, ARGV[i + 6], ARGV[i + 7], ARGV[i + 8], ARGV[i + 9],
                                   ARGV[i + 10]), nil  -- known(), inline
    for c = 1, 5 do
      if found[c] == 1 then
        code = c
        break
      end
    end
    if not code or (ALWAYS and code < WAITING_LIST) then
      if not code and hop_limit > 0 and HOPS > hop_limit then
        far = far + 1
        refused[#refused + 1] = n
      elseif not code and LIMITED and tonumber(redis.call('HGET', HOSTS_SEEN, host) or '0') >= MAX then
        full = full + 1
        refused[#refused + 1] = n
      else
        if not code and LIMITED then redis.call('HINCRBY', HOSTS_SEEN, host, '1') end
        if code then
          redis.call('SREM', bucket, ARGV[i + 5 + code])
          count(FINAL_NAME[code], -1)
          if code == DONE then  -- out of its crawled set until done again
            redis.call('ZREM', crawled(0, domain), url)
            redis.call('ZREM', crawled(1, domain), url)
          elseif code == BATCHED then
            redis.call('ZREM', crawled(2, domain), url)
          end
        end
        if filled(FAILS) then redis.call('HDEL', FAILS, fp) end
        enqueue_member(url, host, domain, PRIO, bucket, ARGV[i + 5 + WAITING_LIST + PRIO], to_wake)
        if HOPS > 0 then
          redis.call('HSET', hops_bucket(fp), fp, int(HOPS))
          mark_hops()
        end
        added = added + 1
      end
    end
  end
end
if #to_wake > 0 then  -- one SADD of the new domains, one ZMSCORE of their ready states, one ZADD of the woken
  local new, ask = {}, {}
  for _, domain in ipairs(to_wake) do
    if not registered[domain] then
      registered[domain] = true
      new[#new + 1] = domain
    end
    if ready[domain] == nil then ask[#ask + 1] = domain end
  end
  each_chunk('SADD', DOMAINS, new)
  if #ask > 0 then
    local scores = read_many('ZMSCORE', READY, ask)
    for j, domain in ipairs(ask) do ready[domain] = scores[j] ~= false end
  end
  local woken = {}
  for _, domain in ipairs(to_wake) do
    if not ready[domain] then woken[#woken + 1] = domain end
  end
  BATCH_READY = true
  if #woken > 0 and TURNS.on() then TURNS.prefetch(woken) end  -- (one HMGET: those not in turn wait on the bench)
  for _, domain in ipairs(woken) do requeue(domain) end
  flush_ready()
end
TURNS.flush()
flush_pushes()
flush_counts()
return {added, full, far, epoch(), refused}
