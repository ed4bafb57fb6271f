-- Renew (or acknowledge) a job only while this consumer still holds it: a worker whose lease
-- lapsed, and whose job another worker took over, must neither steal it back nor ack it.
-- An acknowledgement also trims the stream of the entries every worker is done with (those
-- before the oldest pending job, or up to the last delivered one when none is pending), so
-- a finished job costs no memory until the sweeper's next pass; 'trim' does only that.
-- Only the delivery named holds the job: a worker may take its own job over once its lease
-- lapsed (its first attempt stalled), and the superseded attempt must neither renew nor ack.
-- KEYS[1] job stream; ARGV[1] group, ARGV[2] consumer, ARGV[3] message id, ARGV[4] renew|ack|trim,
-- ARGV[5] the delivery's count (XPENDING's; absent: any delivery to the consumer)
-- Reply: 1 held (renewed or acknowledged now), 0 held by another delivery, 2 not pending at all.
local function trim()
  local floor = redis.call('XPENDING', KEYS[1], ARGV[1])[2]
  if not floor then
    for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
      local info = {}
      for i = 1, #group, 2 do
        info[group[i]] = group[i + 1]
      end
      if info['name'] == ARGV[1] and info['last-delivered-id'] ~= '0-0' then
        local ms, seq = string.match(info['last-delivered-id'], '^(%d+)-(%d+)$')
        floor = ms .. '-' .. (tonumber(seq) + 1)
      end
    end
  end
  if floor then
    redis.call('XTRIM', KEYS[1], 'MINID', floor)
  end
end
if ARGV[4] == 'trim' then
  trim()
  return 1
end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #pending == 0 then
  return 2  -- acknowledged already (a run's end acknowledges its job with its own writes)
end
if pending[1][2] ~= ARGV[2]
   or (ARGV[5] and ARGV[5] ~= '' and pending[1][4] ~= tonumber(ARGV[5])) then
  return 0
end
if ARGV[4] == 'ack' then
  local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  trim()
  return acked
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
