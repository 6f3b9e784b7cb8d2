-- add_links: the linkbase (seed 004), URL fingerprint -> "url \n parent \n anchor \n xpath" (spiderd.frontier.pool.crawled's
-- link_value), first discovery kept.  ARGV[7]: the most entries (0: no limit); then url, entry per link.
-- Returns the number recorded.
local MAX = tonumber(ARGV[7])
local count = tonumber(redis.call('HGET', COUNTERS, 'links') or '0')
local added = 0
for i = 8, #ARGV, 2 do
  if MAX > 0 and count + added >= MAX then break end
  local fp = string.sub(redis.sha1hex(ARGV[i]), 1, 16)
  added = added + redis.call('HSETNX', link_bucket(fp), fp, ARGV[i + 1])
end
if added > 0 then redis.call('HINCRBY', COUNTERS, 'links', added) end
return added
