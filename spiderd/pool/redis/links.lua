-- add_links: the linkbase (seed 004), URL fingerprint -> "url \n parent \n anchor", first discovery kept.
-- ARGV[7..8]: the most entries (0: no limit), parent; then url, anchor per link.  Returns the number recorded.
local MAX, PARENT = tonumber(ARGV[7]), ARGV[8]
local count = tonumber(redis.call('HGET', COUNTERS, 'links') or '0')
local added = 0
for i = 9, #ARGV, 2 do
  if MAX > 0 and count + added >= MAX then break end
  local fp = string.sub(redis.sha1hex(ARGV[i]), 1, 16)
  added = added + redis.call('HSETNX', link_bucket(fp), fp, ARGV[i] .. '\n' .. PARENT .. '\n' .. ARGV[i + 1])
end
if added > 0 then redis.call('HINCRBY', COUNTERS, 'links', added) end
return added
