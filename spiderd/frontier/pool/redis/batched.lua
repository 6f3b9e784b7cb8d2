-- batched: the crawled sets of the detail pages sent in batches (seed 004's mod_detail where workers fetch them),
-- P crawled:batched:<domain>, URL -> its last known fetch time (a worker's, or when it was sent).  Only a URL whose
-- state is batched is kept there.  ARGV[7]: what to do;
--   'mark': URLs just recorded as batched (url, domain each) go in their domain's set, scored now; returns 0;
--   'take': ARGV[8] the most to take, then domain, cut-off each: the URLs scored at or before the cut-off, oldest
--           first, each scored now; returns {url, score, validators ('' none), ...};
--   'fetched': url, domain, fetch time, validators ('' none: drops those kept; '~' leaves them) each: a URL in
--           its set is scored at the fetch time; returns the number recorded.
local MODE = ARGV[7]
if MODE == 'mark' then
  for i = 8, #ARGV, 2 do
    redis.call('ZADD', crawled(2, ARGV[i + 1]), 'NX', NOW_S, ARGV[i])
  end
  return 0
end
if MODE == 'take' then
  local left, out = tonumber(ARGV[8]), {}
  for i = 9, #ARGV, 2 do
    if left <= 0 then break end
    local key = crawled(2, ARGV[i])
    local found = redis.call('ZRANGEBYSCORE', key, '-inf', ARGV[i + 1], 'WITHSCORES', 'LIMIT', 0, left)
    for j = 1, #found, 2 do
      local url = found[j]
      local fp, bucket, ms = locate(url)
      if known(bucket, ms) == BATCHED then
        redis.call('ZADD', key, NOW_S, url)
        out[#out + 1] = url
        out[#out + 1] = found[j + 1]
        out[#out + 1] = redis.call('HGET', validators_bucket(fp), fp) or ''
        left = left - 1
      else
        redis.call('ZREM', key, url)  -- queued again, or fetched here since: not a batched page any more
      end
    end
  end
  return out
end
local recorded = 0
for i = 8, #ARGV, 4 do
  local url, key, validators = ARGV[i], crawled(2, ARGV[i + 1]), ARGV[i + 3]
  if redis.call('ZSCORE', key, url) then
    redis.call('ZADD', key, ARGV[i + 2], url)
    if validators ~= '~' then
      local fp = string.sub(redis.sha1hex(url), 1, 16)
      if validators ~= '' then
        redis.call('HSET', validators_bucket(fp), fp, validators)
      else
        redis.call('HDEL', validators_bucket(fp), fp)
      end
    end
    recorded = recorded + 1
  end
end
return recorded
