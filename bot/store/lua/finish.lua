-- End a run (finished or failed). Only the owner of its current execution may end it; the
-- sweeper of dead processes passes the dead owner's token, so a live owner is never overruled.
-- A paused run has no executing owner: ARGV[1] = 'paused' ends it (nothing of it is running).
-- KEYS[1] run hash, KEYS[2] snapshot string, KEYS[3] layout 1 snapshot hash, KEYS[4] task
-- (kept as long as the run: its message shows it), KEYS[5] outbox, KEYS[6] layout 1 pause set
-- (dropped), KEYS[7] turns (a follow-up turn's answer), KEYS[8] the conversation so far,
-- KEYS[9] the answer streamed so far (dropped: the end shows the whole), KEYS[10] the
-- follow-ups waiting for a turn (counted: the caller starts the next turn only if one waits;
-- one arriving after this script finds the run ended and starts its turn itself)
-- ARGV[1] owner token, ARGV[2] final status, ARGV[3] text (output or error), ARGV[4] now,
-- ARGV[5] retention seconds, ARGV[6] '1' to drop the snapshot, ARGV[7] (optional) the
-- conversation after this turn, kept as the run ends (a finished run always has what its
-- next turn needs, and only the execution that ended it writes it)
-- Reply: {'ok', status, the run message's ts, follow-ups waiting} | {'already', status} |
--        {'missing'} | {'not_owner'}
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if status == false then
  return {'missing'}
end
if status == 'finished' or status == 'failed' then
  if redis.call('HGET', run, 'ended_by') == ARGV[1] and status == ARGV[2] then
    -- the same request repeated after a lost reply
    return {'ok', status, redis.call('HGET', run, 'message_ts') or '',
            redis.call('LLEN', KEYS[10])}
  end
  return {'already', status}
end
if status == 'paused' then
  if ARGV[1] ~= 'paused' then
    return {'not_owner'}
  end
elseif ARGV[1] == '' or redis.call('HGET', run, 'owner') ~= ARGV[1] then
  return {'not_owner'}
end
local field = 'output'
if ARGV[2] == 'failed' then
  field = 'error'
end
redis.call('HSET', run, 'status', ARGV[2], field, ARGV[3], 'updated_at', ARGV[4],
           'ended_by', ARGV[1])
redis.call('HDEL', run, 'owner', 'undecided')
if ARGV[6] == '1' then
  redis.call('DEL', KEYS[2], KEYS[3])
end
redis.call('DEL', KEYS[6], KEYS[9])
for i = 1, 4 do
  redis.call('EXPIRE', KEYS[i], ARGV[5])
end
if ARGV[7] ~= nil and ARGV[7] ~= '' then
  redis.call('SET', KEYS[8], ARGV[7], 'EX', ARGV[5])
else
  redis.call('EXPIRE', KEYS[8], ARGV[5])
end
mark(KEYS[5], 'run', ARGV[4], ARGV[5])
-- Turn 1's answer is the run's result; a follow-up turn's is kept with its turn, so that a
-- queued follow-up starting at once does not overwrite it before it is shown.
local turn = tonumber(redis.call('HGET', run, 'turn') or '1')
if turn > 1 then
  redis.call('HSET', KEYS[7], turn .. ':status', ARGV[2], turn .. ':answer', ARGV[3])
  redis.call('EXPIRE', KEYS[7], ARGV[5])
  mark(KEYS[5], 'result:' .. turn, ARGV[4], ARGV[5])
else
  mark(KEYS[5], 'result', ARGV[4], ARGV[5])
end
return {'ok', status, redis.call('HGET', run, 'message_ts') or '', redis.call('LLEN', KEYS[10])}
