-- set_seeds: replace the seed-002 seed set.  ARGV[7..]: canonical URLs.
local key = NS .. 'spider.seed.urls'
redis.call('DEL', key)
for i = 7, #ARGV do
  redis.call('SADD', key, ARGV[i])
end
return redis.call('SCARD', key)
