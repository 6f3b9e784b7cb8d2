-- hosts: the hosts an operator looks at first.  ARGV[7]: how many of each kind: those blocked by a throttling
-- answer now (the latest block end first), then those with the most waiting URLs.  Per host, as text: host,
-- waiting, in flight, concurrency, configured delay, Crawl-delay, next allowed time, block end ('' if none) and
-- the factor of its own adaptive rule ('' if it has none).  Reads only: O(ARGV[7]) hosts.
local LIMIT = tonumber(ARGV[7])
local out, seen = {}, {}
local function num(x) return string.format('%.17g', x) end
local function describe(host)
  if seen[host] then return end
  seen[host] = true
  local s = slot(host)
  out[#out + 1] = host
  out[#out + 1] = redis.call('ZSCORE', WAITING, host) or '0'
  out[#out + 1] = num(s.busy)
  out[#out + 1] = num(s.conc)
  out[#out + 1] = num(s.configured)
  out[#out + 1] = num(s.crawl_delay)
  out[#out + 1] = num(s.next)
  out[#out + 1] = redis.call('ZSCORE', THROTTLED, host) or ''
  out[#out + 1] = s.adaptive and num(s.adaptive[1]) or ''
end
for _, host in ipairs(redis.call('ZREVRANGEBYSCORE', THROTTLED, '+inf', '(' .. NOW_S, 'LIMIT', 0, LIMIT)) do
  describe(host)
end
for _, host in ipairs(redis.call('ZREVRANGEBYSCORE', WAITING, '+inf', '(0', 'LIMIT', 0, LIMIT)) do describe(host) end
return out
