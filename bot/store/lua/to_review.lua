-- The executing attempt found calls whose outcome is unknown: the run waits for a person.
-- KEYS[1] run hash, KEYS[2] outbox; ARGV[1] attempt token, ARGV[2] review id, ARGV[3] what to review, ARGV[4] now,
-- ARGV[5] the job kind to run again once reviewed (start|resume), ARGV[6] retention seconds
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  -- the same request repeated after a lost reply: already done
  if redis.call('HGET', KEYS[1], 'status') == 'needs_review'
     and redis.call('HGET', KEYS[1], 'review_id') == ARGV[2] then
    return 1
  end
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'needs_review', 'owner', '', 'review_id', ARGV[2],
           'error', ARGV[3], 'review_kind', ARGV[5], 'updated_at', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[6])
mark(KEYS[2], 'run', ARGV[4], ARGV[6])
mark(KEYS[2], 'review:' .. ARGV[2], ARGV[4], ARGV[6])
return 1
