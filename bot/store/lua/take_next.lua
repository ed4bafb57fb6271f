
-- (take_job.lua above, as the function `take`.) A worker with room for jobs reads the next ones
-- for itself (XREADGROUP, never blocking: the worker blocks in a read of its own only when
-- none was waiting) and takes each one's execution at once, in one round trip, not two: the
-- read, then take_job.lua. The keys of each job's run are named here from its run id (other
-- slots than KEYS': only on one server without replicas to confirm writes).
-- KEYS[1] the job stream, KEYS[2] the outbox index (the projector's)
-- ARGV[1] the workers' group, ARGV[2] this worker (consumer), ARGV[3] now, ARGV[4] retention
-- seconds, ARGV[5] the keys' prefix ('ab'), ARGV[6] jobs enqueued before this (ms) waited past
-- a decided card's gather: their runs are made due at ARGV[7] (ms; '' for none: see
-- `Runs.takes_index`), ARGV[8..] one new attempt token per job to read (their count is how
-- many): a job's attempt is `<execution>/<token>`, as `take_job.lua`'s.
-- Reply: {message id, its fields, take_job.lua's reply (or {'skip', 'malformed'})} per job read.
local read = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', #ARGV - 7,
                       'STREAMS', KEYS[1], '>')
if not read then
  return {}
end
local out = {}
for i, entry in ipairs(read[1][2]) do
  local id, fields = entry[1], entry[2]
  local job = {}
  for j = 1, #fields, 2 do
    job[fields[j]] = fields[j + 1]
  end
  local reply = {'skip', 'malformed'}
  if job.kind and job.run_id and job.execution and string.match(job.run_id, '^[0-9a-f]+$') then
    local prefix = ARGV[5] .. ':{' .. job.run_id .. '}:'
    local pause = ''
    if job.kind == 'resume' then
      pause = job.pause or ''
    end
    local names = {prefix .. 'run', prefix .. 'state', prefix .. 'task'}
    local tokens = {}
    for token in string.gmatch(pause, '%S+') do
      table.insert(tokens, token)
    end
    for _, token in ipairs(tokens) do
      table.insert(names, prefix .. 'call:' .. token)
    end
    for _, token in ipairs(tokens) do
      table.insert(names, prefix .. 'call:' .. token .. ':args')
    end
    local resume = ''
    if job.kind == 'resume' then
      resume = '1'
    end
    reply = take(names, {job.execution, id, job.execution .. '/' .. ARGV[7 + i], ARGV[3], ARGV[4],
                         resume, pause})
    local enqueued = tonumber(string.match(id, '^(%d+)-'))
    if ARGV[7] ~= '' and reply[1] ~= 'skip' and enqueued <= tonumber(ARGV[6]) then
      redis.call('ZADD', KEYS[2], 'LT', ARGV[7], job.run_id)
    end
  end
  table.insert(out, {id, fields, reply})
end
return out
