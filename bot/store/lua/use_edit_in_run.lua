-- Use an edit's one-shot approval for the agent's re-proposed call inside its run (#32 part 1):
-- the call never paused, so there is no call record to settle; the approval is used up here,
-- once, by the attempt that owns the run, under the conditions use_edit.lua checks at a pause:
-- the edited call was approved (its quorum reached) with these arguments, its approval is
-- unused, it was made in the run's latest pause, and this call is the same agent's same tool
-- with exactly the edited arguments.
-- KEYS[1] run hash, KEYS[2] the run's edits hash, KEYS[3] the edited call's hash
-- ARGV[1] the edited call's approval id, ARGV[2] the attempt (owner token), ARGV[3] agent,
-- ARGV[4] tool, ARGV[5] arguments_sha, ARGV[6] the id of the call that uses it
local run, edits, edited = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HGET', run, 'owner') ~= ARGV[2] then
  return {'not_owner'}
end
local grant, why = edit_grant(edits, edited, ARGV[1])
if not grant then
  return {why}
end
if grant['agent'] ~= ARGV[3] or grant['tool'] ~= ARGV[4] or grant['sha'] ~= ARGV[5]
   or tonumber(redis.call('HGET', run, 'pause') or '0') ~= tonumber(grant['pause']) then
  return {'none'}
end
grant['used'] = ARGV[6]
redis.call('HSET', edits, ARGV[1], cjson.encode(grant))
return {'used_now'}
