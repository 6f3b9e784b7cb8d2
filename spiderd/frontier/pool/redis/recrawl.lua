-- recrawl: queue again, as add with always, pages of crawled sets fetched at or before a cut-off time.
-- ARGV[7]: limit; then domain, prio, cut-off per set.  Entries whose URL is not done any more are dropped.
-- Returns the number queued.
local left = tonumber(ARGV[7])
local queued = 0
for i = 8, #ARGV, 3 do
  if left <= 0 then break end
  local domain, prio = ARGV[i], tonumber(ARGV[i + 1])
  local key = crawled(prio, domain)
  for _, url in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', ARGV[i + 2], 'LIMIT', 0, left)) do
    redis.call('ZREM', key, url)
    local fp, bucket, ms = locate(url)
    if redis.call('HEXISTS', LEASE, fp) == 0 and known(bucket, ms) == DONE then
      redis.call('SREM', bucket, ms[DONE])
      redis.call('HINCRBY', COUNTERS, 'done', -1)
      enqueue(url, host_of(url), domain, prio, bucket, ms)
      queued = queued + 1
      left = left - 1
    end
  end
end
TURNS.flush()
return queued
