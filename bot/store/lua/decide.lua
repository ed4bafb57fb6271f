-- Apply one person's decision to one pending call, exactly once.
-- An `always` decision also settles the pause's other pending calls with the same sticky key.
-- When the pause has no undecided call left, the caller becomes the owner of the one resume.
-- KEYS[1] run hash, KEYS[2] the decided call's hash, KEYS[3..] the pause's other call hashes
-- ARGV[1] decision (approved|rejected), ARGV[2] always (0|1), ARGV[3] team, ARGV[4] user,
-- ARGV[5] now, ARGV[6] reason, ARGV[7] owner token for the resume
local run, target = KEYS[1], KEYS[2]
if redis.call('EXISTS', target) == 0 then
  return {'missing'}
end
local status = redis.call('HGET', target, 'status')
if status ~= 'pending' then
  return {'already', status, redis.call('HGET', target, 'decided_by') or '',
          redis.call('HGET', target, 'decided_at') or '', redis.call('HGET', target, 'via') or ''}
end
local pause = redis.call('HGET', target, 'pause')
if redis.call('HGET', run, 'status') ~= 'paused' or redis.call('HGET', run, 'pause') ~= pause then
  return {'stale'}
end
local function settle(key, via)
  redis.call('HSET', key, 'status', ARGV[1], 'always', ARGV[2], 'decided_team', ARGV[3],
             'decided_by', ARGV[4], 'decided_at', ARGV[5], 'reason', ARGV[6], 'via', via)
end
settle(target, '')
local settled = {redis.call('HGET', target, 'approval_id')}
if ARGV[2] == '1' then
  local sticky = redis.call('HGET', target, 'sticky')
  for i = 3, #KEYS do
    local key = KEYS[i]
    if redis.call('HGET', key, 'status') == 'pending' and redis.call('HGET', key, 'pause') == pause
       and redis.call('HGET', key, 'sticky') == sticky then
      settle(key, settled[1])
      table.insert(settled, redis.call('HGET', key, 'approval_id'))
    end
  end
end
local left = redis.call('HINCRBY', run, 'undecided', -#settled)
redis.call('HSET', run, 'updated_at', ARGV[5])
local resume = 0
if left <= 0 then
  redis.call('HSET', run, 'status', 'resuming', 'owner', ARGV[7])
  resume = 1
end
local reply = {'decided', resume, left}
for _, id in ipairs(settled) do
  table.insert(reply, id)
end
return reply
