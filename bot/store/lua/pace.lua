-- One of Slack's rate limits, shared by every replica: a token bucket (`burst` calls, then
-- `rate` per second) in one hash, timed by the Redis server's own clock (replicas' clocks may
-- differ). The hash holds `tokens` as of the time `at` (ms), which a hold (a 429's
-- Retry-After, from any replica) moves into the future with the bucket empty then: nothing
-- refills during a hold, and what queued meanwhile goes a token apart after it, not at once.
-- KEYS[1] the bucket hash (tokens, at), KEYS[2] (with 'queue') the message's kept turn
-- ARGV[1] rate (tokens per second), ARGV[2] burst, ARGV[3] what to do:
--   'queue': take a token, waiting for it if need be (tokens may go below zero: a queue of
--            reservations), for the most urgent messages (approval cards). A turn more than
--            ARGV[4] ms away is kept in KEYS[2], for whichever process tries the message
--            again (no second token); a kept turn is given back, and once due, used up;
--   'now':   take a token only if one is free now and at least ARGV[4] tokens stay for the
--            more urgent (outputs: 0; status updates and notes: some of the burst), else take
--            nothing and answer how long until that would be: those never queue, so no card
--            ever waits behind them;
--   'peek':  take nothing; how long until a 'now' take with floor ARGV[4] would succeed;
--   'hold':  no call for ARGV[4] ms (Retry-After); the bucket is empty when the hold ends;
--            the bucket counts its holds (`holds`);
--   'give':  a token taken with 'now' and not used, given back, only if no hold came since
--            it was taken (ARGV[4]: the bucket's `holds` then) and none lasts now, and either
--            nothing touched the bucket since (ARGV[5], ARGV[6]: its `tokens` and `at` right
--            after the take) or it could not have refilled to `burst` since: so given back,
--            the bucket is exactly as if it had never been taken; otherwise (a refill to the
--            cap, then takes) one more would go than the burst allows: it stays taken, the
--            pacing stricter by that token (#32).
-- Reply: {taken (1/0), wait in ms (string)}: with 'queue', the wait before using the token;
-- with 'give', {given (1/0), '0'}; otherwise the time until a token would be free.
local rate, burst, mode = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or '') or burst
local at = tonumber(redis.call('HGET', KEYS[1], 'at') or '') or now
if now > at then
  tokens = math.min(burst, tokens + (now - at) / 1000 * rate)
  at = now
end
local ahead = at - now -- > 0 while a hold lasts

local function save()
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(at))
  -- kept until the bucket is full again (then it reads as new)
  local full = at - now + math.ceil(math.max(0, burst - tokens) / rate * 1000) + 1000
  redis.call('PEXPIRE', KEYS[1], full)
end

if mode == 'hold' then
  local ends = now + tonumber(ARGV[4])
  if ends > at then
    tokens = math.min(tokens, 0)
    at = ends
  end
  redis.call('HINCRBY', KEYS[1], 'holds', 1)
  save()
  return {0, tostring(at - now)}
end
if mode == 'queue' then
  local moment = tonumber(ARGV[4]) or 0
  local kept = tonumber(redis.call('GET', KEYS[2]) or '')
  if kept then
    if kept - now <= moment then
      redis.call('DEL', KEYS[2])
    end
    return {1, tostring(math.max(0, kept - now))}
  end
  tokens = tokens - 1
  save()
  local wait = ahead + math.max(0, -tokens / rate * 1000)
  if wait > moment then
    redis.call('SET', KEYS[2], tostring(now + wait), 'PX', math.ceil(wait) + 60000)
  end
  return {1, tostring(wait)}
end
if mode == 'give' then
  if ahead > 0 or (redis.call('HGET', KEYS[1], 'holds') or '0') ~= ARGV[4] then
    return {0, '0'}
  end
  -- Exact only while the bucket without that take would hold one more now: nothing touched
  -- it since (the cap below is then the one it would have met), or it could not have refilled
  -- to `burst` since (what came since only lowered it)
  local since = redis.call('HMGET', KEYS[1], 'tokens', 'at')
  local untouched = since[1] == ARGV[5] and since[2] == ARGV[6]
  local untaken = tonumber(ARGV[5]) + 1 + (now - tonumber(ARGV[6])) / 1000 * rate
  if not untouched and untaken > burst then
    return {0, '0'}
  end
  tokens = math.min(burst, tokens + 1)
  save()
  return {1, '0'}
end
local floor = tonumber(ARGV[4]) or 0
if ahead <= 0 and tokens - 1 >= floor then
  if mode == 'now' then
    tokens = tokens - 1
    save()
    return {1, '0'}
  end
  return {0, '0'}
end
return {0, tostring(ahead + math.max(0, (floor + 1 - tokens) / rate * 1000))}
