-- restore (an import): record finished fingerprints the pool has never seen.
-- ARGV[7..]: fingerprint (16 lower-case hex digits), state code (1 done, 2 failed, 3 batched).  Returns how many were new.
local restored = 0
for i = 7, #ARGV, 2 do
  local fp, bucket, ms = locate_fp(ARGV[i])
  local code = tonumber(ARGV[i + 1])
  if redis.call('HEXISTS', LEASE, fp) == 0 and not known(bucket, ms) then
    redis.call('SADD', bucket, ms[code])
    redis.call('HINCRBY', COUNTERS, FINAL_NAME[code], 1)
    restored = restored + 1
  end
end
return restored
