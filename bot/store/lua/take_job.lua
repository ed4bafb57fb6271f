-- A worker takes the execution a job names. The run's `owner` is the execution token the job
-- was enqueued with; taking replaces it with `<execution>/<attempt>`, so every later write of
-- the run (save_pause, finish, the call journal) is checked against this attempt alone.
-- A redelivery of the same job message may take over from an earlier attempt (its worker
-- stopped renewing the job's lease); any other message for a taken execution is a duplicate,
-- unless the sweeper released the run (`job` = '': its attempt's job was lost, see
-- release_job.lua): then the next delivery of the execution takes it over.
-- A taken execution's reply carries what it runs on, so the worker needs no other read of the
-- run: {kind, previous owner, attempts, snapshot string or '', task key's value or '', the
-- pause's calls (each {hash fields and values, arguments key's value or ''}; none when the
-- job named no pause or another one), run hash fields and values...}.
-- KEYS[1] run hash, KEYS[2] snapshot string, KEYS[3] task (a task too long for the run hash),
-- KEYS[4..] the hashes, then the arguments keys, of the calls of the pause the job names
-- ARGV[1] execution token, ARGV[2] job message id, ARGV[3] new attempt token, ARGV[4] now,
-- ARGV[5] retention seconds, ARGV[6] '1' to return the snapshot string (a resume), ARGV[7]
-- the tokens of the pause the job names ('' for none: the run's `calls` when it was enqueued)
-- The reply's third element counts the attempts of the execution.
local run = KEYS[1]
local function taken(kind, previous, attempts)
  local snapshot = ''
  if ARGV[6] == '1' then
    snapshot = redis.call('GET', KEYS[2]) or ''
  end
  local calls = {}
  if ARGV[7] ~= nil and ARGV[7] ~= '' and redis.call('HGET', run, 'calls') == ARGV[7] then
    local count = (#KEYS - 3) / 2
    for i = 1, count do
      table.insert(calls, {redis.call('HGETALL', KEYS[3 + i]),
                           redis.call('GET', KEYS[3 + count + i]) or ''})
    end
  end
  local reply = {kind, previous, attempts, snapshot, redis.call('GET', KEYS[3]) or '', calls}
  for _, item in ipairs(redis.call('HGETALL', run)) do
    table.insert(reply, item)
  end
  return reply
end
local status = redis.call('HGET', run, 'status')
if status ~= 'running' and status ~= 'resuming' then
  return {'skip', status or 'missing'}
end
local owner = redis.call('HGET', run, 'owner') or ''
local execution = ARGV[1]
if owner == execution then
  redis.call('HSET', run, 'owner', ARGV[3], 'job', ARGV[2], 'updated_at', ARGV[4], 'attempts', 1)
  redis.call('EXPIRE', run, ARGV[5])
  redis.call('EXPIRE', KEYS[3], ARGV[5])
  return taken('fresh', '', 1)
end
if string.sub(owner, 1, #execution + 1) == execution .. '/'
   and (redis.call('HGET', run, 'job') == ARGV[2] or redis.call('HGET', run, 'job') == '') then
  redis.call('HSET', run, 'owner', ARGV[3], 'job', ARGV[2], 'updated_at', ARGV[4])
  local attempts = redis.call('HINCRBY', run, 'attempts', 1)
  redis.call('EXPIRE', run, ARGV[5])
  redis.call('EXPIRE', KEYS[3], ARGV[5])
  return taken('retry', owner, attempts)
end
return {'skip', 'taken'}
