"""Edited calls: a reviewer's arguments replace the ones a pending call stands for (edit.lua),
and the one-shot approval that edit gives the agent's re-proposed call (use_edit.lua).

The run's edits hash (`ab:{run}:edits`) keeps one entry per edited call; its `used` names the
call that consumed the approval, so an edit runs at most once, whatever is retried."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.delivery.outbox import Outbox
from bot.store.keys import RunKeys
from bot.store.parts.calls import decode_decide
from bot.store.records import Decided, DecideResult, Gone, Voted
from bot.store.scripts import marking, now, script, text

CHANGED = (
    "This call was changed (edited by someone else) since you opened it, so your edit was not "
    "applied. Look at the card again."
)


@dataclass(frozen=True)
class EditRecord:
    """One edit of a run's call, as the run's edits hash keeps it."""

    approval_id: str
    """The edited call."""
    agent: str
    tool: str
    sha: str
    """arguments_sha of the edited arguments: what the re-proposed call must carry exactly."""
    pause: int
    """The pause of the edited call: its approval serves only the next pause's calls."""
    by: str
    """Who edited (a user id), from which team, when (Unix seconds)."""
    team: str
    at: str
    required: int
    """The approvals the edited call needed (its quorum under the rule it was posted with)."""
    original_digest: str
    """The call's digest as posted, and after the edit."""
    digest: str
    used: str = ""
    """The call its approval settled (empty: not used)."""

    @classmethod
    def from_json(cls, approval_id: str, raw: str) -> EditRecord:
        data = json.loads(raw)
        return cls(
            approval_id=approval_id,
            agent=str(data.get("agent", "")),
            tool=str(data.get("tool", "")),
            sha=str(data.get("sha", "")),
            pause=int(data.get("pause", 0) or 0),
            by=str(data.get("by", "")),
            team=str(data.get("team", "")),
            at=str(data.get("at", "")),
            required=int(data.get("required", 1) or 1),
            original_digest=str(data.get("original_digest", "")),
            digest=str(data.get("digest", "")),
            used=str(data.get("used", "")),
        )

    def to_json(self) -> str:
        data = asdict(self)
        del data["approval_id"]
        data["pause"], data["required"] = str(self.pause), str(self.required)
        return json.dumps(data, separators=(",", ":"))


def decode_edit(reply: list[Any]) -> DecideResult:
    """edit.lua's reply: decide.lua's kinds, and {'changed'} (the digest moved meanwhile)."""
    if text(reply[0]) == "changed":
        return Gone(CHANGED)
    return decode_decide(reply)


def decode_use_edit(reply: list[Any]) -> DecideResult | None:
    """use_edit.lua's reply: decide.lua's kinds, or None ({'none'} | {'used'}: no approval
    applies, the call waits for a person)."""
    if text(reply[0]) in ("none", "used"):
        return None
    return decode_decide(reply)


class Edits:
    """Reads and transitions of a run's edited calls."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int, outbox: Outbox) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.outbox = outbox
        self._edit = client.register_script(marking("edit"))
        self._use = client.register_script(script("_outbox", "_edit_grant", "use_edit"))
        self._use_in_run = client.register_script(script("_edit_grant", "use_edit_in_run"))

    async def edit(
        self,
        approval_id: str,
        *,
        expected_digest: str,
        record: EditRecord,
        arguments: str,
        owner: str,
        routed: str = "",
        after: Callable[[Any, DecideResult], None] | None = None,
    ) -> DecideResult:
        """Apply one edit atomically (see edit.lua): `Decided` (quorum of one: approved with
        these arguments), `Voted` (the first approval of the new count), or why not.
        `routed`: the generation of the call's routing the editor's judgement read ("": not
        checked): when it moved since, nothing is edited (`Rerouted`).
        `after(pipe, result)`: writes (the audit entry) sent with the index write that follows."""
        run_id = keys.run_of(approval_id)
        if run_id is None:
            return Gone()
        reply = await self._edit(
            keys=RunKeys(run_id).edit(approval_id),
            args=[
                expected_digest,
                record.digest,
                arguments,
                record.sha,
                record.team,
                record.by,
                record.at,
                owner,
                self.retention,
                record.to_json(),
                routed,
            ],
        )
        result = decode_edit(reply)
        if isinstance(result, Decided | Voted):
            async with self.redis.pipeline(transaction=False) as pipe:
                self.outbox.schedule_in(pipe, run_id)
                if isinstance(result, Decided) and result.resume:  # waits for a worker
                    pipe.zadd(keys.DUE_RUNS, {run_id: float(now())})
                if after is not None:
                    after(pipe, result)
                await pipe.execute()
            self.outbox.woken.set()
        return result

    async def use_edit(
        self, approval_id: str, edited_id: str, *, owner: str, routed: str = ""
    ) -> DecideResult | None:
        """Settle `approval_id` with the one-shot approval of `edited_id` (use_edit.lua); None
        when that approval does not apply (the call then waits for a person). `routed`: the
        generation of the call's routing the editor's judgement read ("": not checked): when
        it moved since, nothing is settled (`Rerouted`: the caller judges again)."""
        run_id = keys.run_of(approval_id)
        if run_id is None or keys.run_of(edited_id) != run_id:
            return None
        reply = await self._use(
            keys=RunKeys(run_id).use_edit(approval_id, edited_id),
            args=[edited_id, owner, now(), self.retention, routed],
        )
        result = decode_use_edit(reply)
        if isinstance(result, Decided):
            async with self.redis.pipeline(transaction=False) as pipe:
                self.outbox.schedule_in(pipe, run_id)
                if result.resume:
                    pipe.zadd(keys.DUE_RUNS, {run_id: float(now())})
                await pipe.execute()
            self.outbox.woken.set()
        return result

    async def use_edit_in_run(
        self, run_id: str, edit: EditRecord, *, owner: str, sha: str, used_by: str
    ) -> bool:
        """Use up the one-shot approval of `edit` for the run's re-proposed call (`sha`: its
        arguments), inside the run that `owner` executes (use_edit_in_run.lua); False when it
        does not apply (the call then goes to the pause, as before)."""
        reply = await self._use_in_run(
            keys=[keys.run_key(run_id), keys.edits_key(run_id), keys.call_key(edit.approval_id)],
            args=[edit.approval_id, owner, edit.agent, edit.tool, sha, used_by],
        )
        return text(reply[0]) == "used_now"

    async def edits(self, run_id: str) -> list[EditRecord]:
        """The run's edits, oldest first."""
        raw = await self.redis.hgetall(keys.edits_key(run_id))
        found = [EditRecord.from_json(text(k), text(v)) for k, v in raw.items()]
        return sorted(found, key=lambda e: float(e.at or 0))
