-- seen_filter / seen_add.  ARGV[7]: mark (1: record the unseen ones as batched); then per URL its fingerprint,
-- seen bucket and five members in the bucket (state codes 1-5), computed by the node (keys.py add_keys).
-- Returns 1 per URL never seen in any state (not leased, no state in its bucket), else 0, then the pool's epoch.
local MARK = ARGV[7] == '1'
SUM_COUNTS = true
local fps = {}
for i = 8, #ARGV, 7 do fps[#fps + 1] = ARGV[i] end
local leased = read_many('HMGET', LEASE, fps)  -- every URL's lease, read at once
local out, n = {}, 0
for i = 8, #ARGV, 7 do
  n = n + 1
  local fresh = 0
  if not leased[n] then
    local found = redis.call('SMISMEMBER', ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5],
                             ARGV[i + 6])
    if found[1] == 0 and found[2] == 0 and found[3] == 0 and found[4] == 0 and found[5] == 0 then
      fresh = 1
      if MARK then
        redis.call('SADD', ARGV[i + 1], ARGV[i + 1 + BATCHED])
        count('batched', 1)
      end
    end
  end
  out[n] = fresh
end
flush_counts()
out[n + 1] = epoch()
return out
