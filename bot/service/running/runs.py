"""Starting, executing (as jobs) and settling runs: pauses, results, failures, retries."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from bot.engine.approvals import arguments_sha
from bot.engine.context import RunContext
from bot.engine.journal import DecisionEntry, DecisionNotAudited, Execution, JournalUnavailable
from bot.engine.questions import QUESTION_KIND
from bot.engine.runner import (
    Decision,
    Failed,
    Finished,
    NeedsReview,
    Outcome,
    Paused,
    StopCheck,
    Stopped,
)
from bot.errors import cause_of
from bot.outage import log_failure, unreachable
from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.decisions.automatic import InRun
from bot.service.decisions.edits import EDITABLE_KINDS, edit_message
from bot.service.decisions.grants import grant_note, until_text
from bot.service.decisions.reviews import Reviews, beyond_text
from bot.service.digest import digest_of
from bot.service.judgement import Allowed, Attempt, Judgement, Refused, Way
from bot.service.oversight.advised import read_advised
from bot.service.oversight.details import context_of
from bot.service.policy.answerers import question_rule
from bot.service.policy.conditions import REQUESTED_AT, subject_of
from bot.service.policy.gate import keep_subject, rule_for, subject_of_call
from bot.service.policy.rules import CallRule, Verdict
from bot.service.policy.shadow import shadow_verdicts
from bot.service.ports import Actor
from bot.service.replies import Code, Mention, Plain, Reply, joined, naming, said, stored
from bot.service.running.follow_ups import FollowUps
from bot.service.running.limits import refusal, task_too_long
from bot.service.running.streaming import AnswerStream
from bot.store import keys
from bot.store.admission import AdmissionStore
from bot.store.grants import Grant, GrantStore, canonical, grant_detail, grant_values
from bot.store.journal import Queued, queue_riders, unwritten
from bot.store.queue import Acknowledgement, Job, JobQueue
from bot.store.records import (
    EARLIER_ALWAYS,
    GRANTED,
    SHOWN_ARGUMENTS,
    CallRecord,
    CallStatus,
    Decided,
    DecideResult,
    Rerouted,
    RunRecord,
    RunStatus,
)
from bot.store.runs import Ended, NotOwner, StoreError, Taken, now
from bot.store.scripts import text
from bot.untrusted import plain, redact

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
# Characters of a task kept in the audit trail (with its length): its run keeps it whole for
# the run's retention; the trail, for as long as it is kept, says which run and what it began.
AUDITED_TASK = 200


def audited_task(task: str) -> str:
    if len(task) <= AUDITED_TASK:
        return task
    return f"{task[:AUDITED_TASK]}… ({len(task):,} characters)"


def stored_value(value: Any) -> str:
    """A record field's value as the record stores it."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def time_call(call: CallRecord, rule: CallRule) -> None:
    """The call's timers, as the policy sets them when it is posted (bot/store/parts/timers.py)."""
    start = float(call.paused_at)
    call.expire_after = rule.expire_after  # expires_at: paused_at + expire_after
    call.remind_after, call.remind_max = rule.remind_after, rule.remind_max
    if rule.escalate_after and rule.escalate_to:
        call.escalate_after = rule.escalate_after
        call.escalate_at = start + rule.escalate_after
        call.escalate_to = json.dumps(list(rule.escalate_to))


class Runs:
    """A run from its command to its end, one job at a time."""

    def __init__(self, core: ServiceCore, judgement: Judgement, reviews: Reviews) -> None:
        self.core = core
        self.store = core.store
        self.judgement = judgement
        self.reviews = reviews
        self.grants = GrantStore(core.store.redis)
        self.follow_ups = FollowUps(core)

    async def start_run(
        self, actor: Actor, channel: str, agent_name: str | None, task: str, delivery_id: str = ""
    ) -> Reply:
        """Authorize a run and start it in the background; answers within Slack's 3 seconds.

        `delivery_id` (the command's trigger id) makes a replayed request start nothing (and
        take nothing from the person's or the channel's quota).
        """
        name = agent_name or self.core.engine.registry.default_name
        policy = self.core.policies.current().policy
        verdict = self.core.authorizer.served(policy, actor)  # a team the policy lists
        if verdict.allowed:
            policy = policy.for_team(actor.team_id)
            verdict = await self.core.authorizer.may_start(policy, actor, channel, name)
        if verdict.allowed and self.core.engine.registry.get(name) is None:
            verdict = Verdict(
                False,
                said(
                    "There is no agent named {name}. Agents here: {known}.",
                    name=Code(name),
                    known=joined(Code(n) for n in self.core.agent_names()),
                ),
            )
        if verdict.allowed and not task.strip():
            verdict = Verdict(
                False, said("Tell the agent what to do: {usage}.", usage=Code("/agent <task>"))
            )
        if verdict.allowed and task_too_long(self.core.limits, task):
            verdict = Verdict(False, task_too_long(self.core.limits, task))
        run_id = keys.new_run_id()
        if verdict.allowed:
            # A replay of a command already handled (`delivery_id`, the command's trigger id)
            # starts nothing and costs no quota.
            admission = await self.core.admission.admit(
                self.core.limits.quota,
                team=actor.team_id,
                user=actor.user_id,
                channel=channel,
                run_id=run_id,
                delivery_id=delivery_id,
            )
            if admission.verdict == "replay":
                log.info("ignored a replayed command (trigger %s)", delivery_id)
                return Reply(True)
            if admission.verdict != "ok":
                verdict = Verdict(False, refusal(self.core.limits, admission))
        if not verdict.allowed:
            self.core.spawn(
                self.core.audit(AuditKind.START_REFUSED, actor=actor, detail=verdict.reason),
                name="audit",
            )
            return Reply(False, verdict.said)
        stamp = float(now())
        run = RunRecord(
            run_id=run_id,
            team_id=actor.team_id,
            enterprise_id=actor.enterprise_id,
            user_id=actor.user_id,
            channel_id=channel,
            agent_name=name,
            task=task,
            created_at=stamp,
            updated_at=stamp,
            owner=self.core.new_owner(),
        )
        self.core.spawn(self._start(run), name=f"start-{run.run_id}")
        return Reply(True)

    async def _start(self, run: RunRecord) -> None:
        """Store the run (its message is then due): its start job is enqueued once the message
        is in Slack (`start_in`): its tools' thread, and a run whose message Slack refuses
        never starts."""
        words = audited_task(run.task)

        def audited(pipe: Any) -> None:
            self.core.audit_in(pipe, AuditKind.RUN_STARTED, run=run, text=words)

        try:  # its run message is now due (the outbox); its audit entry rides with the indexes
            await self.store.create_run(run, after=audited)
        except Exception:
            log_failure(log, "could not store new run %s", run.run_id)
            await self.core.safely(
                "tell the starter",
                self.core.notifier.tell(
                    run.channel_id,
                    run.user_id,
                    "The bot could not reach its database, so the "
                    "run did not start. Try again in a moment.",
                    team=run.team_id,
                ),
            )

    @staticmethod
    def start_in(pipe: Any, run: RunRecord) -> None:
        """The start job of a run whose first turn waits for its message (its tools' thread),
        written in the pipeline that records the message's post (or, when Slack has been
        away for `START_WITHOUT_MESSAGE`, without it). A run already taken, or not running,
        needs none; a duplicate is harmless (only one delivery takes an execution). If this
        never comes (the process stopped), the sweeper enqueues the start (a run due and
        not taken)."""
        if run.status == RunStatus.RUNNING and run.turn <= 1 and run.owner and "/" not in run.owner:
            JobQueue.enqueue_in(pipe, "start", run.run_id, run.owner)

    async def _settle(
        self, run: RunRecord, owner: str, outcome: Outcome, ack: Acknowledgement | None = None
    ) -> None:
        """Store and show what a start or resume ended with (an end carries the job's `ack`).
        Raises only when Redis is unreachable (or a write was not confirmed): the job is then
        retried."""
        try:
            await self._settle_unsafe(run, owner, outcome, ack)
        except Exception as exc:
            if unreachable(exc):
                raise  # a verdict written now could outlive what was not: retry (run_job)
            log_failure(log, "could not record the outcome of run %s", run.run_id)
            await self._fail(
                run, owner, f"The bot could not record the run's result ({redact(str(exc))})."
            )

    async def _settle_unsafe(
        self, run: RunRecord, owner: str, outcome: Outcome, ack: Acknowledgement | None
    ) -> None:
        if isinstance(outcome, Stopped):
            log.info("run %s was cancelled; its execution stopped before a model call", run.run_id)
            return
        if isinstance(outcome, Finished):
            try:  # its audit entry (and the job's ack) ride with the writes that follow the end
                ended = await self.store.finish(
                    run.run_id,
                    owner,
                    status=RunStatus.FINISHED,
                    text=outcome.output,
                    drop_snapshot=True,
                    channel=run.channel_id,
                    after=self._audited(AuditKind.RUN_FINISHED, run, outcome.output[:2000], ack),
                    history=outcome.history,  # kept by the script that ends the run
                    message_ts=run.message_ts,
                )
            except NotOwner:
                log.info("run %s not finished here: this execution no longer owns it", run.run_id)
                return
            if isinstance(ended, Ended) and ended.followups:
                await self.follow_ups.next_turn(run)  # a follow-up that came meanwhile
            return
        if isinstance(outcome, Failed):
            await self._fail(run, owner, outcome.error, ack)
            return
        if isinstance(outcome, NeedsReview):
            shown = f"`{plain(outcome.tool)}` (call `{plain(outcome.call_id)}`)"
            if outcome.call_id not in await self._approved_in_pause(run):
                await self._fail(run, owner, beyond_text([shown]))
                return
            what = f"Another attempt at this run stopped (or stalled) while {shown} was executing."
            await self.reviews.stop_for_review(run, owner, "resume", what)
            return
        await self._pause(run, owner, outcome)

    def _new_call(
        self, run: RunRecord, approval: Any, version: str, undecided: dict[str, str]
    ) -> CallRecord:
        """A pending call, with what the policy says about it and the digest that binds it.
        A call whose rule could not be decided is noted in `undecided` (approval id -> why)."""
        policy = self.core.policies.current().policy.for_team(run.team_id)
        subject = subject_of(approval.kind, approval.reading, approval.facts)
        paused_at = float(now())
        rule = policy.rule_for(
            channel=run.channel_id, agent=approval.agent, tool=approval.tool,
            subject={**subject, REQUESTED_AT: paused_at},
        )  # fmt: skip
        if rule is not None and approval.kind == QUESTION_KIND:
            rule = question_rule(rule, run.user_id, run.asked_by)
        approval_id = keys.new_approval_id(run.run_id)
        cut = len(approval.arguments) > SHOWN_ARGUMENTS  # only a cut copy needs the whole's hash
        call = CallRecord(
            approval_id=approval_id,
            run_id=run.run_id,
            index=approval.index,
            call_id=approval.call_id,
            agent=approval.agent,
            tool=approval.tool,
            kind=approval.kind,
            sticky=approval.sticky,
            arguments=approval.arguments[:SHOWN_ARGUMENTS],
            arguments_chars=len(approval.arguments) if cut else 0,
            arguments_sha=arguments_sha(approval.arguments) if cut else "",
            channel_id=run.channel_id,
            policy_version=version,
            paused_at=paused_at,
            requester=run.requester,  # who asked for this turn (empty: the starter)
            turn=run.turn if run.turn > 1 else 0,
        )
        keep_subject(call, subject)
        if rule is not None and rule.undecidable:
            undecided[approval_id] = (
                f"{rule.undecidable}; a person decides it under rule {rule.source}"
            )
        if rule is None:  # the channel left the policy while the run was going: fail closed
            call.auto, call.rule, call.allow_always = "reject", "channel not in policy", False
        else:
            call.required, call.allow_always, call.rule = (
                rule.required,
                rule.allow_always,
                rule.source,
            )
            call.approvers = json.dumps(list(rule.approvers))
            call.auto = rule.auto or ""
            call.confirm = (rule.confirm_value or "tool") if rule.confirm else ""
            call.allow_edit = approval.kind in EDITABLE_KINDS and rule.editable(approval.kind)
            time_call(call, rule)
        call.digest = digest_of(call)
        return call

    async def _pause(self, run: RunRecord, owner: str, outcome: Paused) -> None:
        version = self.core.policies.current().version
        undecided: dict[str, str] = {}
        calls = [self._new_call(run, a, version, undecided) for a in outcome.approvals]
        pairs = zip(calls, outcome.approvals, strict=True)
        contexts = {call.approval_id: context_of(approval) for call, approval in pairs}
        await self._match_edits(run, calls)
        since = float(now())
        try:
            await self.store.save_pause(
                run.run_id, owner, outcome.checkpoint, calls, since, contexts
            )
        except StoreError:
            log.error("run %s is no longer owned by this execution; pause not saved", run.run_id)
            return
        await self.core.audit(
            AuditKind.PAUSED, run=run, detail=f"{len(calls)} call(s) need a decision"
        )
        for call in (c for c in calls if c.approval_id in undecided):
            await self.core.audit(
                AuditKind.UNDECIDABLE, call=call, detail=undecided[call.approval_id]
            )
        policy = self.core.policies.current().policy.for_team(run.team_id)
        for call in calls:  # what the shadow rules would have done (they decide nothing)
            for shadow in shadow_verdicts(policy, run, call):
                await self.core.audit(
                    AuditKind.SHADOW, call=shadow.audited_call(call), decision=shadow.would,
                    detail=shadow.why,
                )  # fmt: skip
        for asked in (c for c in calls if c.kind == QUESTION_KIND):
            await self.core.audit(AuditKind.ASKED, run=run, call=asked, text=asked.arguments)
        try:  # the sweeper indexes them if this process stops first
            await self.store.timers.schedule([c for c in calls if not c.auto])
        except Exception:
            log_failure(
                log, "could not schedule the timers of run %s; the sweeper will", run.run_id
            )
        await self.auto_decide(run)
        # Its automatic decisions are applied: the sweeper need not look at it (unless a
        # decision since made it due again: then it stays).
        await self.store.not_due(run.run_id, since)

    async def _match_edits(self, run: RunRecord, calls: list[CallRecord]) -> None:
        """Point each new call that is exactly an edited call of the pause before (same agent,
        tool and canonical arguments) at that edit's unused one-shot approval; `apply_edit`
        settles it once the pause is saved (until then its card waits)."""
        edits = [e for e in await self.store.edits(run.run_id) if not e.used]
        for call in calls:
            if call.auto:
                continue
            # A call's SHA is stored only when its shown arguments are cut (layout 3).
            sha = call.arguments_sha or arguments_sha(call.arguments)
            for edit in edits:
                if (edit.agent, edit.tool, edit.sha) == (call.agent, call.tool, sha):
                    call.edit_grant = edit.approval_id
                    # use_edit.lua compares the stored SHA: keep it (and bind the digest to it)
                    call.arguments_sha = sha
                    call.digest = digest_of(call)
                    edits.remove(edit)
                    break

    async def apply_edit(self, run: RunRecord, call: CallRecord) -> str:
        """Settle a call the agent re-proposed after an edit with that edit's one-shot
        approval, if it still holds: the editor may still decide it under the policy in force,
        which still offers Edit and asks no more approvals than the edited call had. Otherwise
        (or if it is not exactly the edited call) it waits for a person on its own card.
        Returns the resume's owner token when this decided the pause's last call, else ''."""
        edit = next(
            (e for e in await self.store.edits(run.run_id) if e.approval_id == call.edit_grant),
            None,
        )
        why = "the edit is gone" if edit is None else ""
        if edit is not None:
            editor = Actor(edit.team, edit.by, run.enterprise_id)
            attempt = Attempt(Way.EDITED_CALL, edit_required=edit.required)
            judged = await self.judgement.settle(editor, run, call, attempt)
            why = judged.reason if isinstance(judged, Refused) else ""
        token = self.core.new_owner()
        result = None
        if not why:
            result = await self.store.use_edit(
                call.approval_id, call.edit_grant, owner=token, routed=str(call.routed)
            )
        if isinstance(result, Rerouted):  # routed anew since the read: judged again on a fresh one
            fresh = await self._fresh(call)
            return "" if fresh is None else await self.apply_edit(run, fresh)
        if isinstance(result, Decided) and edit is not None:
            await self.core.audit(
                AuditKind.DECIDED, call=call, actor=Actor(edit.team, edit.by, run.enterprise_id),
                decision="approve_edited",
                detail=f"the one-shot approval of the edit of {edit.approval_id} "
                f"(digest {edit.digest})",
            )  # fmt: skip
            note = said(
                "{tool} was called again with the arguments {who} edited, and runs with them "
                "(approved by that edit; no new request).",
                tool=Code(call.tool), who=Mention(edit.by),
            )  # fmt: skip
            await self.store.add_note(run.run_id, stored(note))
            return token if result.resume else ""
        if result is None and not call.decided:
            # Not (or no longer) the edited call: it waits for a person like any other call.
            await self.store.set_pending_call_fields(call.approval_id, {"edit_grant": ""})
            if why:
                note = said(
                    "The edit of {tool} by {who} no longer holds ({why}), so this call of it "
                    "waits for a decision like any other.",
                    tool=Code(call.tool), who=Mention(edit.by) if edit else "someone",
                    why=naming(why, edit.by if edit else ""),
                )  # fmt: skip
                await self.store.add_note(run.run_id, stored(note))
        return ""

    async def overruled(self, run_id: str) -> None:
        """An approval was refused because the rule in force rejects its call by itself
        (`Refused.overruled`): the pause's automatic decisions are applied now, so the call is
        rejected by that rule (audited, its card and the run go on as for any automatic
        rejection) rather than waiting until it expires."""
        run = await self.store.get_run(run_id)
        if run is not None and run.status == RunStatus.PAUSED:
            await self.auto_decide(run)

    async def auto_decide(self, run: RunRecord) -> None:
        """Apply the policy's automatic decisions (the pause's cards are shown by the projector).

        Safe to repeat, from any process: the sweeper repeats it for a pause whose worker
        stopped after saving it.
        """
        resume_owner = ""
        calls = await self.store.pause_calls(run.run_id)
        for call in calls:
            if call.decided:
                continue
            # Re-judged by the policy in force: it decides only if it still decides this call
            # automatically the same way (or now rejects it); otherwise a person decides. A
            # call posted for people that the policy in force now rejects by itself (reloaded
            # since, or routed by advice) is rejected so: nobody may approve it.
            judged = await self.judgement.settle(None, run, call, Attempt(Way.RULE))
            if not call.auto:
                if not isinstance(judged, Allowed) or judged.auto != "reject" or not judged.rule:
                    continue  # a person decides it (an automatic approval needs both: #32)
                routed = await self._to_rejection(run, call, judged.rule)
                if routed is None:
                    continue  # decided meanwhile
                call = routed
            elif not isinstance(judged, Allowed):
                await self._to_people(run, call)
                continue
            rule, auto = judged.rule, judged.auto
            source = "channel not in policy" if rule is None else rule.source
            reason = (rule.reason if rule is not None else "") or (
                f"automatic decision of policy rule {source}"
            )
            token = self.core.new_owner()
            result = await self.store.decide(
                call.approval_id,
                approve=auto == "approve",
                always=False,
                team="",
                user="policy",
                reason=reason,
                owner=token,
                routed=str(call.routed),  # routed anew since (advice): judged by the next pass
            )
            if isinstance(result, Decided):
                why = f": {reason}" if rule is not None and rule.reason else ""
                advised = read_advised(call) if rule is not None and rule.on_advice else None
                if advised is not None and advised.advice is not None:
                    why += f" (on the advisor's advice: risk {advised.advice.risk})"
                await self.core.audit(
                    AuditKind.DECIDED, call=call, decision=f"auto_{auto}",
                    detail=f"policy rule {source}{why}",
                )  # fmt: skip
                if result.resume:
                    resume_owner = token
        for call in await self.store.pause_calls(run.run_id):
            if not call.decided and call.edit_grant:
                resume_owner = await self.apply_edit(run, call) or resume_owner
            elif not call.decided:
                resume_owner = await self._apply_earlier_always(run, call) or resume_owner
        resume_owner = await self._apply_grants(run) or resume_owner
        if resume_owner:
            await self.core.enqueue("resume", run.run_id, resume_owner)

    async def _apply_grants(self, run: RunRecord) -> str:
        """Settle the pause's undecided calls that a channel grant covers, or drop the grants
        that no longer hold (one EXISTS when the channel has none). Returns the resume's owner
        token when this decided the pause's last call, else ''."""
        if not await self.grants.any_in(run.team_id, run.channel_id):
            return ""
        resume_owner = ""
        for call in await self.store.pause_calls(run.run_id):
            if not call.decided:
                resume_owner = await self._apply_grant(run, call) or resume_owner
        return resume_owner

    async def _apply_grant(self, run: RunRecord, call: CallRecord) -> str:
        """Settle `call` with a channel grant for its agent's tool that covers it (its
        narrowing, if any, matches the call's arguments) and still holds: not expired, its rule
        still has a `grant_max` at least as long, and its grantor may still decide the call
        alone. A grant that covers it but no longer holds is dropped (audited, said in the
        thread); with none left, the call waits for a person."""
        grants = await self.grants.for_tool(run.team_id, run.channel_id, call.sticky)
        subject = subject_of_call(call)
        covering = sorted(
            (g for g in grants if g.covers(subject)), key=lambda g: (-len(g.narrow), -g.until)
        )
        for grant in covering:
            token = await self._use_grant(run, call, grant)
            if token is not None:
                return token
        return ""

    async def _use_grant(self, run: RunRecord, call: CallRecord, grant: Grant) -> str | None:
        """Settle `call` with `grant` (its resume's owner token, or '' when the pause still
        waits), or drop the grant when it no longer holds (None)."""
        grantor = Actor(grant.team, grant.user, run.enterprise_id)
        judged = await self.judgement.settle(
            grantor, run, call, Attempt(Way.GRANT_USE, grant=grant)
        )
        if isinstance(judged, Refused):
            if await self.grants.drop(grant):
                why = judged.reason
                await self.core.audit(
                    AuditKind.GRANT_DROPPED, call=call, actor=grantor, decision="approve",
                    detail=f"{why}: {grant_detail(grant)}", text=grant_values(grant),
                )  # fmt: skip
                dropped = said(
                    "The grant by {who} for {tool} in this channel no longer holds ({why}), so "
                    "this call of it waits for a decision like any other.",
                    who=Mention(grant.user), tool=Code(call.tool), why=naming(why, grant.user),
                )  # fmt: skip
                await self.store.add_note(run.run_id, stored(dropped))
            return None
        token = self.core.new_owner()
        note = grant_note(grant, used=True)

        def noted(pipe: Any, result: DecideResult) -> None:
            if isinstance(result, Decided):
                pipe.hset(keys.call_key(call.approval_id), "granted", note)

        result = await self.store.decide(
            call.approval_id, approve=True, always=False, team=grant.team, user=grant.user,
            reason=f"grant by {grant.user}", owner=token, via=GRANTED + grant.approval_id,
            routed=str(call.routed), after=noted,
        )  # fmt: skip
        if isinstance(result, Rerouted):  # routed anew since the read: judged again on a fresh one
            fresh = await self._fresh(call)
            return "" if fresh is None else await self._use_grant(run, fresh, grant)
        if not isinstance(result, Decided):
            return ""
        await self.core.audit(
            AuditKind.GRANT_USED, call=call, actor=grantor, decision="approve",
            detail=grant_detail(grant), text=grant_values(grant),
        )  # fmt: skip
        where = "".join(
            f" where {name} = {canonical(value)}" for name, value in sorted(grant.narrow.items())
        )
        told = said(
            "{tool} was approved by the grant of {who} in this channel{where} (until {until}).",
            tool=Code(call.tool), who=Mention(grant.user), where=Plain(where, 400),
            until=until_text(grant.until),
        )  # fmt: skip
        await self.store.add_note(run.run_id, stored(told))
        return token if result.resume else ""

    async def _to_people(self, run: RunRecord, call: CallRecord) -> None:
        """A call posted for an automatic decision that the policy in force no longer makes:
        it waits for a person, under the rule now in force (timers as that rule sets them)."""
        policy = self.core.policies.current().policy.for_team(run.team_id)
        rule = rule_for(policy, run, call)
        if rule is None:
            return
        call.auto, call.rule, call.required = "", rule.source, rule.required
        call.allow_always, call.approvers = rule.allow_always, json.dumps(list(rule.approvers))
        call.confirm = (rule.confirm_value or "tool") if rule.confirm else ""
        call.paused_at = call.paused_at or float(now())
        time_call(call, rule)
        names = ("paused_at", "rule", "required", "allow_always", "approvers", "confirm",
                 "expire_after", "remind_after", "remind_max", "escalate_after",
                 "escalate_at", "escalate_to")  # fmt: skip
        fields = {"auto": "", **{name: stored_value(getattr(call, name)) for name in names}}
        if await self.store.route_pending_call(call.approval_id, fields):
            detail = f"policy rule {rule.source} (the policy in force decides it no longer)"
            await self.core.audit(AuditKind.ROUTED, call=call, detail=detail)
            await self.store.timers.schedule([call])
            await self.store.outbox.schedule(run.run_id)

    async def _to_rejection(
        self, run: RunRecord, call: CallRecord, rule: CallRule
    ) -> CallRecord | None:
        """A call posted for people that `rule`, in force, rejects by itself: stored as that
        rule has it (`auto: reject`, its name on the card and in the audit), for
        `auto_decide` to reject it as any automatic rejection. None: it is no longer pending."""
        call = dataclasses.replace(call)
        call.auto, call.rule, call.required = "reject", rule.source, rule.required
        call.allow_always, call.approvers = False, json.dumps(list(rule.approvers))
        call.confirm, call.allow_edit = "", False
        names = ("rule", "required", "allow_always", "approvers", "confirm", "allow_edit")
        fields = {"auto": "reject", **{name: stored_value(getattr(call, name)) for name in names}}
        # Routed anew: a decision judged on a read from before records nothing (decide.lua).
        if not await self.store.route_pending_call(call.approval_id, fields):
            return None
        detail = f"policy rule {rule.source} (the policy in force rejects it automatically)"
        await self.core.audit(AuditKind.ROUTED, call=call, detail=detail)
        # As stored now: the routing generation the rejection's decide.lua is to find.
        return await self._fresh(call)

    async def _fresh(self, call: CallRecord) -> CallRecord | None:
        """`call` read again, for a judgement on its routing as it is now (a decision judged on
        an older read records nothing: decide.lua, use_edit.lua); None once it is decided. Every
        standing way (a grant, an earlier Always, an edit's one-shot approval) is judged again
        so: each time its routing moved (advice, an escalation, a policy's automatic decision),
        which happens a bounded number of times."""
        fresh = await self.store.get_call(call.approval_id)
        return fresh if fresh is not None and not fresh.decided else None

    async def _apply_earlier_always(self, run: RunRecord, call: CallRecord) -> str:
        """Settle a new call with an Always decision made earlier in this run, if there is one
        for this agent's tool and the policy in force still lets its decider decide this call
        alone. Otherwise forget that decision (audited, and said in the run thread) so the call
        waits for a person like any other. Returns the resume's owner token when this decided
        the pause's last call, else ''. (Notes are `Text`, kept with `stored`: the projector
        renders them.)"""
        sticky = (await self.store.sticky_decisions(run.run_id)).get(call.sticky)
        if sticky is None:
            return ""
        decider = Actor(sticky.team, sticky.user, run.enterprise_id)
        approve = sticky.decision == "approved"
        attempt = Attempt(Way.EARLIER_ALWAYS, approve)
        judged = await self.judgement.settle(decider, run, call, attempt)
        verb = "Always approve" if approve else "Always reject"
        if isinstance(judged, Refused):
            if await self.store.drop_sticky(run.run_id, call.sticky):
                why = judged.reason
                await self.core.audit(
                    AuditKind.ALWAYS_DROPPED, call=call, decision=sticky.decision, detail=why
                )
                note = said(
                    "The {verb} decision by {who} on {tool} no longer holds ({why}), so this "
                    "call of it waits for a decision like any other.",
                    verb=verb, who=Mention(sticky.user), tool=Code(call.tool),
                    why=naming(why, sticky.user),
                )  # fmt: skip
                await self.store.add_note(run.run_id, stored(note))
            return ""
        token = self.core.new_owner()
        result = await self.store.decide(
            call.approval_id,
            approve=sticky.decision == "approved",
            always=False,
            team=sticky.team,
            user=sticky.user,
            reason=sticky.reason,
            owner=token,
            via=EARLIER_ALWAYS + sticky.approval_id,
            routed=str(call.routed),
        )
        if isinstance(result, Rerouted):  # routed anew since the read: judged again on a fresh one
            fresh = await self._fresh(call)
            return "" if fresh is None else await self._apply_earlier_always(run, fresh)
        if not isinstance(result, Decided):
            return ""
        await self.core.audit(
            AuditKind.DECIDED,
            call=call,
            actor=decider,
            decision=("always_approve" if sticky.decision == "approved" else "always_reject"),
            detail=f"{verb} decision on {sticky.approval_id}, re-judged under the current policy",
        )
        shown = "approved" if sticky.decision == "approved" else "rejected"
        note = said(
            "{tool} was {shown} by the {verb} decision of {who} earlier in this run.",
            tool=Code(call.tool), shown=shown, verb=verb, who=Mention(sticky.user),
        )  # fmt: skip
        await self.store.add_note(run.run_id, stored(note))
        return token if result.resume else ""

    async def take_next(self, consumer: str, count: int) -> list[tuple[Job | None, Taken]]:
        """Up to `count` jobs waiting for a worker, read for `consumer` and taken in the same
        round trip (`RunStore.take_next`: each one's attempt token is made here)."""
        tokens = [self.core.new_owner() for _ in range(count)]
        return await self.store.take_next(consumer, tokens)

    @property
    def takes_next(self) -> bool:
        """Whether `take_next` may be used (one server, no replicas to confirm writes)."""
        return self.store.takes_next

    async def undeliverable(self, run_id: str, what: str, cause: str) -> None:
        """Slack refused, for good, a message people need to follow or decide the run (its run
        message, an approval request): stop the run, and tell its starter why."""
        for _ in range(3):  # the run may change hands between the read and the end
            run = await self.store.get_run(run_id)
            if run is None or run.ended:
                return
            owner = "paused" if run.status == RunStatus.PAUSED else run.owner
            error = (
                f"The bot could not post {what} in this channel: {cause} "
                "The run was stopped; nothing further ran."
            )
            try:
                ended = await self.store.finish(
                    run_id,
                    owner,
                    status=RunStatus.FAILED,
                    text=error,
                    drop_snapshot=False,
                    channel=run.channel_id,
                )
            except NotOwner:  # it changed hands since the read: look again
                continue
            if isinstance(ended, Ended):
                await self.core.audit(AuditKind.RUN_FAILED, run=run, text=error)
                await self.core.safely(
                    "tell the starter",
                    self.core.notifier.tell(run.channel_id, run.user_id, error, team=run.team_id),
                )
                return

    async def run_job(
        self, job: Job, ack: Acknowledgement | None = None, taken_now: Taken | None = None
    ) -> None:
        """Execute one start or resume job. Idempotent: a delivery for a run that moved on, or
        a duplicate message, does nothing; a redelivery after a worker stopped continues only
        where that is safe (see `_safe_to_retry`). `ack`: the job's acknowledgement, sent with
        the run's end when the job ends it. `taken_now`: its execution as the worker took it
        with its read (`take_next`); None: taken here."""
        if taken_now is not None:  # (a skip is acknowledged by the worker, as below)
            took = taken_now
            attempt = taken_now.run.owner if taken_now.run is not None else ""
        else:
            attempt = f"{job.execution}/{self.core.new_owner()}"
            try:
                took = await self.store.take_run(
                    job.run_id, job.execution, job.message_id, attempt,
                    resume=job.kind == "resume", pause=job.pause,
                )  # fmt: skip
            except Exception as exc:
                if unreachable(exc):  # the take may stand, unconfirmed: not an attempt that ran
                    await self.store.forgive_attempt(job.run_id, attempt)
                raise
        taken, attempts = took.kind, took.attempts
        if taken == "skip" or took.run is None:
            return
        run = took.run
        run.owner = attempt
        if job.kind == "start" and run.turn <= 1 and not run.message_ts:
            # Enqueued before its message was shown (Slack away, or the sweeper): it runs once
            # the message is in Slack (its tools' thread), or after a while without it.
            run = await self._shown(run)
            if run.status != RunStatus.RUNNING or run.owner != attempt:
                return  # Slack refused its message for good (the run failed), or cancelled
        if taken == "retry":
            if attempts > MAX_ATTEMPTS:
                await self._fail(
                    run, attempt, f"The bot tried {MAX_ATTEMPTS} times to run this and each "
                    "attempt stopped before it finished; it gave up. Check the bot's logs.", ack,
                )  # fmt: skip
                return
            if not await self._retry_is_safe(run, job, attempt):
                return
            await self.core.audit(
                AuditKind.JOB_RETRIED, run=run, detail=f"{job.kind} job {job.message_id}"
            )
        # Taken just now: ownership confirmed for the first model call (`_stop_check`).
        execution = Execution(run.run_id, attempt, self.core.journal, owned=True)
        stream = AnswerStream(self.store.turns, run.run_id, run.turn)
        try:
            if job.kind == "start" and run.turn > 1:
                outcome = await self._next_turn(run, execution, stream)
                await self._ride(execution)  # (the turn's last progress lines)
                await stream.close()
                await self._settle(run, attempt, outcome, ack)
            elif job.kind == "start":
                outcome = await self.core.engine.start(
                    run.agent_name,
                    await self.store.whole_task(run),
                    self._context(run),
                    progress=self._progress(run, execution),
                    execution=execution,
                    stop=self._stop_check(execution),
                    stream=stream,
                    automatic=self._in_run(run, execution),
                )
                await self._ride(execution)
                await stream.close()
                await self._settle(run, attempt, outcome, ack)
            else:
                await self._resume_owned(run, attempt, execution, took, stream, ack)
        except Exception as exc:
            if unreachable(exc) or cause_of(exc, JournalUnavailable) is not None:
                # Redis unreachable, or a write no replica confirmed: no verdict. The job stays
                # unacknowledged and is retried when its lease lapses; the journal makes the
                # retry safe (a call left executing goes to a person). This attempt does not
                # count toward giving up: a failover's storm must not fail the run.
                await stream.close()
                await self.store.forgive_attempt(run.run_id, attempt)
                raise
            log_failure(log, "%s of run %s failed", job.kind, run.run_id)
            await stream.close()
            await self._fail(
                run, attempt, f"The bot failed while running this run ({redact(str(exc))})."
            )

    async def _next_turn(
        self, run: RunRecord, execution: Execution, stream: AnswerStream
    ) -> Outcome:
        """A follow-up turn: the conversation so far and what was said after it."""
        history = await self.store.turns.history(run.run_id)
        said = await self.store.turns.follow_up(run.run_id, run.turn)
        if history is None or said is None:
            return Failed(
                "The conversation so far is no longer stored (it outlived the bot's retention, "
                "or it was never kept), so the agent cannot go on with it. Start a new run."
            )
        return await self.core.engine.follow_up(
            run.agent_name,
            history,
            said.text,
            self._context(run),
            progress=self._progress(run, execution),
            execution=execution,
            stop=self._stop_check(execution),
            stream=stream,
            automatic=self._in_run(run, execution),
        )

    def _in_run(self, run: RunRecord, execution: Execution) -> InRun:
        """What decides, inside the run, the calls the policy decides by itself."""
        return InRun(self.core, self.judgement, self.grants, run, self._new_call, execution)

    def _stop_check(self, execution: Execution) -> StopCheck:
        """Asked by the engine before every model call: was the run cancelled meanwhile? Not
        if the store confirmed, since the last model call, that this attempt still owns the
        run (its take, or the journal's write after a tool: a cancel clears the owner); else
        read from the run's record (one HGET, in the round trip of the riders no journal write
        carried, e.g. a rejection's audit entry; a Redis error lets the run go on, and its next
        owner-checked write is refused anyway)."""

        async def stop() -> bool:
            if execution.confirmed():
                await self._ride(execution)  # before a model call: what must be stored first
                return False
            return await self._ride(execution, status=True) == RunStatus.CANCELLED

        return stop

    async def _ride(self, execution: Execution, status: bool = False) -> str:
        """Send the attempt's riders that no journal write carried (`Execution.riders`): an
        audit entry; a failure is logged, as a failed audit entry is. With `status`, the run's
        status is read in the same round trip and returned ("" when it could not be read: the
        run goes on, and its next owner-checked write is refused anyway).

        A decision's audit entry (`DecisionEntry`: a call decided in the run, e.g. an automatic
        rejection, or a hosted MCP approval, which takes effect with the next model call) is
        not best effort: one not stored is sent once more, and if it still is not, the run
        goes no further (`_unaudited`)."""
        riders = execution.take_riders()
        if not riders and not status:
            return ""
        replies: list[Any] = []
        written = 0  # the riders' commands, before the status read
        queued: Queued = [(r, -1, -1) for r in riders if isinstance(r, DecisionEntry)]
        try:
            async with self.store.redis.pipeline(transaction=False) as pipe:
                queued = queue_riders(pipe, riders, execution.run_id)
                written = len(pipe)
                if status:
                    pipe.hget(keys.run_key(execution.run_id), "status")
                replies = list(await pipe.execute(raise_on_error=False))
        except Exception:
            replies = []
        if riders and (not replies or any(isinstance(r, Exception) for r in replies[:written])):
            log_failure(log, "could not record what run %s stores first", execution.run_id)
        missing = unwritten(queued, replies)
        if missing:
            await self._unaudited(execution, missing)
        if not status:
            return ""
        found = replies[written] if len(replies) > written else None
        if found is None or isinstance(found, Exception):
            if not replies or isinstance(found, Exception):
                log.warning("could not check whether run %s was cancelled", execution.run_id)
            return ""
        return text(found)

    async def _unaudited(self, execution: Execution, missing: list[DecisionEntry]) -> None:
        """Decisions made in the run whose audit entries were not stored: sent once more (a
        passing fault); if any still is not, the run goes no further. An approval's: as a
        failed journal write (`JournalUnavailable`: no verdict, the job is retried and the
        call decided again, its tool not run meanwhile). A rejection's, which already stands
        in the run's state: the run fails, saying so (`DecisionNotAudited`), rather than go on
        with a decision the audit trail does not show."""
        queued: Queued = [(m, -1, -1) for m in missing]
        replies: list[Any] = []
        away: Exception | None = None
        try:
            async with self.store.redis.pipeline(transaction=False) as pipe:
                queued = queue_riders(pipe, missing, execution.run_id)
                replies = list(await pipe.execute(raise_on_error=False))
        except Exception as exc:
            log_failure(log, "could not audit the decisions of run %s", execution.run_id)
            away = exc
        missing = unwritten(queued, replies)
        if not missing:
            return
        what = "; ".join(m.what for m in missing)
        log.error("could not write the audit entry of %s in run %s: it goes no further",
                  what, execution.run_id)  # fmt: skip
        if any(m.approve for m in missing) or (away is not None and unreachable(away)):
            # (Redis away: no verdict either, as for any write it could not take)
            raise JournalUnavailable(f"could not write the audit entry of {what}") from away
        raise DecisionNotAudited(
            f"the bot could not write the audit entry of {what}, so the run was stopped "
            "rather than go on without it"
        )

    async def _shown(self, run: RunRecord, wait: float = 30.0) -> RunRecord:
        """The run once its message is in Slack (its thread is the tools' `thread_ts`, and a
        run whose message Slack refuses is stopped before it starts); after `wait` seconds of
        a Slack outage it starts anyway, and its messages follow when Slack is back."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while not run.message_ts and run.status == RunStatus.RUNNING and loop.time() < deadline:
            await asyncio.sleep(0.05)
            run = await self.store.get_run(run.run_id) or run
        return run

    async def _retry_is_safe(self, run: RunRecord, job: Job, attempt: str) -> bool:
        """Whether an earlier, stopped attempt of this execution lets this one go on.

        Yes if it executed nothing, or only this pause's approved calls, to completion (the
        retry reuses their recorded outputs). If it left one of those calls executing, a person
        must say what happened (review). If it ran anything else (a tool after a later model
        call, or any tool of a start), a retried model could ask for it again under another id:
        the run stops and says which calls may have run.
        """
        approved = await self._approved_in_pause(run) if job.kind == "resume" else set()
        unknown, beyond = [], []
        for key, entry in (await self.core.journal.entries(run.run_id)).items():
            owner = str(entry.get("owner", ""))
            if not owner.startswith(job.execution + "/") or owner == attempt:
                continue
            shown = f"`{plain(str(entry.get('tool', '?')))}` (call `{plain(key)}`)"
            if key not in approved:
                beyond.append(shown)
            elif entry.get("status") != "executed":
                unknown.append(shown)
        if beyond:
            await self._fail(run, attempt, beyond_text(beyond))
            return False
        if unknown:
            what = (
                "The worker executing this run stopped (or stalled) while "
                + ", ".join(unknown)
                + " was executing."
            )
            await self.reviews.stop_for_review(run, attempt, job.kind, what)
            return False
        return True

    async def _resume_owned(
        self, run: RunRecord, owner: str, execution: Execution, taken: Taken,
        stream: AnswerStream, ack: Acknowledgement | None = None,
    ) -> None:  # fmt: skip
        calls, snapshot = await self.store.pause_of(taken)
        if snapshot is None:
            await self._fail(run, owner, "The run's stored state is missing, so it cannot resume.")
            return
        changed = [c for c in calls if digest_of(c) != c.digest]
        if changed:
            await self._fail(
                run,
                owner,
                f"{len(changed)} decided call(s) changed since they were posted, so the run was "
                "not resumed and none of them ran.",
            )
            return
        # An approved edited call: the original is rejected with a message naming the edited
        # arguments, and the agent's re-proposed call uses the edit's one-shot approval.
        edited = [c for c in calls if c.status == CallStatus.APPROVED and c.edited_sha]
        approved = sum(c.status == CallStatus.APPROVED for c in calls) - len(edited)
        summary = f"Resuming: {approved} approved, {len(calls) - approved - len(edited)} rejected."
        if edited:
            summary += f" {len(edited)} approved with edits (the agent is asked to call again)."

        def resumed(pipe: Any) -> None:  # sent with the first tool's journal write, or alone
            self.core.audit_in(pipe, AuditKind.RESUMED, run=run, detail=summary)

        execution.riders.append(resumed)
        decisions = [
            Decision(
                call_id=c.call_id,
                approve=c.status == CallStatus.APPROVED and not c.edited_sha,
                message=edit_message(c) if c in edited else (c.reason or None),
                shown=(c.agent, c.tool, c.arguments_sha or arguments_sha(c.arguments)),
            )
            for c in calls
        ]
        try:
            outcome = await self.core.engine.resume(
                run.agent_name,
                snapshot,
                decisions,
                progress=self._progress(run, execution),
                execution=execution,
                run_id=run.run_id,
                stop=self._stop_check(execution),
                task=run.task or None,  # a snapshot refers to its run's task (layout 3)
                stream=stream,
                automatic=self._in_run(run, execution),
            )
        except BaseException:
            with contextlib.suppress(Exception):  # (the attempt stops anyway: say why it did)
                await self._ride(execution)
            raise
        await self._ride(execution)  # (neither a tool nor a model call sent them)
        await stream.close()
        await self._settle(run, owner, outcome, ack)

    async def _fail(
        self, run: RunRecord, owner: str, error: str, ack: Acknowledgement | None = None
    ) -> None:
        """End the run as failed (with the job's `ack`). `error` is plain text (escaped once,
        where it is shown)."""
        try:
            await self.store.finish(
                run.run_id,
                owner,
                status=RunStatus.FAILED,
                text=error,
                drop_snapshot=False,
                channel=run.channel_id,
                after=self._audited(AuditKind.RUN_FAILED, run, error, ack),
                message_ts=run.message_ts,
            )
        except NotOwner:
            log.info("run %s not failed here: this execution no longer owns it", run.run_id)

    def _audited(
        self, kind: AuditKind, run: RunRecord, words: str, ack: Acknowledgement | None = None
    ) -> Callable[[Any], Callable[[], None]]:
        """The audit entry of a run's end (`words`: its output or error, free text), and the
        acknowledgement of the job that ended it, written with `finish`'s index writes (only
        when it ended the run: they may ride on the end's own round trip, so their metric
        and the acknowledgement count once they are written)."""

        def audit(pipe: Any) -> Callable[[], None]:
            self.core.audit_in(pipe, kind, run=run, text=words, tally=False)
            AdmissionStore.forget_in(
                pipe, team=run.team_id, user=run.asked_by, channel=run.channel_id, run_id=run.run_id
            )
            if ack is not None:
                ack.send_in(pipe)

            def written() -> None:
                kind.tally("", None)
                if ack is not None:
                    ack.sent = True

            return written

        return audit

    async def _approved_in_pause(self, run: RunRecord) -> set[str]:
        calls = await self.store.pause_calls(run.run_id) if run.pause else []
        return {c.call_id for c in calls if c.status == CallStatus.APPROVED}

    @staticmethod
    def _context(run: RunRecord) -> RunContext:
        """What the turn's tools see: who asked for this turn (a follow-up's author, else the
        starter), and who started the run."""
        return RunContext(
            run_id=run.run_id,
            team_id=run.team_id,
            enterprise_id=run.enterprise_id,
            user_id=run.asked_by,
            starter_id=run.user_id,
            channel_id=run.channel_id,
            thread_ts=run.message_ts,
        )

    def _progress(
        self, run: RunRecord, execution: Execution
    ) -> Callable[[str], Coroutine[Any, Any, None]]:
        """Progress lines are recorded (shown with the run message, through the outbox) with
        the attempt's next write, in order (`Execution.riders`): the journal write of the
        tool they announce, else before the next model call or as the turn ends. A failure
        is logged: it never stops the run."""

        async def progress(text: str) -> None:
            def line(pipe: Any) -> None:
                self.store.add_progress_in(pipe, run.run_id, text)

            execution.riders.append(line)

        return progress
