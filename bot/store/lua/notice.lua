-- One person's notice (the requester's message about their runs' outcomes): the runs listed
-- with news, the lease of the pass telling them, and when the next notice may go, in one slot
-- (the person's hash tag), so that each step of the protocol (`Projector._tell_person`) is one
-- round trip, and letting go of the notice and looking at the list once more are one step.
-- KEYS[1] the listed runs (sorted set: run id -> when listed), KEYS[2] the lease (token),
-- KEYS[3] when the next notice may go (Unix s).
-- ARGV[1] 'take' or 'told', ARGV[2] the pass's token, ARGV[3] the lease (ms), ARGV[4] now
-- (Unix s), ARGV[5] at most this many runs per reply.
--   'take': ARGV[6] a run to list (anew: a later time) first ('' none), ARGV[7] retention (s);
--           then take the lease. Reply {0}: held by another pass (it finds the run listed);
--           {-1, next}: a notice went less than a window ago (the lease given back);
--           {1, run, listed at, ...}: the lease is this pass's, with the runs to tell (none:
--           given back at once).
--   'told': ARGV[6] '1' when a notice went now, ARGV[7] the window (s), ARGV[8] '1' to stop,
--           ARGV[9..] run, listed at, ...: the runs told, unlisted unless listed again since
--           (a later time: news the pass did not read). Then, unless stopped, the next runs:
--           {1, run, listed at, ...} with the lease renewed; {0} with the lease given back
--           when none is left (in this same step: a run listed after it finds the lease free).
local runs, lease, nextkey = KEYS[1], KEYS[2], KEYS[3]
local mode, token, ms, now, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]),
  tonumber(ARGV[5])

local function listed()
  local found = redis.call('ZRANGE', runs, 0, limit - 1, 'WITHSCORES')
  if #found == 0 then
    if redis.call('GET', lease) == token then
      redis.call('DEL', lease)
    end
    return {0}
  end
  redis.call('PEXPIRE', lease, ms)
  local reply = {1}
  for i = 1, #found do
    reply[i + 1] = found[i]
  end
  return reply
end

if mode == 'take' then
  if ARGV[6] ~= '' then
    redis.call('ZADD', runs, ARGV[4], ARGV[6])
    redis.call('EXPIRE', runs, ARGV[7])
  end
  if not redis.call('SET', lease, token, 'NX', 'PX', ms) then
    return {0}
  end
  local next = tonumber(redis.call('GET', nextkey) or '')
  if next and next > now then
    redis.call('DEL', lease)
    return {-1, tostring(next)}
  end
  local reply = listed()
  if reply[1] == 0 then
    return {1}
  end
  return reply
end

for i = 9, #ARGV, 2 do
  local score = redis.call('ZSCORE', runs, ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', runs, ARGV[i])
  end
end
local window = tonumber(ARGV[7])
if ARGV[6] == '1' and window > 0 then
  redis.call('SET', nextkey, string.format('%.3f', now + window), 'PX', math.floor(window * 1000) + 1)
end
if ARGV[8] == '1' or redis.call('GET', lease) ~= token then
  if redis.call('GET', lease) == token then
    redis.call('DEL', lease)
  end
  return {0}
end
return listed()
