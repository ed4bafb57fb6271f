-- The next turn of a run's conversation (a follow-up in its thread), exactly once.
-- 'reply': a follow-up arrived. A finished run with nothing queued starts its next turn now
-- (owned by ARGV[4], the new execution: its start job follows); a run still going (running,
-- resuming, paused, needs review) queues it (at most ARGV[7]); an ended run that cannot go
-- on (failed, cancelled) refuses it.
-- 'drain': a turn just finished; the first queued follow-up, if any, starts the next turn.
-- A turn started is its follow-up's author's: the run's `requester` (unset: the starter).
-- KEYS[1] run hash, KEYS[2] turns, KEYS[3] queued follow-ups, KEYS[4] outbox, KEYS[5] progress
-- lines (the new turn's start afresh)
-- ARGV[1] mode, ARGV[2] the follow-up (JSON: user, text, at), ARGV[3] unused, ARGV[4] new
-- execution token, ARGV[5] now, ARGV[6] retention seconds, ARGV[7] queue limit
-- Reply: {'started', turn, follow-up JSON} | {'queued', position} | {'full'} |
--        {'ended', status} | {'none'}
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if status == false then
  return {'ended', 'missing'}
end
local function start(followup)
  local turn = tonumber(redis.call('HGET', run, 'turn') or '1') + 1
  if turn == 2 then  -- the first answer, kept as later ones are (the run's fields move on)
    local first = redis.call('HMGET', run, 'output', 'error')
    local answer = first[1] or ''
    if status == 'failed' then
      answer = first[2] or ''
    end
    redis.call('HSET', KEYS[2], '1:status', status, '1:answer', answer)
  end
  redis.call('HSET', run, 'status', 'running', 'owner', ARGV[4], 'turn', turn,
             'updated_at', ARGV[5], 'attempts', 0)
  redis.call('HDEL', run, 'ended_by', 'job', 'pause', 'calls', 'undecided', 'requester')
  local asked = cjson.decode(followup)['user']  -- the turn's requester, unless its starter
  if asked ~= redis.call('HGET', run, 'user_id') then
    redis.call('HSET', run, 'requester', asked)
  end
  redis.call('HSET', KEYS[2], tostring(turn), followup)
  redis.call('DEL', KEYS[5])
  for i = 1, 3 do
    redis.call('EXPIRE', KEYS[i], ARGV[6])
  end
  mark(KEYS[4], 'run', ARGV[5], ARGV[6])
  mark(KEYS[4], 'result:' .. turn, ARGV[5], ARGV[6])  -- the turn's message, in the thread
  return {'started', turn, followup}
end
if ARGV[1] == 'drain' then
  if status ~= 'finished' then
    return {'none'}
  end
  local followup = redis.call('LPOP', KEYS[3])
  if not followup then
    return {'none'}
  end
  return start(followup)
end
if status == 'finished' then
  if redis.call('LLEN', KEYS[3]) == 0 then
    return start(ARGV[2])
  end
  redis.call('RPUSH', KEYS[3], ARGV[2])  -- a drain missed (a crash): the oldest goes first
  return start(redis.call('LPOP', KEYS[3]))
elseif status == 'failed' or status == 'cancelled' then
  return {'ended', status}
end
local queued = redis.call('LLEN', KEYS[3])
if queued >= tonumber(ARGV[7]) then
  return {'full'}
end
redis.call('RPUSH', KEYS[3], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[6])
return {'queued', queued + 1}
