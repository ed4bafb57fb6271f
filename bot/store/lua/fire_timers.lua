-- Fire what is due of one pending call's timers, exactly once whichever process runs it:
-- expiry (a compare-and-swap on the call's status: a click that decided it first wins, and
-- this does nothing), escalation (recorded once: only from then on may `escalate_to` decide),
-- and reminders (counted: reminder n is due at paused_at + n * remind_after; after a pause in
-- firing, only the latest one due is sent). Expiring the pause's last undecided call moves the
-- run to `resuming` under ARGV[2], exactly as a decision does (decide.lua).
-- KEYS[1] run hash, KEYS[2] the call's hash, KEYS[3] the run's outbox,
-- KEYS[4..] the run's other keys (snapshot, pause, sticky, votes, other calls): kept as long
-- as the run's records once it resumes
-- ARGV[1] now (Unix s), ARGV[2] owner token for the resume, ARGV[3] retention seconds,
-- ARGV[4] the reason the agent receives when the call expires,
-- ARGV[5] the call's approvers under the policy in force (JSON list), ARGV[6] whom it escalates
-- to under the policy in force (JSON list; '' when that policy does not escalate it): when the
-- escalation time (set at posting) passes, these are recorded, not those of the posting, and a
-- policy that no longer escalates the call escalates it to nobody (nothing is announced).
local run, call, outbox = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
if redis.call('HGET', call, 'status') ~= 'pending' then
  return {'gone'}
end
local pause = redis.call('HGET', call, 'pause')
if redis.call('HGET', run, 'status') ~= 'paused' or redis.call('HGET', run, 'pause') ~= pause then
  return {'gone'}
end
local id = approval_id(call)
-- the expiry: expire_after seconds after the pause (layouts up to 3 also stored expires_at)
local expires = 0
local expire_after = tonumber(redis.call('HGET', call, 'expire_after') or '') or 0
if expire_after > 0 then
  expires = (tonumber(redis.call('HGET', call, 'paused_at') or '') or 0) + expire_after
  expires = math.max(expires, tonumber(redis.call('HGET', call, 'expires_at') or '') or 0)
end
if expires > 0 and now >= expires then
  redis.call('HSET', call, 'status', 'expired', 'decided_at', ARGV[1], 'reason', ARGV[4],
             'decided_owner', ARGV[2])
  mark(outbox, 'card:' .. id, ARGV[1], ARGV[3])
  mark(outbox, 'run', ARGV[1], ARGV[3])
  local left, resume = settle_pause(run, 1, ARGV[1], ARGV[2], ARGV[3])
  return {'expired', resume, left}
end
local fired = {}
local next_due = expires
local function sooner(t)
  if t > 0 and (next_due <= 0 or t < next_due) then
    next_due = t
  end
end
-- who a reminder mentions and the card shows: the approvers of the policy in force
if (redis.call('HGET', call, 'approvers') or '') ~= ARGV[5] then
  redis.call('HSET', call, 'approvers', ARGV[5])
  mark(outbox, 'card:' .. id, ARGV[1], ARGV[3])
end
local escalate = tonumber(redis.call('HGET', call, 'escalate_at') or '') or 0
if escalate > 0 and (redis.call('HGET', call, 'escalated_at') or '') == '' then
  if now >= escalate then
    -- every judgement widens the approvers from now on: the call's routing moved (decide.lua
    -- decides nothing on a judgement that read it before)
    redis.call('HSET', call, 'escalated_at', ARGV[1])
    redis.call('HINCRBY', call, 'routed', 1)
    mark(outbox, 'card:' .. id, ARGV[1], ARGV[3])
    if ARGV[6] ~= '' then
      redis.call('HSET', call, 'escalate_to', ARGV[6])
      mark(outbox, 'remind:' .. id .. ':escalated', ARGV[1], ARGV[3])
      table.insert(fired, 'escalated')
    else
      redis.call('HDEL', call, 'escalate_to')
    end
  else
    sooner(escalate)
  end
end
local every = tonumber(redis.call('HGET', call, 'remind_after') or '') or 0
local most = tonumber(redis.call('HGET', call, 'remind_max') or '') or 0
local sent = tonumber(redis.call('HGET', call, 'reminders') or '') or 0
local since = tonumber(redis.call('HGET', call, 'paused_at') or '') or 0
if every > 0 and since > 0 and sent < most then
  local due = math.min(most, math.floor((now - since) / every))
  if due > sent then
    sent = due
    redis.call('HSET', call, 'reminders', sent)
    mark(outbox, 'remind:' .. id .. ':' .. sent, ARGV[1], ARGV[3])
    table.insert(fired, 'remind:' .. sent)
  end
  if sent < most then
    sooner(since + (sent + 1) * every)
  end
end
local reply = {'ok', string.format('%.3f', next_due)}
for _, what in ipairs(fired) do
  table.insert(reply, what)
end
return reply
