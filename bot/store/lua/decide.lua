-- Apply one person's decision to one pending call, exactly once.
-- A call stored with required > 1 needs that many distinct approvers: each approval is a vote
-- (the same person twice counts once) until the quorum settles it; one rejection settles it.
-- An `always` decision is recorded in the run's sticky hash (sticky key -> who, what, why), so
-- later calls of that agent's tool can be judged against it, and it also settles those of the
-- pause's other pending calls that the service found this person may decide alone (ARGV[12..]);
-- each is re-checked here (still pending, same pause, same sticky key, its routing as the
-- service's judgement read it). Nothing else is touched.
-- When the pause has no undecided call left, the caller becomes the owner of the one resume.
-- A call's approval id is `<run id>.<token>` of its key `ab:{<run id>}:call:<token>`; fields
-- left empty are not stored (a call's record reads them as empty).
-- KEYS[1] run hash, KEYS[2] the decided call's hash, KEYS[3] its votes set,
-- KEYS[4] the snapshot string, KEYS[5] the layout 1 snapshot hash, KEYS[6] the run's sticky hash,
-- KEYS[7] the run's outbox,
-- KEYS[8..] the pause's other call hashes
-- ARGV[1] decision (approved|rejected), ARGV[2] always (0|1), ARGV[3] team, ARGV[4] user,
-- ARGV[5] now, ARGV[6] reason, ARGV[7] owner token for the resume, ARGV[8] retention seconds,
-- ARGV[9] what settled the call when it is not the caller's own click (`via`, usually ''),
-- ARGV[10] the version token of the card clicked ('': not checked; see not_decidable): a
-- decision on a card drawn before an edit is refused, and the card is marked to be redrawn
-- ARGV[11] the generation of the call's routing the decision's judgement read ('': not
-- checked; see not_decidable): a call routed anew since is not decided ({'routed'}: the caller
-- judges again on a fresh read)
-- ARGV[12..] pairs: an approval id an always decision may also settle, and the generation of
-- that call's routing its judgement read
local run, target, votes = KEYS[1], KEYS[2], KEYS[3]
local refused = not_decidable(run, target, ARGV[7], ARGV[10], ARGV[11])
if refused then
  if refused[1] == 'edited' then
    mark(KEYS[7], 'card:' .. approval_id(target), ARGV[5], ARGV[8])
  end
  return refused
end
local pause = redis.call('HGET', target, 'pause')
if ARGV[1] == 'approved' then
  local required = tonumber(redis.call('HGET', target, 'required') or '1') or 1
  if required > 1 then
    if redis.call('SADD', votes, ARGV[4]) == 0 then
      return {'voted', redis.call('SCARD', votes), required}
    end
    redis.call('EXPIRE', votes, redis.call('TTL', target))
    local count = redis.call('SCARD', votes)
    local voters = redis.call('HGET', target, 'voters') or ''
    if voters ~= '' then
      voters = voters .. ','
    end
    redis.call('HSET', target, 'votes', count, 'voters', voters .. ARGV[4])
    mark(KEYS[7], 'card:' .. approval_id(target), ARGV[5], ARGV[8])
    if count < required then
      return {'vote', count, required}
    end
  end
end
local function settle(key, via)
  redis.call('HSET', key, 'status', ARGV[1], 'decided_by', ARGV[4], 'decided_at', ARGV[5],
             'decided_owner', ARGV[7])
  local optional = {always = ARGV[2] == '1' and '1' or '', decided_team = ARGV[3],
                    reason = ARGV[6], via = via}
  for name, value in pairs(optional) do
    if value ~= '' then
      redis.call('HSET', key, name, value)
    end
  end
end
settle(target, ARGV[9] or '')
local settled = {approval_id(target)}
if ARGV[2] == '1' then
  local sticky = redis.call('HGET', target, 'sticky')
  redis.call('HSET', KEYS[6], sticky, cjson.encode({
    decision = ARGV[1], team = ARGV[3], user = ARGV[4], at = ARGV[5], reason = ARGV[6],
    approval_id = settled[1], agent = redis.call('HGET', target, 'agent') or '',
    tool = redis.call('HGET', target, 'tool') or ''}))
  redis.call('EXPIRE', KEYS[6], ARGV[8])
  local eligible = {}
  for i = 12, #ARGV - 1, 2 do
    eligible[ARGV[i]] = ARGV[i + 1]
  end
  for i = 8, #KEYS do
    local key = KEYS[i]
    local routed = eligible[approval_id(key)]
    if routed and (redis.call('HGET', key, 'routed') or '0') == routed
       and redis.call('HGET', key, 'status') == 'pending' and redis.call('HGET', key, 'pause') == pause
       and redis.call('HGET', key, 'sticky') == sticky then
      settle(key, settled[1])
      table.insert(settled, approval_id(key))
    end
  end
end
for _, id in ipairs(settled) do
  mark(KEYS[7], 'card:' .. id, ARGV[5], ARGV[8])
end
mark(KEYS[7], 'run', ARGV[5], ARGV[8])
local left, resume = settle_pause(run, #settled, ARGV[5], ARGV[7], ARGV[8])
local reply = {'decided', resume, left}
for _, id in ipairs(settled) do
  table.insert(reply, id)
end
return reply
