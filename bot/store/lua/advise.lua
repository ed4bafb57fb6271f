-- An advisor's advice on a pending call (bot/service/oversight/advice.py), and what the policy in force
-- says of the call with it: written only while the call is pending, and its card marked to
-- show them, in one transition (a decision made first leaves the call as it was decided).
-- The advice is what rules on `advice.*` read, so the call's routing generation (`routed`) moves
-- with it: a decision judged on a read from before it decides nothing (decide.lua, edit.lua).
-- KEYS[1] the call's hash, KEYS[2] the run's outbox
-- ARGV[1] now, ARGV[2] retention seconds, ARGV[3..] field, value pairs (`advice` among them)
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('HINCRBY', KEYS[1], 'routed', 1)
mark(KEYS[2], 'card:' .. approval_id(KEYS[1]), ARGV[1], ARGV[2])
return 1
