-- Admit one new run, or say which limit stops it; nothing changes unless it is admitted.
-- Token buckets (per user, per channel) refill continuously at `rate` tokens a second up to
-- `burst`; a run takes one token from each. The open-run sorted sets hold the user's and the
-- channel's unfinished runs, scored by admission time (the caller has already removed ended
-- ones); an admitted run is added.
-- A command's delivery (its trigger id) is admitted or refused once: a replay is told
-- 'replay' and takes nothing; the same request retried after a lost reply (its own token) is
-- given the answer it was given (KEYS[5] holds the token, then the answer). A refusal by a cap
-- on unfinished runs is not kept: the caller may drop runs that ended and ask once more.
-- All keys share the hash tag {limits}, so the script runs on one Redis Cluster slot.
-- KEYS[1] user bucket, KEYS[2] channel bucket, KEYS[3] user's open runs, KEYS[4] channel's,
-- KEYS[5] the command's delivery (unused without ARGV[10])
-- ARGV[1] now (s), ARGV[2] user rate (/s), ARGV[3] user burst, ARGV[4] channel rate,
-- ARGV[5] channel burst, ARGV[6] user open cap, ARGV[7] channel open cap, ARGV[8] run id,
-- ARGV[9] ttl (s) of the keys, ARGV[10] this request's token ('': no delivery to check),
-- ARGV[11] seconds a delivery is remembered.  A rate, burst or cap of 0 means "no limit".
local now = tonumber(ARGV[1])
local checked = ARGV[10] ~= nil and ARGV[10] ~= ''
if checked then
  local earlier = redis.call('GET', KEYS[5])
  if earlier then
    local token, verdict, figure = string.match(earlier, '^(%S+) ?(%S*) ?(%S*)$')
    if token ~= ARGV[10] then
      return {'replay'}
    end
    return {verdict, figure}
  end
end
local function answer(verdict, figure)
  if checked then
    redis.call('SET', KEYS[5], ARGV[10] .. ' ' .. verdict .. ' ' .. (figure or '0'),
               'EX', ARGV[11])
  end
  if figure then
    return {verdict, figure}
  end
  return {verdict}
end
local function level(key, rate, burst)
  if rate <= 0 or burst <= 0 then
    return nil
  end
  local tokens = tonumber(redis.call('HGET', key, 'tokens') or burst)
  local stamp = tonumber(redis.call('HGET', key, 'ts') or now)
  return math.min(burst, tokens + math.max(0, now - stamp) * rate)
end
local checks = {
  {KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), 'user_rate'},
  {KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5]), 'channel_rate'},
}
local levels = {}
for i, c in ipairs(checks) do
  levels[i] = level(c[1], c[2], c[3])
  if levels[i] ~= nil and levels[i] < 1 then
    return answer(c[4], tostring(math.ceil((1 - levels[i]) / c[2])))
  end
end
local caps = {{KEYS[3], tonumber(ARGV[6]), 'user_open'}, {KEYS[4], tonumber(ARGV[7]), 'channel_open'}}
for _, c in ipairs(caps) do
  if c[2] > 0 and redis.call('ZCARD', c[1]) >= c[2] then
    return {c[3], tostring(redis.call('ZCARD', c[1]))}
  end
end
for i, c in ipairs(checks) do
  if levels[i] ~= nil then
    redis.call('HSET', c[1], 'tokens', tostring(levels[i] - 1), 'ts', ARGV[1])
    redis.call('EXPIRE', c[1], math.ceil(c[3] / c[2]) + 60)
  end
end
for _, c in ipairs(caps) do
  redis.call('ZADD', c[1], ARGV[1], ARGV[8])
  redis.call('EXPIRE', c[1], ARGV[9])
end
return answer('ok')
