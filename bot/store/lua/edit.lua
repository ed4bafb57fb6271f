-- Edit, then approve: a reviewer replaces the arguments a pending call stands for, exactly once
-- per digest (compare-and-swap on the call's digest: an edit made on what someone else already
-- changed is refused). The edit resets the quorum's votes (approvals of the old arguments do
-- not count for the new ones) and counts as the editor's own approval: with a quorum of one
-- it decides the call (approved, with edits); otherwise it is the first vote of the new count.
-- The run's edits hash records it: the one-shot approval the agent's re-proposed call uses.
-- KEYS[1] run hash, KEYS[2] the call's hash, KEYS[3] its votes set, KEYS[4] the snapshot string,
-- KEYS[5] the layout 1 snapshot hash, KEYS[6] the run's outbox, KEYS[7] the run's edits hash
-- ARGV[1] the digest the editor's check read, ARGV[2] the new digest, ARGV[3] the edited
-- arguments (pretty JSON), ARGV[4] their arguments_sha, ARGV[5] team, ARGV[6] user, ARGV[7] now,
-- ARGV[8] owner token for the resume, ARGV[9] retention seconds, ARGV[10] the edits hash entry,
-- ARGV[11] the generation of the call's routing the editor's judgement read ('': not checked):
-- a call routed anew since is not edited ({'routed'}, as decide.lua)
local run, target, votes, outbox = KEYS[1], KEYS[2], KEYS[3], KEYS[6]
local refused = not_decidable(run, target, ARGV[8], nil, ARGV[11])
if refused then
  return refused
end
if redis.call('HGET', target, 'digest') ~= ARGV[1] then
  return {'changed'}
end
redis.call('HSETNX', target, 'original_digest', ARGV[1])
redis.call('HSET', target, 'digest', ARGV[2], 'edited_arguments', ARGV[3], 'edited_sha', ARGV[4],
           'edited_team', ARGV[5], 'edited_by', ARGV[6], 'edited_at', ARGV[7])
redis.call('HINCRBY', target, 'edits', 1)
redis.call('HSET', KEYS[7], approval_id(target), ARGV[10])
redis.call('EXPIRE', KEYS[7], ARGV[9])
redis.call('DEL', votes)
redis.call('HDEL', target, 'votes', 'voters')
mark(outbox, 'card:' .. approval_id(target), ARGV[7], ARGV[9])
mark(outbox, 'run', ARGV[7], ARGV[9])
local required = tonumber(redis.call('HGET', target, 'required') or '1') or 1
if required > 1 then
  redis.call('SADD', votes, ARGV[6])
  redis.call('EXPIRE', votes, redis.call('TTL', target))
  redis.call('HSET', target, 'votes', 1, 'voters', ARGV[6])
  return {'vote', 1, required}
end
redis.call('HSET', target, 'status', 'approved', 'decided_by', ARGV[6], 'decided_at', ARGV[7],
           'decided_owner', ARGV[8], 'decided_team', ARGV[5])
local left, resume = settle_pause(run, 1, ARGV[7], ARGV[8], ARGV[9])
return {'decided', resume, left, approval_id(target)}
