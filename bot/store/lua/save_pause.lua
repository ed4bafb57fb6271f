-- Record that a run paused on new tool approvals: store the snapshot and one record per call.
-- Only the process that owns the run's current execution may do this (owner-checked).
-- The whole task (kept apart while it was longer than the run shows) is dropped: the snapshot
-- holds it from now on.
-- KEYS[1] run hash, KEYS[2] snapshot hash, KEYS[3] pause set, KEYS[4] whole task, KEYS[5] outbox,
-- KEYS[6..] the new call hashes
-- ARGV[1] owner token, ARGV[2] now, ARGV[3] retention seconds, ARGV[4] state blob,
-- ARGV[5] sdk version, ARGV[6] fingerprint, ARGV[7..] one JSON object of fields per call key
local run = KEYS[1]
if redis.call('HGET', run, 'owner') ~= ARGV[1] then
  -- the same save, retried after a lost reply, has nothing left to do
  local first = cjson.decode(ARGV[7] or '{}')['approval_id']
  if redis.call('HGET', run, 'status') == 'paused' and first
     and redis.call('SISMEMBER', KEYS[3], first) == 1 then
    return {'ok', tonumber(redis.call('HGET', run, 'pause'))}
  end
  return {'not_owner'}
end
local status = redis.call('HGET', run, 'status')
if status ~= 'running' and status ~= 'resuming' then
  return {'bad_status', status or ''}
end
local pause = redis.call('HINCRBY', run, 'pause', 1)
local ncalls = #KEYS - 5
redis.call('HSET', KEYS[2], 'state', ARGV[4], 'sdk_version', ARGV[5], 'fingerprint', ARGV[6])
redis.call('DEL', KEYS[3])
for i = 1, ncalls do
  local key = KEYS[5 + i]
  local fields = cjson.decode(ARGV[6 + i])
  fields['pause'] = tostring(pause)
  fields['status'] = 'pending'
  for name, value in pairs(fields) do
    redis.call('HSET', key, name, value)
  end
  redis.call('SADD', KEYS[3], fields['approval_id'])
  redis.call('EXPIRE', key, ARGV[3])
  mark(KEYS[5], 'card:' .. fields['approval_id'], ARGV[2], ARGV[3])
end
redis.call('DEL', KEYS[4])
mark(KEYS[5], 'run', ARGV[2], ARGV[3])
redis.call('HSET', run, 'status', 'paused', 'undecided', ncalls, 'owner', '', 'updated_at', ARGV[2])
for i = 1, 3 do
  redis.call('EXPIRE', KEYS[i], ARGV[3])
end
return {'ok', pause}
