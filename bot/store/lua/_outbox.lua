-- Prepended to the transition scripts that change what people see: the outbox (a hash in the
-- run's slot) records, in the same transition, which message must show the new state.
local function mark(outbox, target, now, retention)
  redis.call('HINCRBY', outbox, target, 1)
  redis.call('HSETNX', outbox, target .. '@', now)
  redis.call('EXPIRE', outbox, retention)
end
