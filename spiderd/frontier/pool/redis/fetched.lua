-- fetched: free the host slot of a handed-out URL or hub; its lease stays until set_status.  ARGV[7]: url.
local fp = locate(ARGV[7])
for _, key in ipairs({'h' .. fp, fp}) do
  local rec = redis.call('HGET', LEASE, key)
  if rec then
    local kind, holds, domain, url = parse_lease(rec)
    if holds == '1' then
      redis.call('HSET', LEASE, key, kind .. '0 ' .. domain .. ' ' .. url)
      release(host_of(url), domain)
      return 1
    end
  end
end
return 0
