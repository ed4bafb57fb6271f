-- Record that a run paused on new tool approvals: store the snapshot and one record per call.
-- Only the process that owns the run's current execution may do this (owner-checked).
-- The task key (a task too long for the run hash; the snapshot refers to it) is kept as long
-- as the run. A call hash holds only the fields given (its record's non-default ones) plus
-- `status` and `pause`; its approval id is its key; arguments too long for it are in its
-- arguments key. The run hash's `calls` lists the pause's approval tokens in the SDK's order.
-- Keys of layout 1 (snapshot hash, pause set) go.
-- KEYS[1] run hash, KEYS[2] state string, KEYS[3] layout 1 snapshot hash, KEYS[4] task,
-- KEYS[5] outbox, KEYS[6] layout 1 pause set, KEYS[7..6+n] the new call hashes,
-- KEYS[7+n..6+2n] their arguments keys
-- ARGV[1] owner token, ARGV[2] now, ARGV[3] retention seconds, ARGV[4] snapshot string,
-- ARGV[5] the run id, ARGV[6] the pause's approval tokens (space-separated, as KEYS[7..]),
-- ARGV[7..6+n] one JSON object of fields per call key, ARGV[7+n..6+2n] per call its arguments
-- key's value ('' when the arguments are in the hash)
local run = KEYS[1]
local first_call = 7
if redis.call('HGET', run, 'owner') ~= ARGV[1] then
  -- the same save, retried after a lost reply, has nothing left to do
  if redis.call('HGET', run, 'status') == 'paused' and ARGV[6] ~= ''
     and redis.call('HGET', run, 'calls') == ARGV[6] then
    return {'ok', tonumber(redis.call('HGET', run, 'pause'))}
  end
  return {'not_owner'}
end
local status = redis.call('HGET', run, 'status')
if status ~= 'running' and status ~= 'resuming' then
  return {'bad_status', status or ''}
end
local pause = redis.call('HINCRBY', run, 'pause', 1)
local ncalls = (#KEYS - first_call + 1) / 2
redis.call('SET', KEYS[2], ARGV[4])
redis.call('DEL', KEYS[3], KEYS[6])
local tokens = {}
for token in string.gmatch(ARGV[6], '%S+') do
  table.insert(tokens, token)
end
for i = 1, ncalls do
  local key = KEYS[first_call - 1 + i]
  local fields = cjson.decode(ARGV[first_call - 1 + i])
  fields['pause'] = tostring(pause)
  fields['status'] = 'pending'
  for name, value in pairs(fields) do
    redis.call('HSET', key, name, value)
  end
  redis.call('EXPIRE', key, ARGV[3])
  local arguments, text = KEYS[first_call - 1 + ncalls + i], ARGV[first_call - 1 + ncalls + i]
  if text ~= '' then
    redis.call('SET', arguments, text, 'EX', ARGV[3])
  else
    redis.call('DEL', arguments)
  end
  mark(KEYS[5], 'card:' .. ARGV[5] .. '.' .. tokens[i], ARGV[2], ARGV[3])
end
mark(KEYS[5], 'run', ARGV[2], ARGV[3])
redis.call('HSET', run, 'status', 'paused', 'undecided', ncalls, 'updated_at', ARGV[2],
           'calls', ARGV[6])
redis.call('HDEL', run, 'owner', 'job', 'attempts')
for _, i in ipairs({1, 2, 4}) do
  redis.call('EXPIRE', KEYS[i], ARGV[3])
end
return {'ok', pause}
