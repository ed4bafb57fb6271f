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

-- Why a call cannot be decided now, or nil when it is pending in its run's current pause:
-- {'missing'}; the first answer again, for the request that decided it (`owner`: a repeat after
-- a lost reply); {'already', ...} when someone else decided it; {'stale'} for an older pause;
-- {'edited'} when `version` (the card's version token of the call's arguments: its edit count,
-- '0' before any edit; nil or '': not checked) is not the call's current one, i.e. the person
-- decided on a card drawn before an edit; {'routed'} when `routed` (the generation of the call's
-- routing its judgement read: its `routed` count, '0' before any; nil or '': not checked) is not
-- the call's current one, i.e. the call was routed anew (advice, escalation, the policy's
-- automatic decision handed to people) after the judgement's read: the judgement relied on
-- what is no longer true, and decides nothing.
local function not_decidable(run, target, owner, version, routed)
  if redis.call('EXISTS', target) == 0 then
    return {'missing'}
  end
  local status = redis.call('HGET', target, 'status')
  if status ~= 'pending' and redis.call('HGET', target, 'decided_owner') == owner then
    local resume = 0
    if redis.call('HGET', run, 'status') == 'resuming' and redis.call('HGET', run, 'owner') == owner then
      resume = 1
    end
    return {'decided', resume, tonumber(redis.call('HGET', run, 'undecided') or '0'),
            approval_id(target)}
  end
  if status ~= 'pending' then
    return {'already', status, redis.call('HGET', target, 'decided_by') or '',
            redis.call('HGET', target, 'decided_at') or '', redis.call('HGET', target, 'via') or ''}
  end
  local pause = redis.call('HGET', target, 'pause')
  if redis.call('HGET', run, 'status') ~= 'paused' or redis.call('HGET', run, 'pause') ~= pause then
    return {'stale'}
  end
  if version and version ~= '' and (redis.call('HGET', target, 'edits') or '0') ~= version then
    return {'edited'}
  end
  if routed and routed ~= '' and (redis.call('HGET', target, 'routed') or '0') ~= routed then
    return {'routed'}
  end
  return nil
end
