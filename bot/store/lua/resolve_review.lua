-- A person settles a review, exactly once: calls left executing are marked done (their
-- recorded output says so) or cleared so that they run again; the run resumes under a new
-- execution token.
-- KEYS[1] run hash, KEYS[2] journal hash, KEYS[3] outbox
-- ARGV[1] review id, ARGV[2] action (done|rerun), ARGV[3] new execution token, ARGV[4] user,
-- ARGV[5] now, ARGV[6] status to resume in (resuming|running), ARGV[7] retention seconds
if redis.call('HGET', KEYS[1], 'status') ~= 'needs_review'
   or redis.call('HGET', KEYS[1], 'review_id') ~= ARGV[1] then
  if redis.call('HGET', KEYS[1], 'resolved_review') == ARGV[1]
     and redis.call('HGET', KEYS[1], 'resolved_execution') == ARGV[3] then
    return {'ok'}  -- the same request repeated after a lost reply
  end
  return {'gone', redis.call('HGET', KEYS[1], 'status') or 'missing'}
end
local entries = redis.call('HGETALL', KEYS[2])
local touched = {}
for i = 1, #entries, 2 do
  local data = cjson.decode(entries[i + 1])
  if data['status'] == 'executing' then
    if ARGV[2] == 'done' then
      data['status'] = 'executed'
      data['output'] = 'The outcome of this call was lost when the bot stopped; ' ..
                       ARGV[4] .. ' checked it and marked it done.'
      data['finished_at'] = ARGV[5]
      redis.call('HSET', KEYS[2], entries[i], cjson.encode(data))
    else
      redis.call('HDEL', KEYS[2], entries[i])
    end
    table.insert(touched, entries[i])
  end
end
redis.call('HSET', KEYS[1], 'status', ARGV[6], 'owner', ARGV[3], 'review_id', '', 'job', '',
           'updated_at', ARGV[5], 'resolved_review', ARGV[1], 'resolved_execution', ARGV[3],
           'resolved_by', ARGV[4], 'resolved_action', ARGV[2])
mark(KEYS[3], 'run', ARGV[5], ARGV[7])
mark(KEYS[3], 'review:' .. ARGV[1], ARGV[5], ARGV[7])
for i = 1, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('EXPIRE', KEYS[i], ARGV[7])
  end
end
local reply = {'ok'}
for _, id in ipairs(touched) do
  table.insert(reply, id)
end
return reply
