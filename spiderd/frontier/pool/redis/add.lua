-- add: queue URLs unless known (or, with always, unless waiting; a pending one is queued when its lease ends).
-- ARGV[7..9]: always (1/0), prio, new URLs a host may take in all (its budget: link traps); then url, host,
-- domain per URL.  Returns {added, host-full}.  Re-adds (always) do not count against the budget.
local ALWAYS, PRIO, MAX = ARGV[7] == '1', tonumber(ARGV[8]), tonumber(ARGV[9])
local LIMITED = MAX > 0  -- 0: no budget, so no hostseen read or write per URL
local added, full = 0, 0
SUM_COUNTS, BATCH_PUSHES = true, true
for i = 10, #ARGV, 3 do
  local url, host, domain = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local fp, bucket, base = locate(url)
  if redis.call('HEXISTS', LEASE, fp) == 1 then
    if ALWAYS then added = added + redis.call('HSETNX', AGAIN, fp, PRIO) end
  else
    local code = known(bucket, base)
    if not code or (ALWAYS and code < WAITING_LIST) then
      if not code and LIMITED and tonumber(redis.call('HGET', HOSTS_SEEN, host) or '0') >= MAX then
        full = full + 1
      else
        if not code and LIMITED then redis.call('HINCRBY', HOSTS_SEEN, host, '1') end
        if code then
          redis.call('SREM', bucket, member(base, code))
          count(FINAL_NAME[code], -1)
          if code == DONE then  -- out of its crawled set until done again
            redis.call('ZREM', crawled(0, domain), url)
            redis.call('ZREM', crawled(1, domain), url)
          end
        end
        if filled(FAILS) then redis.call('HDEL', FAILS, fp) end
        enqueue(url, host, domain, PRIO, bucket, base)
        added = added + 1
      end
    end
  end
end
flush_pushes()
flush_counts()
return {added, full}
