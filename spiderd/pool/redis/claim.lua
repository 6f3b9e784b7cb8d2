-- claim: lease a waiting or unknown URL (a redirect target) without taking a host slot.
-- ARGV[7..10]: lease deadline, url, host, domain.  Returns 1 if leased.
local url, host, domain = ARGV[8], ARGV[9], ARGV[10]
local fp, bucket, base = locate(url)
if redis.call('HEXISTS', LEASE, fp) == 1 then return 0 end
local prio, code = 0, known(bucket, base)
if code and code >= WAITING_LIST then
  prio = unqueue(url, host, domain, bucket, base, code)
elseif code then
  return 0
end
lease(fp, prio .. '0 ' .. domain .. ' ' .. url, tonumber(ARGV[7]))
redis.call('HINCRBY', COUNTERS, 'pending', 1)
return 1
