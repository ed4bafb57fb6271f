-- Prepended to the transition scripts that change what people see: the outbox (a hash in the
-- run's slot) records, in the same transition, which message must show the new state.
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
