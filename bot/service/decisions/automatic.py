"""Calls the policy decides by itself, decided inside their run (#32 part 1).

A call that a rule decides automatically (`auto:`), that a channel grant covers, that an
Always decision made earlier in the run settles, or that an edit's one-shot approval settles
(the agent's call re-proposed with exactly the edited arguments: the edit was its editor's
decision), is judged here before anything is saved (at the SDK's approval hook of its tool,
or where the run stops on the call: `bot.engine.automatic`) and decided in the run: no
snapshot, no resume job, no card; in a turn with calls for people too, the run pauses only for
those. The judgement is the one a click gets (`Judgement.settle`: Way.RULE; Way.GRANT_USE with
the grantor as actor; Way.EARLIER_ALWAYS with the Always decision's decider; Way.EDITED_CALL
with the editor, the edit's approval then used up by the run's attempt, once:
use_edit_in_run.lua), on the call as a pause would have posted it (`Runs._new_call`: its
subject is what the tool will receive), in the pause's order (a rule, an edit's one-shot
approval, an earlier Always, a grant). Anything else (a condition the policy cannot evaluate,
a grant, an Always or an edit that no longer holds, a question) is left to the pause, which
handles it as before: a person, or the standing decision re-judged there (refused there, it
is forgotten, and the thread told).

What a decision leaves is what it left when the call paused: its audit entry (`decided` with
`auto_approve`/`auto_reject`, `always_approve`/`always_reject` or `approve_edited`, or
`grant_used`), hence its metric and its webhook delivery, the shadow rules' verdicts, and a
grant's, an Always's or an edit's note in the run's thread. There is no call record: the
entries name the call by an approval id no pending call has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from bot.engine.approvals import PendingApproval, arguments_sha
from bot.engine.automatic import Automatic
from bot.engine.journal import DecisionEntry, Execution
from bot.engine.questions import QUESTION_KIND
from bot.outage import log_failure
from bot.service.audit import AuditKind, audit_fields
from bot.service.core import ServiceCore
from bot.service.decisions.grants import until_text
from bot.service.judgement import Allowed, Attempt, Judgement, Way
from bot.service.policy.gate import subject_of_call
from bot.service.policy.rules import Policy
from bot.service.policy.shadow import shadow_verdicts
from bot.service.ports import Actor
from bot.service.replies import Code, Mention, Plain, Text, said, stored
from bot.store import keys
from bot.store.grants import Grant, GrantStore, canonical, grant_detail, grant_values
from bot.store.parts.edits import EditRecord
from bot.store.records import CallRecord, RunRecord, StickyDecision
from bot.store.scripts import text
from bot.untrusted import clean

log = logging.getLogger(__name__)

# Runs._new_call: the call as a pause would post it; notes in its dict the calls whose rule
# could not be decided (approval id -> why).
NewCall = Callable[[RunRecord, PendingApproval, str, dict[str, str]], CallRecord]


@dataclass(frozen=True)
class _Standing:
    """What earlier pauses of the run left to settle later calls (`InRun._standing`)."""

    always: dict[str, StickyDecision]  # Always decisions, by sticky key
    edits: list[EditRecord]  # unused edits

    def edited(self, call: CallRecord) -> EditRecord | None:
        """The edit whose call `call` is exactly, re-proposed (`Runs._match_edits`)."""
        sha = call.arguments_sha or arguments_sha(call.arguments)
        for edit in self.edits:
            if (edit.agent, edit.tool, edit.sha) == (call.agent, call.tool, sha):
                return edit
        return None


@dataclass(frozen=True)
class _Settled:
    call: CallRecord
    decision: Automatic
    grant: Grant | None = None
    always: StickyDecision | None = None  # an earlier Always decision of the run settled it
    edit: EditRecord | None = None  # the one-shot approval of this edit settled it
    detail: str = ""
    why: str = ""  # the rule's own reason, if it gives one


@dataclass(frozen=True)
class _Entry:
    """One audit entry of a decision made in the run (`audit_fields`'s arguments)."""

    kind: AuditKind
    call: CallRecord
    actor: Actor | None
    decision: str
    detail: str
    text: str = ""

    def fields(self) -> dict[str, str]:
        return audit_fields(
            kind=self.kind, call=self.call, actor=self.actor, decision=self.decision,
            detail=self.detail, text=self.text,
        )  # fmt: skip

    def plain(self) -> dict[str, str]:
        """The entry without what could keep it from being made or stored: no subject, no
        free text (the decision, who or what made it, the call's ids and rule), every value
        valid UTF-8."""
        fields = audit_fields(
            call=self.call, actor=self.actor, decision=self.decision,
            detail=f"{self.detail} (the rest of this entry could not be recorded)",
        )  # fmt: skip
        return {name: clean(value) for name, value in fields.items()}


class InRun:
    """`AutomaticDecisions` for one run (its record as its job took it)."""

    def __init__(
        self, core: ServiceCore, judgement: Judgement, grants: GrantStore, run: RunRecord,
        new_call: NewCall, execution: Execution | None = None,
    ) -> None:  # fmt: skip
        """`execution`: the attempt running the run; the decisions' audit entries ride with
        its next write (`Execution.riders`: the approved call's journal write, else before
        the next model call), stored before anything they cause."""
        self.core = core
        self.judgement = judgement
        self.grants = grants
        self.run = run
        self.new_call = new_call
        self.execution = execution

    async def decide(self, approvals: list[PendingApproval]) -> list[Automatic | None]:
        try:
            settled = await self._settle(approvals)
        except Exception:  # e.g. Redis away while reading grants: the pause decides, as before
            log_failure(log, "could not decide the calls of run %s in it", self.run.run_id)
            return [None] * len(approvals)
        await self._record([s for s in settled if s is not None])
        return [None if s is None else s.decision for s in settled]

    async def _settle(self, approvals: list[PendingApproval]) -> list[_Settled | None]:
        """Each call's settlement, or None where a person decides it."""
        version = self.core.policies.current().version
        settled: list[_Settled | None] = []
        any_grants: bool | None = None
        standing: _Standing | None = None
        for approval in approvals:
            if approval.kind == QUESTION_KIND:
                settled.append(None)
                continue
            undecided: dict[str, str] = {}
            call = self.new_call(self.run, approval, version, undecided)
            done: _Settled | None = None
            if undecided:
                pass  # a person decides it (the pause audits why)
            elif call.auto:
                done = await self._by_rule(call)
            else:
                if standing is None:
                    standing = await self._standing()
                edit = standing.edited(call)
                if edit is not None:  # not settled by it: the pause says why, and asks a person
                    settled.append(await self._by_edit(call, edit))
                    standing.edits.remove(edit)  # one call per edit
                    continue
                always = standing.always.get(call.sticky)
                if always is not None:  # refused: the pause forgets it, and says why
                    settled.append(await self._by_always(call, always))
                    continue
                if any_grants is None:  # one EXISTS, only for a call no rule decides
                    any_grants = await self.grants.any_in(self.run.team_id, self.run.channel_id)
                done = await self._by_grant(call) if any_grants else None
            settled.append(done)
        return settled

    async def _standing(self) -> _Standing:
        """The run's Always decisions and unused edits, in one round trip; a run that never
        paused has none (nothing to read)."""
        if not self.run.pause:
            return _Standing({}, [])
        pipe = self.core.store.redis.pipeline(transaction=False)
        pipe.hgetall(keys.sticky_key(self.run.run_id))
        pipe.hgetall(keys.edits_key(self.run.run_id))
        stickies, edits = await pipe.execute()
        always = {text(k): StickyDecision.from_json(text(k), text(v)) for k, v in stickies.items()}
        found = [EditRecord.from_json(text(k), text(v)) for k, v in edits.items()]
        return _Standing(always, [e for e in found if not e.used])

    async def _by_edit(self, call: CallRecord, edit: EditRecord) -> _Settled | None:
        """The agent's call re-proposed after `edit`, settled by that edit's one-shot approval
        (the edit was the decision: the editor's, on these very arguments), as `Runs.apply_edit`
        would settle it at a pause: if the editor may still decide it under the policy in force
        (Way.EDITED_CALL), and the approval is used up now, once, by this run's attempt."""
        execution = self.execution
        if execution is None:
            return None
        editor = Actor(edit.team, edit.by, self.run.enterprise_id)
        attempt = Attempt(Way.EDITED_CALL, edit_required=edit.required)
        judged = await self.judgement.settle(editor, self.run, call, attempt)
        if not isinstance(judged, Allowed):
            return None
        sha = call.arguments_sha or arguments_sha(call.arguments)
        used = await self.core.store.use_edit_in_run(
            self.run.run_id, edit, owner=execution.attempt, sha=sha, used_by=call.approval_id
        )
        return _Settled(call, Automatic(True), edit=edit) if used else None

    async def _by_always(self, call: CallRecord, always: StickyDecision) -> _Settled | None:
        """The Always decision made earlier in this run on this agent's tool, if the policy in
        force still lets its decider decide this call alone (as `Runs._apply_earlier_always`
        would settle it at a pause)."""
        decider = Actor(always.team, always.user, self.run.enterprise_id)
        approve = always.decision == "approved"
        attempt = Attempt(Way.EARLIER_ALWAYS, approve)
        judged = await self.judgement.settle(decider, self.run, call, attempt)
        if not isinstance(judged, Allowed):
            return None
        message = None if approve else (always.reason or None)
        return _Settled(call, Automatic(approve, message), always=always)

    async def _by_rule(self, call: CallRecord) -> _Settled | None:
        judged = await self.judgement.settle(None, self.run, call, Attempt(Way.RULE))
        if not isinstance(judged, Allowed):
            return None
        rule, auto = judged.rule, judged.auto
        source = "channel not in policy" if rule is None else rule.source
        reason = (rule.reason if rule is not None else "") or (
            f"automatic decision of policy rule {source}"
        )
        why = f": {reason}" if rule is not None and rule.reason else ""
        return _Settled(
            call, Automatic(auto == "approve", None if auto == "approve" else reason),
            detail=f"policy rule {source}{why}", why=rule.reason if rule is not None else "",
        )  # fmt: skip

    async def _by_grant(self, call: CallRecord) -> _Settled | None:
        """The grant that settles `call`, as `Runs._apply_grant` would pick it; None when none
        covers it or the first that does no longer holds (the pause drops it, and says so)."""
        run = self.run
        grants = await self.grants.for_tool(run.team_id, run.channel_id, call.sticky)
        subject = subject_of_call(call)
        covering = sorted(
            (g for g in grants if g.covers(subject)), key=lambda g: (-len(g.narrow), -g.until)
        )
        if not covering:
            return None
        grant = covering[0]
        grantor = Actor(grant.team, grant.user, run.enterprise_id)
        judged = await self.judgement.settle(
            grantor, run, call, Attempt(Way.GRANT_USE, grant=grant)
        )
        if not isinstance(judged, Allowed):
            return None
        return _Settled(call, Automatic(True), grant=grant)

    async def _record(self, settled: list[_Settled]) -> None:
        """Each decision's audit entries (riding with the run's next write, or one round trip
        of their own without an execution), and the thread's note (riding with them, where
        notes ride: `Runs.add_note_in`).

        The entries are made now, call by call: one whose shadow verdicts or fields cannot
        be made (a Python error, a value Redis cannot take) is written as a plain entry (the
        decision, who or what made it, the call's ids: `_plain`), and the others are whole.
        Each call's entries are a `DecisionEntry` rider: not stored, its approval does not let the
        tool run, nor its rejection the run go on (`RedisJournal.begin`, `Runs._ride`)."""
        policy = self.core.policies.current().policy.for_team(self.run.team_id)
        riders = [self._entries(policy, each) for each in settled]
        if riders and self.execution is not None:
            self.execution.riders.extend(riders)
        elif riders:
            try:
                pipe = self.core.store.redis.pipeline(transaction=False)
                for entries in riders:
                    entries(pipe)
                await pipe.execute()
                for entries in riders:
                    entries.written()
            except Exception:
                log_failure(log, "could not audit the decisions in run %s", self.run.run_id)
        store = self.core.store
        for each in settled:
            note = self._note(each)
            if note is None:
                continue
            if self.execution is not None and store.notes_ride:
                # With the audit entries, before the run's next model call or tool: written
                # before anything it tells of is visible (#32).
                ride = partial(store.add_note_in, run_id=self.run.run_id, text=stored(note))
                self.execution.riders.append(ride)
                continue
            try:
                await self.core.store.add_note(self.run.run_id, stored(note))
            except Exception:
                log_failure(log, "could not note a decision in run %s", self.run.run_id)

    def _entries(self, policy: Policy, each: _Settled) -> DecisionEntry:
        """`each`'s audit entries (its shadow verdicts, then its decision), made now, as the
        rider that writes them; a plain decision entry if they cannot be made."""
        call = each.call
        decision = self._decision(each)
        try:
            made = [*self._shadows(policy, call), decision]
            fields = [(e.kind, e.fields()) for e in made]
            for _, values in fields:  # (as Redis takes them: UTF-8, no lone surrogate)
                "".join(values.values()).encode("utf-8")
        except Exception:
            log_failure(
                log, "could not make the audit entries of call %s in run %s; its decision is "
                "audited without them", call.approval_id, self.run.run_id,
            )  # fmt: skip
            made = [decision]
            fields = [(decision.kind, decision.plain())]

        def write(pipe: Any) -> None:
            for kind, values in fields:
                self.core.audit_log.append_in(pipe, kind, **values)

        def written() -> None:
            for entry in made:
                entry.kind.tally(entry.decision, entry.call)

        what = f"{decision.decision} of {call.tool} (call {clean(call.call_id)[:64]})"
        return DecisionEntry(write, each.decision.approve, what, written)

    def _shadows(self, policy: Policy, call: CallRecord) -> list[_Entry]:
        return [
            _Entry(AuditKind.SHADOW, shadow.audited_call(call), None, shadow.would, shadow.why)
            for shadow in shadow_verdicts(policy, self.run, call)
        ]

    def _decision(self, each: _Settled) -> _Entry:
        """The entry of `each`'s decision: by an edit, an earlier Always, a rule or a grant."""
        call, grant, always, edit = each.call, each.grant, each.always, each.edit
        enterprise = self.run.enterprise_id
        if edit is not None:
            return _Entry(
                AuditKind.DECIDED, call, Actor(edit.team, edit.by, enterprise), "approve_edited",
                f"the one-shot approval of the edit of {edit.approval_id} "
                f"(digest {edit.digest})",
            )  # fmt: skip
        if always is not None:
            verb = "Always approve" if each.decision.approve else "Always reject"
            return _Entry(
                AuditKind.DECIDED, call, Actor(always.team, always.user, enterprise),
                "always_" + ("approve" if each.decision.approve else "reject"),
                f"{verb} decision on {always.approval_id}, re-judged under the current policy",
            )  # fmt: skip
        if grant is None:
            verdict = "approve" if each.decision.approve else "reject"
            return _Entry(AuditKind.DECIDED, call, None, f"auto_{verdict}", each.detail)
        return _Entry(
            AuditKind.GRANT_USED, call, Actor(grant.team, grant.user, enterprise), "approve",
            grant_detail(grant), grant_values(grant),
        )  # fmt: skip

    @staticmethod
    def _note(each: _Settled) -> Text | None:
        """What the run's thread is told: a grant's use (as when it settled a paused call),
        and a rejection with its reason (what the rejected call's card said); an automatic
        approval shows as the tool's progress line."""
        call, grant, always = each.call, each.grant, each.always
        if each.edit is not None:
            return said(
                "{tool} was called again with the arguments {who} edited, and runs with them "
                "(approved by that edit; no new request).",
                tool=Code(call.tool), who=Mention(each.edit.by),
            )  # fmt: skip
        if always is not None:
            return said(
                "{tool} was {shown} by the {verb} decision of {who} earlier in this run.",
                tool=Code(call.tool), shown="approved" if each.decision.approve else "rejected",
                verb="Always approve" if each.decision.approve else "Always reject",
                who=Mention(always.user),
            )  # fmt: skip
        if grant is not None:
            where = "".join(
                f" where {name} = {canonical(value)}"
                for name, value in sorted(grant.narrow.items())
            )
            return said(
                "{tool} was approved by the grant of {who} in this channel{where} "
                "(until {until}).",
                tool=Code(call.tool), who=Mention(grant.user), where=Plain(where, 400),
                until=until_text(grant.until),
            )  # fmt: skip
        if each.decision.approve:
            return None
        rule = Code(call.rule or "channel not in policy")
        if not each.why:
            return said("{tool} was rejected automatically by policy rule {rule}.",
                        tool=Code(call.tool), rule=rule)  # fmt: skip
        return said(
            "{tool} was rejected automatically by policy rule {rule}: {reason}",
            tool=Code(call.tool), rule=rule, reason=Plain(each.why, 600),
        )  # fmt: skip
