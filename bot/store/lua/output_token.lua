-- A run's output's Slack token, taken in the round trip of the run's end (#32: one round trip
-- fewer before the output is posted), by the pass that round trip starts; run behind pace.lua
-- as the function `pace` (Outbox.reads_ahead only: its keys are in several slots).
-- KEYS[1] the channel's post bucket (pace.lua's), KEYS[2] the outbox leases, KEYS[3] the run
-- hash, KEYS[4] its outbox, KEYS[5] what Slack holds of its messages (shown)
-- ARGV[1] the run id, ARGV[2] rate, ARGV[3] burst, ARGV[4] the output's posting record (what
-- the shown hash holds while its post is attempted), ARGV[5] retention (s), ARGV[6] 'take' or
-- 'give', then
--   'take': ARGV[7] the score of the pass's claim. Only while that claim holds the run (the
--           claim in the same round trip took it), the run has ended with its message in
--           Slack, and its output (`result`, `result:<turn>`) is marked and has never been
--           posted, streamed or tried (no entry in `shown`): the pass posts it at once. A
--           token is then taken as an output's ('now', above no floor) and, when taken, the
--           posting record written, as the pass's own take would (a crash then has its post
--           looked up before a second one);
--   'give': ARGV[7] the output, ARGV[8]-ARGV[10] the bucket at the take (its holds, its
--           tokens right after it, the take's time in ms): a token taken so and not used goes
--           back to the bucket (pace.lua 'give') with the posting record dropped, once: only
--           while that record is still this one (no post was tried, no other pass took over).
-- Reply: 'take': {taken (1/0), wait in ms, the output, the bucket's holds, tokens and time
-- right after the take} ({0, '0', ''}: not taken, the pass takes its own); 'give': {given
-- back (1/0)}
local bucket = {KEYS[1]}
if ARGV[6] == 'give' then
  if redis.call('HGET', KEYS[5], ARGV[7]) ~= ARGV[4] then
    return {0}
  end
  redis.call('HDEL', KEYS[5], ARGV[7])
  return {pace(bucket, {ARGV[2], ARGV[3], 'give', ARGV[8], ARGV[9], ARGV[10]})[1]}
end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[7] then
  return {0, '0', ''}
end
local run = redis.call('HMGET', KEYS[3], 'status', 'turn', 'message_ts')
if (run[1] ~= 'finished' and run[1] ~= 'failed') or not run[3] or run[3] == '' then
  return {0, '0', ''}
end
local target = 'result'
local turn = tonumber(run[2] or '1') or 1
if turn > 1 then
  target = 'result:' .. turn
end
if redis.call('HEXISTS', KEYS[4], target) == 0 or redis.call('HEXISTS', KEYS[5], target) == 1 then
  return {0, '0', ''}
end
local taken = pace(bucket, {ARGV[2], ARGV[3], 'now', '0'})
if taken[1] == 1 then
  redis.call('HSET', KEYS[5], target, ARGV[4])
  redis.call('EXPIRE', KEYS[5], ARGV[5])
end
local after = redis.call('HMGET', KEYS[1], 'holds', 'tokens', 'at')
return {taken[1], taken[2], target, after[1] or '0', after[2] or '0', after[3] or '0'}
