-- claim: lease a waiting or unknown URL (a redirect target) without taking a host slot.
-- ARGV[7..11]: lease deadline, url, host, domain, the claiming URL ('' for none).  Returns 1 if leased.
-- A claim that the same claiming URL holds already is renewed: that URL's processing died, its next fetch
-- takes the target again.  A claim's lease record says 'c' where others say whether they hold a host slot.
local url, host, domain, by = ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local deadline = tonumber(ARGV[7])
local fp, bucket, ms = locate(url)
local owner = nil
if by ~= '' then owner = locate(by) end
local rec = redis.call('HGET', LEASE, fp)
if rec then
  local _, holds = parse_lease(rec)
  if holds ~= 'c' or not owner or redis.call('HGET', CLAIMS, fp) ~= owner then return 0 end
  redis.call('ZADD', LEASES, deadline, fp)
  return 1
end
local prio, code = 0, known(bucket, ms)
if code and code >= WAITING_LIST then
  prio = unqueue(url, host, domain, bucket, ms, code)
elseif code then
  return 0
end
lease(fp, prio .. 'c ' .. domain .. ' ' .. url, deadline)
if owner then redis.call('HSET', CLAIMS, fp, owner) end
redis.call('HINCRBY', COUNTERS, 'pending', '1')
TURNS.flush()
return 1
