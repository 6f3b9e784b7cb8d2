-- stats: the counters, hosts with waiting URLs, the five largest hosts (host, count, ...) and the number of hubs.
-- (Hosts have counts above 0: the member at 0 that keeps WAITING a skiplist is not one, see keys.py.)
return {redis.call('HGETALL', COUNTERS), redis.call('ZCOUNT', WAITING, '(0', '+inf'),
  redis.call('ZREVRANGEBYSCORE', WAITING, '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, 5), redis.call('HLEN', HUB)}
