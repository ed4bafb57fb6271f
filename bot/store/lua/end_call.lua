-- After a tool ran: the call is executed, with its output kept for a retried attempt.
-- KEYS[1] journal hash, KEYS[2] run hash; ARGV[1] call id, ARGV[2] attempt token, ARGV[3]
-- output, ARGV[4] now
-- Reply: 1 when the attempt still owns the run (so the engine's check before its next model
-- call need not ask), 0 when not, or when the entry is not this attempt's executing one.
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then
  return 0
end
local data = cjson.decode(entry)
if data['owner'] ~= ARGV[2] or data['status'] ~= 'executing' then
  return 0
end
data['status'] = 'executed'
data['output'] = ARGV[3]
data['finished_at'] = ARGV[4]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(data))
if redis.call('HGET', KEYS[2], 'owner') ~= ARGV[2] then
  return 0
end
return 1
