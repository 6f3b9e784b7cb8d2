-- stats: the counters, hosts with waiting URLs, the five largest hosts (host, count, ...), the number of hubs, and
-- the domains in turn with P meta's turn_limit (see TURNS: 0, no limit).
-- (Hosts have counts above 0: the member at 0 that keeps WAITING a skiplist is not one, see keys.py.)
return {redis.call('HGETALL', COUNTERS), redis.call('ZCOUNT', WAITING, '(0', '+inf'),
  redis.call('ZREVRANGEBYSCORE', WAITING, '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, 5), redis.call('HLEN', HUB),
  redis.call('HLEN', TURNS.key), redis.call('HGET', META, 'turn_limit') or '0'}
