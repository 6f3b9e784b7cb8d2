-- fetched: free the host slot of a handed-out URL or hub; its lease stays until set_status.  ARGV[7]: url;
-- ARGV[8]: the fetch's duration in seconds ('' if not known); ARGV[9..11]: the node's adaptive rule (factor,
-- min delay, max delay), for hosts whose override in CONF has none.  With a factor above 0, the host's next
-- allowed time becomes at least now + factor x duration, within the bounds (only ever later: the configured
-- delay and Crawl-delay stay lower bounds); a lease marked 'g' (per-IP politeness) paces the host's group too.
local ELAPSED = tonumber(ARGV[8])
local DEFAULT_RULE = {tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])}

local function pace(host, grouped)
  if not ELAPSED then return end
  local rule = slot(host).adaptive or DEFAULT_RULE
  if rule[1] <= 0 then return end
  local wait = math.min(rule[3], math.max(rule[2], rule[1] * math.max(0, ELAPSED)))
  if wait > 0 then hold(host, NOW + wait, grouped) end
end

local fp = locate(ARGV[7])
for _, key in ipairs({'h' .. fp, fp}) do
  local rec = redis.call('HGET', LEASE, key)
  if rec then
    local kind, holds, domain, url = parse_lease(rec)
    if holds == '1' or holds == 'g' then
      redis.call('HSET', LEASE, key, kind .. '0 ' .. domain .. ' ' .. url)
      pace(host_of(url), holds == 'g')
      release(host_of(url), domain, holds == 'g')
      return 1
    end
  end
end
return 0
