-- Renew (or acknowledge) a job only while this consumer still holds it: a worker whose lease
-- lapsed, and whose job another worker took over, must neither steal it back nor ack it.
-- KEYS[1] job stream; ARGV[1] group, ARGV[2] consumer, ARGV[3] message id, ARGV[4] renew|ack
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #pending == 0 or pending[1][2] ~= ARGV[2] then
  return 0
end
if ARGV[4] == 'ack' then
  return redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
