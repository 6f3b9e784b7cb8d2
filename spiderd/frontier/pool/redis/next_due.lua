-- next_due: the earliest of a domain's (or group's) turn, a hub's due time, a lease's end and an adoption's deadline
-- (a time, or nil); domains parked in a group's ring (+inf) wait for their group's turn.  Now, while a benched
-- domain could enter (fewer domains in turn than P meta's turn_limit, or no limit any more: see TURNS).
if redis.call('EXISTS', TURNS.bench_key) == 1 then
  local limit = tonumber(redis.call('HGET', META, 'turn_limit') or '0')
  if limit <= 0 or redis.call('HLEN', TURNS.key) < limit then return NOW_S end
end
local best
for _, key in ipairs({READY, HUBS, LEASES, ADOPTING}) do
  local first = redis.call('ZRANGEBYSCORE', key, '-inf', '(+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] and (not best or tonumber(first[2]) < best) then best = tonumber(first[2]) end
end
if best then return string.format('%.17g', best) end
return false
