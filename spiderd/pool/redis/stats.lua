-- stats: the counters, hosts with waiting URLs, the largest host and the number of hubs.
local top = redis.call('ZREVRANGE', WAITING, 0, 0, 'WITHSCORES')
return {redis.call('HGETALL', COUNTERS), redis.call('ZCARD', WAITING), top[1] or '', top[2] or '0', redis.call('HLEN', HUB)}
