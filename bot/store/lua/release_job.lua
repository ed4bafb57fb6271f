-- A run taken by an attempt whose job is lost: no delivery of it is pending (a failover lost
-- the job's entry or its delivery, or a superseded attempt acknowledged it) and none waits in
-- the stream, so no lease watches the run and no worker will ever take it over. The sweeper
-- asks twice: the first look marks the attempt and when (`jobless`); a look at least ARGV[4]
-- seconds later (two leases), the same attempt still holding the run on the same job,
-- releases it: `job` = '', so that the next delivery of the execution takes it over as a
-- retry (take_job.lua; the journal makes that safe: a call the attempt left executing goes
-- to a person). The mark's time is kept here, not by the sweeper: a look that failed after
-- marking (a write no replica confirmed) does not shorten the wait.
-- KEYS[1] run hash; ARGV[1] the owner seen (the attempt), ARGV[2] the job seen, ARGV[3] now,
-- ARGV[4] seconds between the mark and the release
-- Reply: 'marked' | 'released' | 'moved' (no longer that attempt's on that job, or not taken)
-- | 'waiting' (marked less than ARGV[4] seconds ago)
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if (status ~= 'running' and status ~= 'resuming')
   or redis.call('HGET', run, 'owner') ~= ARGV[1]
   or (redis.call('HGET', run, 'job') or '') ~= ARGV[2] then
  return 'moved'
end
local mark = redis.call('HGET', run, 'jobless') or ''
local attempt, since = string.match(mark, '^(.*) ([%d.]+)$')
if attempt ~= ARGV[1] then
  redis.call('HSET', run, 'jobless', ARGV[1] .. ' ' .. ARGV[3])
  return 'marked'
end
if tonumber(ARGV[3]) - tonumber(since) < tonumber(ARGV[4]) then
  return 'waiting'
end
redis.call('HSET', run, 'job', '', 'updated_at', ARGV[3])
redis.call('HDEL', run, 'jobless')
return 'released'
