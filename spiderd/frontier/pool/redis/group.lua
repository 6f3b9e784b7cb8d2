-- group: put a host in a politeness group (per-IP politeness: its address) or on its own again (''), with its
-- requests in flight: its old group's count goes down by them and the new one's up, the new group's next time is
-- at least the host's, a host leaving keeps its old group's; its domain is queued again (parked in its new group's
-- ring, or on its own) and its old group woken.  ARGV[7..9]: host, address ('' none), the host's domain.
GROUPS = true
local host, to, domain = ARGV[7], ARGV[8], ARGV[9]
local from = redis.call('HGET', GROUP, host) or ''
if from == to then return 0 end
if to == '' then redis.call('HDEL', GROUP, host) else redis.call('HSET', GROUP, host, to) end
local own = tonumber(redis.call('HGET', INFLIGHT, host) or '0')
local own_next = redis.call('ZSCORE', NEXT, host)
if from ~= '' then
  if own > 0 and redis.call('HINCRBY', INFLIGHT, '@' .. from, -own) <= 0 then redis.call('HDEL', INFLIGHT, '@' .. from) end
  redis.call('ZREM', RING .. from, domain)
  local until_ = redis.call('ZSCORE', NEXT, '@' .. from)
  if to == '' and until_ then hold(host, tonumber(until_), false) end
  wake_group(from)
end
if to ~= '' then
  if own > 0 then redis.call('HINCRBY', INFLIGHT, '@' .. to, own) end
  if own_next then hold('@' .. to, tonumber(own_next), false) end
end
requeue(domain)
TURNS.flush()
return 1
