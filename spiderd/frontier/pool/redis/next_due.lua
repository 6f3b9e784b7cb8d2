-- next_due: the earliest of a domain's (or group's) turn, a hub's due time, a lease's end and an adoption's deadline
-- (a time, or nil); domains parked in a group's ring (+inf) wait for their group's turn.
local best
for _, key in ipairs({READY, HUBS, LEASES, ADOPTING}) do
  local first = redis.call('ZRANGEBYSCORE', key, '-inf', '(+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] and (not best or tonumber(first[2]) < best) then best = tonumber(first[2]) end
end
if best then return string.format('%.17g', best) end
return false
