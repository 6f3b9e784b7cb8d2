-- set_seeds: add to the seed-002 seed set (tools add to it too; nothing is deleted).  ARGV[7..]: canonical URLs.
-- Returns the size of the set.
local key = NS .. 'spider.seed.urls'
for i = 7, #ARGV do
  redis.call('SADD', key, ARGV[i])
end
return redis.call('SCARD', key)
