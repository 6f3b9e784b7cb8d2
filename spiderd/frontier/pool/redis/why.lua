-- why: a URL's state, its host's slot, its linkbase entry, its last failure and its validators.  ARGV[7..8]: url, host.
local url, host = ARGV[7], ARGV[8]
local fp, bucket, ms = locate(url)
local state, kind, lease_until = 'unknown', '', ''
if redis.call('HEXISTS', LEASE, fp) == 1 then
  state, kind = 'pending', string.sub(redis.call('HGET', LEASE, fp), 1, 1)
  lease_until = redis.call('ZSCORE', LEASES, fp)
else
  local code = known(bucket, ms)
  if code and code >= WAITING_LIST then
    state, kind = 'waiting', tostring(code - WAITING_LIST)
  elseif code then
    state = FINAL_NAME[code]
  end
end
local s = slot(host)
return {state, kind, lease_until, redis.call('HGET', FAILS, fp) or '0', redis.call('HEXISTS', HUB, fp),
  redis.call('ZSCORE', WAITING, host) or '0', tostring(s.busy), string.format('%.17g', s.delay),
  string.format('%.17g', s.next), redis.call('HGET', link_bucket(fp), fp) or '', redis.call('HEXISTS', AGAIN, fp),
  redis.call('HGET', WHY, fp) or '', redis.call('HGET', validators_bucket(fp), fp) or ''}
