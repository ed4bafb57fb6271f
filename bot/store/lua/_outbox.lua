-- Prepended to the transition scripts that change what people see: the outbox (a hash in the
-- run's slot) records, in the same transition, which message must show the new state. Also the
-- helpers those scripts share (a call's approval id, settling calls of a pause).
local function mark(outbox, target, now, retention)
  redis.call('HINCRBY', outbox, target, 1)
  redis.call('HSETNX', outbox, target .. '@', now)
  redis.call('EXPIRE', outbox, retention)
end

-- A call's approval id is `<run id>.<token>` of its key `ab:{<run id>}:call:<token>` (the call
-- hash does not store it).
local function approval_id(key)
  local run_id, token = string.match(key, '{(.-)}:call:(.+)$')
  return run_id .. '.' .. token
end

-- `settled` calls of the run's pause are decided now: count them off, and when none is left
-- undecided the run moves to `resuming` under `owner` (the one resume), its records kept for
-- the resume that starts now. Returns (left undecided, 1 when this starts the resume else 0).
local function settle_pause(run, settled, now, owner, retention)
  local left = redis.call('HINCRBY', run, 'undecided', -settled)
  redis.call('HSET', run, 'updated_at', now)
  if left > 0 then
    return left, 0
  end
  redis.call('HSET', run, 'status', 'resuming', 'owner', owner)
  for i = 1, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('EXPIRE', KEYS[i], retention)
    end
  end
  return left, 1
end
