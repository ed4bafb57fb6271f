
-- (take_job.lua as the function `take`, take_next.lua as the function `next_jobs`, above.) A
-- decision's resume job handed to its own process's idle worker, in the decision's round trip
-- (#32): the job is enqueued and, in the same script, read for that worker (XREADGROUP, never
-- blocking) and its execution taken, as `take_next` does. Atomic: a worker blocked in a read
-- of the stream is never given this job (blocked reads are served after the script, when it
-- is delivered already). The job stays in the stream, pending for that worker, with its lease:
-- if the process dies before it runs it, another worker takes it over (XAUTOCLAIM), as any job
-- read. Runs only when the decision resumed the run (what then.lua's gate checks: the run's
-- `owner` is the decision's token, its status `resuming`); else nothing is enqueued.
-- Only on one server without replicas to confirm writes (the keys of the job's run are named
-- from its run id).
-- KEYS[1] the run hash, KEYS[2] the job stream, KEYS[3] the outbox index
-- ARGV[1] the decision's owner token, ARGV[2] how many job message fields and values follow,
-- then those, then take_next.lua's ARGV (the workers' group, this worker, ...).
-- Reply: take_next.lua's ({} when the decision did not resume the run).
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1]
   or redis.call('HGET', KEYS[1], 'status') ~= 'resuming' then
  return {}
end
local count = tonumber(ARGV[2])
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3, 2 + count))
local rest = {}
for i = 3 + count, #ARGV do
  table.insert(rest, ARGV[i])
end
return next_jobs({KEYS[2], KEYS[3]}, rest)
