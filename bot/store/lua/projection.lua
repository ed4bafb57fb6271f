-- What a projector pass reads of a run, in one round trip (read only): the run's outbox marks,
-- the run and its long task, what Slack holds of its messages, its outcomes and its progress
-- lines; each note marked (its number and text: no read of its own); then, for each card
-- marked, the card's call (its hash, long arguments and context), so that no card costs a read
-- of its own. The calls' keys are the run's (one slot).
-- KEYS[1] outbox, KEYS[2] run, KEYS[3] task, KEYS[4] shown, KEYS[5] outcomes, KEYS[6] progress,
-- KEYS[7] notes
-- ARGV[1] the run id, ARGV[2] the prefix of its calls' keys (`ab:{<run id>}:call:`)
-- Reply: {outbox, run, task, shown, outcomes, progress, {number, note or nil, ...} of each note
-- marked, then approval id, call hash, long arguments, context for each card marked}
local outbox = redis.call('HGETALL', KEYS[1])
local reply = {outbox, redis.call('HGETALL', KEYS[2]), redis.call('GET', KEYS[3]),
               redis.call('HGETALL', KEYS[4]), redis.call('HGETALL', KEYS[5]),
               redis.call('LRANGE', KEYS[6], 0, -1), {}}
local run = ARGV[1] .. '.'
for i = 1, #outbox, 2 do
  local field = outbox[i]
  local number = string.match(field, '^note:(%d+)$')
  if number then
    table.insert(reply[7], number)
    table.insert(reply[7], redis.call('LINDEX', KEYS[7], tonumber(number) - 1))
  end
  if string.sub(field, 1, 5) == 'card:' and string.sub(field, -1) ~= '@'
     and string.sub(field, 6, 5 + #run) == run then
    local id = string.sub(field, 6)
    local key = ARGV[2] .. string.sub(id, #run + 1)
    table.insert(reply, id)
    table.insert(reply, redis.call('HGETALL', key))
    table.insert(reply, redis.call('GET', key .. ':args'))
    table.insert(reply, redis.call('GET', key .. ':context'))
  end
end
return reply
