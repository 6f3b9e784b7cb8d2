-- stats: the counters, hosts with waiting URLs, the five largest hosts (host, count, ...) and the number of hubs.
return {redis.call('HGETALL', COUNTERS), redis.call('ZCARD', WAITING), redis.call('ZREVRANGE', WAITING, 0, 4, 'WITHSCORES'),
  redis.call('HLEN', HUB)}
