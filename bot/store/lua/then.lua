-- The writes that follow a transition, sent in the transition's own round trip and run only
-- when it happened (`Then`): a decision's audit entry and resume job after decide.lua, a run's
-- index writes, audit entry and job acknowledgement after finish.lua. A transition's writes in
-- another slot went in a second round trip once its reply had said whether it happened; on a
-- single server, in order, they ride behind it, each group of them gated on what the
-- transition leaves in its run's records (a field only it sets to the value given here).
-- Only on one server without replicas to confirm writes: the commands name keys of other
-- slots than KEYS', which a cluster refuses in a script.
-- KEYS[i]: the hash group i checks.
-- ARGV: for each group in turn: how many conditions, each a field and its expected value (all
-- must hold: HGET KEYS[i] field == value), how many commands, each its argument count and
-- its arguments.
-- Reply: per group, the replies of its commands in order, or 0 when it did not run.
local reply = {}
local at = 1
for group = 1, #KEYS do
  local holds = true
  local conditions = tonumber(ARGV[at])
  at = at + 1
  for _ = 1, conditions do
    if redis.call('HGET', KEYS[group], ARGV[at]) ~= ARGV[at + 1] then
      holds = false
    end
    at = at + 2
  end
  local commands = tonumber(ARGV[at])
  at = at + 1
  local replies = {}
  for i = 1, commands do
    local count = tonumber(ARGV[at])
    if holds then
      replies[i] = redis.call(unpack(ARGV, at + 1, at + count))
    end
    at = at + count + 1
  end
  if holds then
    reply[group] = replies
  else
    reply[group] = 0
  end
end
return reply
