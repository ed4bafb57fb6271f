-- Before a tool runs: record that this attempt is executing the call, unless the call already
-- has a journal entry. An executed call is skipped (its recorded output is reused); a call left
-- executing by an earlier attempt is never run again automatically.
-- KEYS[1] run hash, KEYS[2] journal hash (field = call id)
-- ARGV[1] call id, ARGV[2] attempt token, ARGV[3] tool, ARGV[4] now, ARGV[5] retention seconds
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[2] then
  return {'not_owner'}
end
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if entry then
  local data = cjson.decode(entry)
  if data['tool'] ~= ARGV[3] then
    return {'review', data['owner'] or ''}  -- the id was reused for another tool: never guess
  end
  if data['status'] == 'executed' then
    return {'skip', data['output'] or ''}
  end
  if data['owner'] == ARGV[2] then
    return {'run'}  -- this very attempt's begin, retried after a lost reply
  end
  return {'review', data['owner'] or ''}
end
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode({status = 'executing', owner = ARGV[2],
  tool = ARGV[3], started_at = ARGV[4]}))
redis.call('EXPIRE', KEYS[2], ARGV[5])
return {'run'}
