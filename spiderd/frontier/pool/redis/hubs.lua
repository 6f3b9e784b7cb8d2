-- set_hubs: replace the hub set; a new hub is due at once, a kept one keeps its due time (at most one span away).
-- ARGV[7]: refresh span; then url, domain per hub.
local SPAN = tonumber(ARGV[7])
redis.call('HSET', META, 'hub_span', ARGV[7])
local wanted = {}
for i = 8, #ARGV, 2 do
  wanted[locate(ARGV[i])] = ARGV[i + 1] .. ' ' .. ARGV[i]
end
for _, fp in ipairs(redis.call('HKEYS', HUB)) do
  if not wanted[fp] then
    redis.call('HDEL', HUB, fp)
    redis.call('ZREM', HUBS, fp)
    redis.call('HDEL', validators_bucket(fp), fp)  -- a page kept in a crawled set too is asked for in full once
  end
end
for fp, rec in pairs(wanted) do
  local due = redis.call('ZSCORE', HUBS, fp)
  if due then
    redis.call('ZADD', HUBS, math.min(tonumber(due), NOW + SPAN), fp)
  else
    redis.call('HSET', HUB, fp, rec)
    redis.call('ZADD', HUBS, 0, fp)
  end
end
return 0
