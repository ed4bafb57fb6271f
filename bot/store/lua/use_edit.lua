-- Settle a call the agent proposed after an edit with that edit's one-shot approval: only if the
-- edited call was approved (its quorum reached), its approval is unused, it was made in the pause
-- just before this one, and this call is the same agent's same tool with exactly the edited
-- arguments (arguments_sha). The approval is then used up; anything else leaves the call pending
-- for a person, on its own card.
-- KEYS[1] run hash, KEYS[2] the call's hash, KEYS[3] the run's edits hash, KEYS[4] the edited
-- call's hash, KEYS[5] the snapshot string, KEYS[6] the layout 1 snapshot hash, KEYS[7] outbox
-- ARGV[1] the edited call's approval id, ARGV[2] owner token for the resume, ARGV[3] now,
-- ARGV[4] retention seconds, ARGV[5] the generation of the call's routing the editor's
-- judgement read ('': not checked): a call routed anew since is not settled ({'routed'}, as
-- decide.lua: the caller judges again on a fresh read)
local run, target, edits, edited = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local refused = not_decidable(run, target, ARGV[2], nil, ARGV[5])
if refused then
  return refused
end
local pause = redis.call('HGET', target, 'pause')
local grant, why = edit_grant(edits, edited, ARGV[1])
if not grant then
  return {why}
end
if redis.call('HGET', target, 'agent') ~= grant['agent']
   or redis.call('HGET', target, 'tool') ~= grant['tool']
   or redis.call('HGET', target, 'arguments_sha') ~= grant['sha']
   or tonumber(pause) ~= tonumber(grant['pause']) + 1 then
  return {'none'}
end
grant['used'] = approval_id(target)
redis.call('HSET', edits, ARGV[1], cjson.encode(grant))
redis.call('HSET', target, 'status', 'approved', 'decided_by', grant['by'], 'decided_at', ARGV[3],
           'decided_owner', ARGV[2], 'via', 'edit:' .. ARGV[1])
if (grant['team'] or '') ~= '' then
  redis.call('HSET', target, 'decided_team', grant['team'])
end
mark(KEYS[7], 'card:' .. approval_id(target), ARGV[3], ARGV[4])
mark(KEYS[7], 'run', ARGV[3], ARGV[4])
local left, resume = settle_pause(run, 1, ARGV[3], ARGV[2], ARGV[4])
return {'decided', resume, left, approval_id(target)}
