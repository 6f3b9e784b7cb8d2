-- set_status, for one or more URLs: end each URL's lease (or take it out of its queue), then record done,
-- failed, or queue a retry.  ARGV[7]: failure threshold; then outcome (done, final or retry), url, host, domain.
local THRESHOLD = tonumber(ARGV[7])

local function set_status(outcome, url, host, domain)
  local fp, bucket, base = locate(url)
  end_lease('h' .. fp)
  local prio = 0
  local kind = end_lease(fp)
  if kind then
    prio = tonumber(kind)
  else
    local code = known(bucket, base)
    if code and code >= WAITING_LIST then
      prio = unqueue(url, host, domain, bucket, base, code)
    elseif code then
      return  -- already final
    end
  end
  local failures = tonumber(redis.call('HGET', FAILS, fp) or '0')
  if outcome == 'retry' and failures < THRESHOLD then
    redis.call('HSET', FAILS, fp, failures + 1)
    enqueue(url, host, domain, prio, bucket, base)
  else
    local code = outcome == 'done' and DONE or FAILED
    if failures > 0 then redis.call('HDEL', FAILS, fp) end
    redis.call('SADD', bucket, member(base, code))
    redis.call('HINCRBY', COUNTERS, FINAL_NAME[code], 1)
  end
end

for i = 8, #ARGV, 4 do
  set_status(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
end
return 0
