-- Prepended to the scripts that use an edit's one-shot approval (use_edit.lua at a pause,
-- use_edit_in_run.lua inside the run): the approval the edit of call `id` gave (its entry in the
-- run's edits hash `edits`, decoded) while it may still serve a call, else nil and why not:
-- 'none' (no such edit, or the edited call, `edited`, is not approved with the edited arguments:
-- its quorum not reached), 'used' (it served a call already). The caller checks the call it
-- would serve (the same agent's same tool with exactly the edited arguments, one pause later),
-- then sets the grant's `used` and writes it back.
local function edit_grant(edits, edited, id)
  local raw = redis.call('HGET', edits, id)
  if not raw then
    return nil, 'none'
  end
  local grant = cjson.decode(raw)
  if (grant['used'] or '') ~= '' then
    return nil, 'used'
  end
  if redis.call('HGET', edited, 'status') ~= 'approved'
     or redis.call('HGET', edited, 'edited_sha') ~= grant['sha'] then
    return nil, 'none'
  end
  return grant
end
