-- set_status, for one or more URLs: end each URL's lease (or take it out of its queue), then record done,
-- failed, or queue a retry.  ARGV[7]: failure threshold; then outcome (done, final or retry), url, host, domain,
-- the kinds kept in crawled sets for that domain ('0' list, '1' detail, '-' none), and the reason of a failure.
-- A done URL whose kind is known (it was leased or waiting; not a hub) and kept goes into its crawled set.
-- A leased URL added again (always) meanwhile is queued again instead, whatever the outcome.
-- A failure is kept as the URL's last one (WHY: "at failures reason") until the URL is done after it.
-- An entry whose outcome is 'checkpoint' records a count instead: name in the url's place, count in the host's.
-- Returns url, reason of each URL that failed for good (for the log).
local THRESHOLD = tonumber(ARGV[7])
local finals = {}

local function set_status(outcome, url, host, domain, kept, reason)
  local fp, bucket, base = locate(url)
  end_lease('h' .. fp)
  local prio, was_known = 0, true
  local kind = end_lease(fp)
  local again = kind and take_again(fp)
  if again then  -- added again while leased: this fetch's outcome makes way for a new one
    enqueue(url, host, domain, again, bucket, base)
    return
  elseif kind then
    prio = tonumber(kind)
  else
    local code = known(bucket, base)
    if code and code >= WAITING_LIST then
      prio = unqueue(url, host, domain, bucket, base, code)
    elseif code then
      return  -- already final
    else
      was_known = false
    end
  end
  local failures = tonumber(redis.call('HGET', FAILS, fp) or '0')
  if outcome ~= 'done' then
    redis.call('HSET', WHY, fp, NOW_S .. ' ' .. (failures + 1) .. ' ' .. reason)
  end
  if outcome == 'retry' and failures < THRESHOLD then
    redis.call('HSET', FAILS, fp, failures + 1)
    enqueue(url, host, domain, prio, bucket, base)
  else
    local code = outcome == 'done' and DONE or FAILED
    if failures > 0 then
      redis.call('HDEL', FAILS, fp)
      if code == DONE then redis.call('HDEL', WHY, fp) end
    end
    redis.call('SADD', bucket, member(base, code))
    redis.call('HINCRBY', COUNTERS, FINAL_NAME[code], 1)
    if code == DONE and was_known and string.find(kept, tostring(prio), 1, true) then
      redis.call('ZADD', crawled(prio, domain), NOW, url)
    end
    if code == FAILED then
      finals[#finals + 1] = url
      finals[#finals + 1] = reason
    end
  end
end

for i = 8, #ARGV, 6 do
  if ARGV[i] == 'checkpoint' then
    redis.call('HSET', CHECKPOINTS, ARGV[i + 1], ARGV[i + 2])
  else
    set_status(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5])
  end
end
return finals
