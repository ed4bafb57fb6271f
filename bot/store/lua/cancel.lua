-- Cancel a run, exactly once. Its pending calls become `cancelled`, the run `cancelled`, and
-- its owner is cleared: the execution that may be running (a worker between two steps) can no
-- longer save a pause, finish, start a tool call or go to review (all owner-checked), and a job
-- that has not been taken yet is skipped (take_job only takes running or resuming runs).
-- A decision racing the cancel is settled by whichever script runs first: decide.lua refuses a
-- call that is no longer pending, and this script leaves a decided call as it is.
-- The pause is read here, not only before: a pause saved between the caller's read and this
-- script (a resume that paused again) would otherwise keep a pending call, with a live card,
-- under a cancelled run. The call keys must be declared (one slot, Redis Cluster), so the
-- caller passes the ids it read; when they are not the pause this script finds, nothing is
-- changed and the reply names the pause's ids, for the caller to run the script again on them.
-- KEYS[1] run hash, KEYS[2] pause set (if the layout has one), KEYS[3] outbox, KEYS[4] task
-- (kept as long as the run), KEYS[5..] the pause's call hashes
-- ARGV[1] team, ARGV[2] user, ARGV[3] now, ARGV[4] retention seconds,
-- ARGV[5..] the approval ids of KEYS[5..], in the same order (not read from the call hashes, so
-- the script does not depend on which fields a call hash keeps)
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if status == false then
  return {'missing'}
end
if status == 'cancelled' then
  return {'already', redis.call('HGET', run, 'cancelled_by') or '',
          redis.call('HGET', run, 'cancelled_at') or ''}
end
if status == 'finished' or status == 'failed' then
  return {'ended', status}
end
local current = {}
local tokens = redis.call('HGET', run, 'calls') or ''
if tokens ~= '' then
  local run_id = string.match(run, '{(.-)}')
  for token in string.gmatch(tokens, '%S+') do
    table.insert(current, run_id .. '.' .. token)
  end
else
  current = redis.call('SMEMBERS', KEYS[2])  -- layout 1
end
local given = {}
for i = 5, #ARGV do
  given[ARGV[i]] = true
end
local stale = #current ~= #ARGV - 4
for _, id in ipairs(current) do
  stale = stale or not given[id]
end
if stale then
  local reply = {'stale'}
  for _, id in ipairs(current) do
    table.insert(reply, id)
  end
  return reply
end
local pause = redis.call('HGET', run, 'pause') or ''
local cancelled = {}
for i = 5, #KEYS do
  local key = KEYS[i]
  if redis.call('HGET', key, 'status') == 'pending' and redis.call('HGET', key, 'pause') == pause then
    redis.call('HSET', key, 'status', 'cancelled', 'decided_by', ARGV[2], 'decided_at', ARGV[3],
               'via', 'cancel')
    if ARGV[1] ~= '' then
      redis.call('HSET', key, 'decided_team', ARGV[1])
    end
    local id = ARGV[i]
    table.insert(cancelled, id)
    mark(KEYS[3], 'card:' .. id, ARGV[3], ARGV[4])
  end
end
local review = redis.call('HGET', run, 'review_id') or ''
if review ~= '' then
  mark(KEYS[3], 'review:' .. review, ARGV[3], ARGV[4])  -- its request now says it is closed
end
redis.call('HSET', run, 'status', 'cancelled', 'cancelled_by', ARGV[2], 'cancelled_at', ARGV[3],
           'updated_at', ARGV[3])
-- no owner any more: every owner-checked write of the execution in progress is refused
redis.call('HDEL', run, 'owner', 'undecided', 'review_id')
for _, i in ipairs({1, 2, 4}) do
  redis.call('EXPIRE', KEYS[i], ARGV[4])
end
mark(KEYS[3], 'run', ARGV[3], ARGV[4])
-- its run message's ts: a reply in its thread finds the run by it (then told it cannot go on)
local reply = {'ok', status, redis.call('HGET', run, 'message_ts') or ''}
for _, id in ipairs(cancelled) do
  table.insert(reply, id)
end
return reply
