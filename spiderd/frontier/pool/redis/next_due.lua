-- next_due: the earliest of a domain's turn, a hub's due time, a lease's end and an adoption's deadline (a time,
-- or nil).
local best
for _, key in ipairs({READY, HUBS, LEASES, ADOPTING}) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] and (not best or tonumber(first[2]) < best) then best = tonumber(first[2]) end
end
if best then return string.format('%.17g', best) end
return false
