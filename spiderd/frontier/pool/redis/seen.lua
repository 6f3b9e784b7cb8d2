-- seen_filter / seen_add.  ARGV[7]: mark (1: record the unseen ones as batched); then urls.
-- Returns 1 per URL never seen in any state, else 0.
local MARK = ARGV[7] == '1'
local out = {}
for i = 8, #ARGV do
  local fp, bucket, ms = locate(ARGV[i])
  local fresh = redis.call('HEXISTS', LEASE, fp) == 0 and not known(bucket, ms)
  if fresh and MARK then
    redis.call('SADD', bucket, ms[BATCHED])
    redis.call('HINCRBY', COUNTERS, 'batched', 1)
  end
  out[#out + 1] = fresh and 1 or 0
end
return out
