"""The application service: start runs, authorize and apply decisions, resume exactly once.

This is where the rules live. Slack handlers call it with an `Actor` taken from the signed request
and an opaque approval id; it answers with what to tell that person. Runs execute in background
tasks so that Slack gets its acknowledgement within three seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.engine.context import RunContext
from bot.engine.journal import Execution
from bot.engine.runner import (
    Checkpoint,
    Decision,
    Engine,
    Failed,
    Finished,
    NeedsReview,
    Outcome,
    Paused,
)
from bot.service.authorize import Authorizer
from bot.service.digest import call_digest
from bot.service.policy import Verdict
from bot.service.policy_source import PolicySource
from bot.service.ports import Actor, Notifier
from bot.store import keys
from bot.store.audit import AuditLog
from bot.store.journal import RedisJournal
from bot.store.queue import Job, JobQueue
from bot.store.records import (
    AlreadyDecided,
    CallRecord,
    Decided,
    Gone,
    RunRecord,
    Snapshot,
    Voted,
)
from bot.store.runs import RunStore, StoreError, now
from bot.untrusted import inline, redact

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5

REJECT_REPLY = re.compile(r"^\s*(reject|deny)(?::|\s|$)\s*(.*)$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Reply:
    """What to tell the person who acted; `ok` is False when nothing changed because of them."""

    ok: bool
    text: str = ""


@dataclass(frozen=True)
class RejectForm:
    """What the reject modal needs: the call it is for and the reason to pre-fill."""

    call: CallRecord
    prefill: str


def when(timestamp: str) -> str:
    """A decision time as people read it (UTC)."""
    try:
        moment = datetime.fromtimestamp(float(timestamp), tz=UTC)
    except ValueError:
        return timestamp
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def already_text(result: AlreadyDecided) -> str:
    verb = "approved" if result.status == "approved" else "rejected"
    who = f"<@{result.decided_by}>" if result.decided_by else "someone"
    return f"This call was already {verb} by {who} at {when(result.decided_at)}. Nothing changed."


class ApprovalService:
    """Runs and decisions, for one bot process (any number of processes may share Redis)."""

    def __init__(
        self,
        *,
        store: RunStore,
        engine: Engine,
        notifier: Notifier,
        policies: PolicySource,
        authorizer: Authorizer,
        audit: AuditLog,
        queue: JobQueue,
        journal: RedisJournal,
    ) -> None:
        self.store = store
        self.engine = engine
        self.notifier = notifier
        self.policies = policies
        self.authorizer = authorizer
        self.audit_log = audit
        self.queue = queue
        self.journal = journal
        self.process_id = secrets.token_hex(6)
        self._tasks: set[asyncio.Task[None]] = set()
        self._refresh_locks: dict[str, asyncio.Lock] = {}

    # Background work ----------------------------------------------------------------------

    def _owner(self) -> str:
        return f"{self.process_id}:{secrets.token_hex(4)}"

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run `coro` in a tracked background task that cannot die silently."""

        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log.exception("background task %s failed", name)

        task = asyncio.create_task(guarded(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def later(self, what: str, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a best-effort call (a Slack message) in the background; failures are logged."""

        async def run() -> None:
            await self._safely(what, coro)

        self.spawn(run(), name=what)

    async def drain(self, timeout: float) -> None:
        """Wait for background runs to finish (on shutdown), up to `timeout` seconds."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    async def _safely(self, what: str, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a notifier call; a failure to show something never breaks a transition."""
        try:
            return await coro
        except Exception:
            log.exception("could not %s", what)
            return None

    async def audit(
        self,
        kind: str,
        *,
        run: RunRecord | None = None,
        call: CallRecord | None = None,
        actor: Actor | None = None,
        decision: str = "",
        detail: str = "",
    ) -> None:
        """Append to the audit trail; a failure is logged loudly but never breaks a flow."""
        fields = {"decision": decision, "detail": detail}
        if run is not None:
            fields.update(run_id=run.run_id, channel=run.channel_id, agent=run.agent_name)
            fields.update(team=run.team_id, user=run.user_id, enterprise=run.enterprise_id)
        if call is not None:
            fields.update(approval_id=call.approval_id, run_id=call.run_id, agent=call.agent)
            fields.update(tool=call.tool, digest=call.digest, channel=call.channel_id)
        if actor is not None:
            fields.update(team=actor.team_id, user=actor.user_id, enterprise=actor.enterprise_id)
        try:
            await self.audit_log.append(kind, **fields)
        except Exception:
            log.exception("could not append %s to the audit trail", kind)

    # Starting runs ------------------------------------------------------------------------

    def agent_names(self) -> list[str]:
        return list(self.engine.registry.agents)

    async def start_run(
        self, actor: Actor, channel: str, agent_name: str | None, task: str, delivery_id: str = ""
    ) -> Reply:
        """Authorize a run and start it in the background; answers within Slack's 3 seconds.

        `delivery_id` (the command's trigger id) makes a replayed request start nothing.
        """
        name = agent_name or self.engine.registry.default_name
        policy = self.policies.current().policy
        verdict = await self.authorizer.may_start(policy, actor, channel, name)
        if verdict.allowed and self.engine.registry.get(name) is None:
            known = ", ".join(f"`{n}`" for n in self.agent_names())
            verdict = Verdict(
                False, f"There is no agent named `{inline(name)}`. Agents here: {known}."
            )
        if verdict.allowed and not task.strip():
            verdict = Verdict(False, "Tell the agent what to do: `/agent <task>`.")
        if not verdict.allowed:
            self.spawn(
                self.audit("start_refused", actor=actor, detail=verdict.reason),
                name="audit",
            )
            return Reply(False, verdict.reason)
        stamp = now()
        run = RunRecord(
            run_id=keys.new_run_id(),
            team_id=actor.team_id,
            enterprise_id=actor.enterprise_id,
            user_id=actor.user_id,
            channel_id=channel,
            agent_name=name,
            task=task,
            status="running",
            created_at=stamp,
            updated_at=stamp,
            owner=self._owner(),
        )
        self.spawn(self._start(run, delivery_id), name=f"start-{run.run_id}")
        return Reply(True)

    async def _start(self, run: RunRecord, delivery_id: str) -> None:
        try:
            if delivery_id and not await self.store.first_delivery("command", delivery_id):
                log.info("ignored a replayed command (trigger %s)", delivery_id)
                return
            await self.store.create_run(run)
            await self.audit("run_started", run=run, detail=run.task)
        except Exception:
            log.exception("could not store new run %s", run.run_id)
            await self._safely(
                "tell the starter",
                self.notifier.tell(
                    run.channel_id,
                    run.user_id,
                    "The bot could not reach its database, so the "
                    "run did not start. Try again in a moment.",
                ),
            )
            return
        try:
            ts = await self.notifier.post_run(run)
        except Exception:
            log.exception("could not post the message of run %s", run.run_id)
            await self.store.finish(
                run.run_id, run.owner, status="failed", text="could not post", drop_snapshot=True
            )
            await self._safely(
                "tell the starter",
                self.notifier.tell(
                    run.channel_id,
                    run.user_id,
                    "The bot could not post in this channel; "
                    "is it a member? Invite it with `/invite @approval-bot` and try again.",
                ),
            )
            return
        run.message_ts = ts
        try:
            await self.store.set_run_message(run.run_id, ts)
        except Exception as exc:
            await self._fail(
                run, run.owner, f"The bot could not record the run's message ({redact(str(exc))})."
            )
            return
        try:
            await self.queue.enqueue("start", run.run_id, run.owner)
        except Exception:
            # The sweeper enqueues runs that were never taken by a worker; nothing is lost.
            log.exception("could not enqueue the start of run %s", run.run_id)

    def _context(self, run: RunRecord) -> RunContext:
        return RunContext(
            run_id=run.run_id,
            team_id=run.team_id,
            enterprise_id=run.enterprise_id,
            user_id=run.user_id,
            channel_id=run.channel_id,
            thread_ts=run.message_ts,
        )

    def _progress(self, run: RunRecord) -> Callable[[str], Coroutine[Any, Any, None]]:
        async def progress(text: str) -> None:
            await self.notifier.post_in_run_thread(run, text)

        return progress

    async def _settle(self, run: RunRecord, owner: str, outcome: Outcome) -> None:
        """Store and show what a start or resume ended with. Never raises."""
        try:
            await self._settle_unsafe(run, owner, outcome)
        except Exception as exc:
            log.exception("could not record the outcome of run %s", run.run_id)
            await self._fail(
                run, owner, f"The bot could not record the run's result ({redact(str(exc))})."
            )

    async def _settle_unsafe(self, run: RunRecord, owner: str, outcome: Outcome) -> None:
        if isinstance(outcome, Finished):
            if await self.store.finish(
                run.run_id, owner, status="finished", text=outcome.output, drop_snapshot=True
            ):
                await self.audit("run_finished", run=run, detail=outcome.output[:2000])
                await self._safely(
                    "post output", self.notifier.post_run_output(run, outcome.output)
                )
                await self._refresh_run(run.run_id)
            return
        if isinstance(outcome, Failed):
            await self._fail(run, owner, outcome.error)
            return
        if isinstance(outcome, NeedsReview):
            shown = f"`{inline(outcome.tool)}` (call `{inline(outcome.call_id)}`)"
            if outcome.call_id not in await self._approved_in_pause(run):
                await self._fail(run, owner, self._beyond_text([shown]))
                return
            what = f"Another attempt at this run stopped (or stalled) while {shown} was executing."
            await self._review(run, owner, "resume", what)
            return
        await self._pause(run, owner, outcome)

    def _new_call(self, run: RunRecord, approval: Any, version: str) -> CallRecord:
        """A pending call, with what the policy says about it and the digest that binds it."""
        policy = self.policies.current().policy
        rule = policy.rule_for(channel=run.channel_id, agent=approval.agent, tool=approval.tool)
        approval_id = keys.new_approval_id(run.run_id)
        call = CallRecord(
            approval_id=approval_id,
            run_id=run.run_id,
            index=approval.index,
            call_id=approval.call_id,
            agent=approval.agent,
            tool=approval.tool,
            kind=approval.kind,
            sticky=approval.sticky,
            arguments=approval.arguments,
            channel_id=run.channel_id,
            policy_version=version,
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
        call.digest = self._digest(call)
        return call

    @staticmethod
    def _digest(call: CallRecord) -> str:
        return call_digest(
            agent=call.agent,
            tool=call.tool,
            arguments=call.arguments,
            run_id=call.run_id,
            call_id=call.call_id,
            policy_version=call.policy_version,
        )

    async def _pause(self, run: RunRecord, owner: str, outcome: Paused) -> None:
        version = self.policies.current().version
        calls = [self._new_call(run, a, version) for a in outcome.approvals]
        cp = outcome.checkpoint
        try:
            await self.store.save_pause(
                run.run_id, owner, Snapshot(cp.state, cp.sdk_version, cp.fingerprint), calls
            )
        except StoreError:
            log.error("run %s is no longer owned by this execution; pause not saved", run.run_id)
            return
        await self.audit("paused", run=run, detail=f"{len(calls)} call(s) need a decision")
        await self._show_pause(run)

    async def _show_pause(self, run: RunRecord) -> None:
        """Apply the policy's automatic decisions and post the pause's approval messages.

        Safe to repeat, from any process: the sweeper repeats it for a pause whose worker
        stopped after saving it. Each message is posted by one caller only.
        """
        resume_owner = ""
        calls = await self.store.pause_calls(run.run_id)
        for call in calls:
            if not call.auto or call.decided:
                continue
            token = self._owner()
            result = await self.store.decide(
                call.approval_id,
                approve=call.auto == "approve",
                always=False,
                team="",
                user="policy",
                reason=f"automatic decision of policy rule {call.rule}",
                owner=token,
            )
            if isinstance(result, Decided):
                await self.audit(
                    "decided", call=call, decision=f"auto_{call.auto}", detail=call.rule
                )
                if result.resume:
                    resume_owner = token
        current = await self.store.get_run(run.run_id) or run
        unposted = []
        for call in await self.store.pause_calls(run.run_id):
            if call.message_ts or not await self.store.claim_once(
                f"post:{call.approval_id}", ttl=3600
            ):
                continue
            if not await self._post_approval(current, call):
                unposted.append(call)
        if unposted and not resume_owner:
            names = ", ".join(f"`{inline(c.tool)}`" for c in unposted)
            error = (
                f"The bot could not post the approval request for {names} in this channel, so "
                "nobody could decide it; the run was stopped. Nothing further ran."
            )
            if await self.store.finish(
                run.run_id, "paused", status="failed", text=error, drop_snapshot=False
            ):
                await self.audit("run_failed", run=run, detail=error)
                await self._safely("post failure", self.notifier.post_in_run_thread(run, error))
                await self._safely(
                    "tell the starter", self.notifier.tell(run.channel_id, run.user_id, error)
                )
        await self._refresh_run(run.run_id)
        if resume_owner:
            await self._enqueue("resume", run.run_id, resume_owner)

    async def _post_approval(self, run: RunRecord, call: CallRecord) -> bool:
        """Post one approval message (one retry) and index it; False when it could not be."""
        for attempt in (1, 2):
            try:
                ts = await self.notifier.post_approval(run, call)
                await self.store.set_call_message(call.approval_id, run.channel_id, ts)
                return True
            except Exception:
                log.warning(
                    "posting the approval message of %s failed (attempt %d)",
                    call.approval_id,
                    attempt,
                    exc_info=True,
                )
        return False

    async def _fail(self, run: RunRecord, owner: str, error: str) -> None:
        if await self.store.finish(
            run.run_id, owner, status="failed", text=error, drop_snapshot=False
        ):
            await self.audit("run_failed", run=run, detail=error)
            await self._safely(
                "post failure", self.notifier.post_in_run_thread(run, f":x: {error}")
            )
            await self._refresh_run(run.run_id)

    async def _refresh_run(self, run_id: str) -> None:
        """Re-render the run message from the latest record; one update at a time per run, so an
        older status never overwrites a newer one from this process."""
        lock = self._refresh_locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            run = await self._safely("read run", self.store.get_run(run_id))
            if run is not None and run.message_ts:
                await self._safely("update run message", self.notifier.update_run(run))
            if run is None or run.status in ("finished", "failed"):
                self._refresh_locks.pop(run_id, None)

    # Deciding -----------------------------------------------------------------------------

    async def _authorize(self, actor: Actor, call: CallRecord) -> tuple[RunRecord | None, Verdict]:
        run = await self.store.get_run(call.run_id)
        if run is None:
            return None, Verdict(False, "This run no longer exists.")
        policy = self.policies.current().policy
        rule = policy.rule_for(channel=run.channel_id, agent=call.agent, tool=call.tool)
        verdict = await self.authorizer.may_decide(
            policy,
            actor,
            run_team=run.team_id,
            run_starter=run.user_id,
            channel=run.channel_id,
            tool=call.tool,
            rule=rule,
        )
        return run, verdict

    async def _check(
        self, actor: Actor, approval_id: str, *, approve: bool, always: bool
    ) -> tuple[CallRecord, RunRecord] | Reply:
        """Everything that must hold before a decision is recorded; a Reply when it does not."""
        call = await self.store.get_call(approval_id)
        if call is None:
            return Reply(False, Gone().why)
        run, verdict = await self._authorize(actor, call)
        # The checks, in order; who decided is told only to people allowed to decide.
        if run is None or not verdict.allowed:
            reply = Reply(False, verdict.reason)
        elif call.decided:
            earlier = AlreadyDecided(call.status, call.decided_by, call.decided_at, call.via)
            reply = Reply(False, already_text(earlier))
        elif always and (not call.allow_always or (approve and call.required > 1)):
            reply = Reply(
                False,
                f"Always decisions are not allowed for tool `{inline(call.tool)}`: "
                "decide this call on its own.",
            )
        elif self._digest(call) != call.digest:
            reply = Reply(
                False, "This call changed since it was posted, so no decision can apply to it."
            )
        else:
            return call, run
        decision = ("always_" if always else "") + ("approve" if approve else "reject")
        await self.audit("refused", call=call, actor=actor, decision=decision, detail=reply.text)
        return reply

    async def reject_form(
        self, actor: Actor, approval_id: str, *, always: bool
    ) -> RejectForm | Reply:
        """Check a reject click before its modal opens: the modal only opens for a live call."""
        checked = await self._check(actor, approval_id, approve=False, always=always)
        if isinstance(checked, Reply):
            return checked
        call, _ = checked
        comments = await self.store.comments(approval_id)
        # Only comments by people who may decide the call pre-fill the reason the model gets.
        return RejectForm(call, "\n".join(c["text"] for c in comments if c.get("approver")))

    async def decide(
        self, actor: Actor, approval_id: str, *, approve: bool, always: bool, reason: str = ""
    ) -> Reply:
        """Authorize and record one decision; resume the run if it was the pause's last."""
        checked = await self._check(actor, approval_id, approve=approve, always=always)
        if isinstance(checked, Reply):
            return checked
        call, run = checked
        owner = self._owner()
        result = await self.store.decide(
            approval_id,
            approve=approve,
            always=always,
            team=actor.team_id,
            user=actor.user_id,
            reason=reason.strip(),
            owner=owner,
        )
        decision = ("always_" if always else "") + ("approve" if approve else "reject")
        if isinstance(result, AlreadyDecided):
            reply = Reply(False, already_text(result))
        elif isinstance(result, Gone):
            reply = Reply(False, result.why)
        elif isinstance(result, Voted) and result.repeated:
            reply = Reply(
                False,
                f"You already approved this call. It needs {result.required} different "
                f"approvers; {result.votes} so far.",
            )
        else:
            reply = Reply(True)
        if not reply.ok:
            await self.audit(
                "refused", call=call, actor=actor, decision=decision, detail=reply.text
            )
            return reply
        if isinstance(result, Voted):
            await self.audit(
                "approval_vote", call=call, actor=actor, decision=decision,
                detail=f"{result.votes} of {result.required}",
            )  # fmt: skip
            self.later("show vote", self._show_call(run, approval_id))
            return reply
        assert isinstance(result, Decided)
        for settled in result.settled:
            via = "" if settled == approval_id else f"always decision on {approval_id}"
            target = call if settled == approval_id else await self.store.get_call(settled)
            await self.audit(
                "decided", call=target, actor=actor, decision=decision, detail=reason.strip() or via
            )
        self.spawn(self._after_decision(run, result, owner), name=f"decided-{run.run_id}")
        return reply

    async def _show_call(self, run: RunRecord, approval_id: str) -> None:
        call = await self.store.get_call(approval_id)
        if call is not None:
            await self.notifier.update_approval(run, call)

    async def _after_decision(self, run: RunRecord, result: Decided, owner: str) -> None:
        """Resume if the decision completed the pause, then show it on its message(s)."""
        if result.resume:
            await self._enqueue("resume", run.run_id, owner)
        try:
            for approval_id in result.settled:
                await self._safely("update approval", self._show_call(run, approval_id))
            await self._refresh_run(run.run_id)
        except Exception:
            log.exception("could not show the decision on run %s", run.run_id)

    async def _enqueue(self, kind: str, run_id: str, execution: str) -> None:
        try:
            await self.queue.enqueue(kind, run_id, execution)
        except Exception:
            log.exception("could not enqueue %s of run %s; the sweeper will", kind, run_id)

    async def thread_reply(
        self, actor: Actor, channel: str, thread_ts: str, text: str
    ) -> Reply | None:
        """A reply in an approval message's thread: a rejection with a reason, or a comment.

        Returns None when the thread is not an approval message's (nothing to do).
        """
        approval_id = await self.store.approval_for_message(channel, thread_ts)
        if approval_id is None:
            return None
        match = REJECT_REPLY.match(text)
        if match:
            return await self.decide(
                actor, approval_id, approve=False, always=False, reason=match.group(2)
            )
        call = await self.store.get_call(approval_id)
        if call is not None and not call.decided:
            _, verdict = await self._authorize(actor, call)
            await self.store.add_comment(
                approval_id, actor.user_id, text, from_approver=verdict.allowed
            )
        return Reply(True)

    # Resuming -----------------------------------------------------------------------------

    # Jobs (run by workers) ------------------------------------------------------------------

    async def run_job(self, job: Job) -> None:
        """Execute one start or resume job. Idempotent: a delivery for a run that moved on, or
        a duplicate message, does nothing; a redelivery after a worker stopped continues only
        where that is safe (see `_safe_to_retry`)."""
        run = await self.store.get_run(job.run_id)
        if run is None:
            return
        attempt = f"{job.execution}/{self._owner()}"
        taken, attempts = await self.store.take(job.run_id, job.execution, job.message_id, attempt)
        if taken == "skip":
            return
        run.owner = attempt
        if taken == "retry":
            if attempts > MAX_ATTEMPTS:
                await self._fail(
                    run, attempt, f"The bot tried {MAX_ATTEMPTS} times to run this and each "
                    "attempt stopped before it finished; it gave up. Check the bot's logs."
                )  # fmt: skip
                return
            if not await self._retry_is_safe(run, job, attempt):
                return
            await self.audit("job_retried", run=run, detail=f"{job.kind} job {job.message_id}")
        execution = Execution(run.run_id, attempt, self.journal)
        try:
            if job.kind == "start":
                outcome = await self.engine.start(
                    run.agent_name,
                    run.task,
                    self._context(run),
                    progress=self._progress(run),
                    execution=execution,
                )
                await self._settle(run, attempt, outcome)
            else:
                await self._resume_owned(run, attempt, execution)
        except Exception as exc:
            log.exception("%s of run %s failed", job.kind, run.run_id)
            await self._fail(
                run, attempt, f"The bot failed while running this run ({redact(str(exc))})."
            )

    async def _approved_in_pause(self, run: RunRecord) -> set[str]:
        calls = await self.store.pause_calls(run.run_id) if run.pause else []
        return {c.call_id for c in calls if c.status == "approved"}

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
        for key, entry in (await self.journal.entries(run.run_id)).items():
            owner = str(entry.get("owner", ""))
            if not owner.startswith(job.execution + "/") or owner == attempt:
                continue
            shown = f"`{inline(str(entry.get('tool', '?')))}` (call `{inline(key)}`)"
            if key not in approved:
                beyond.append(shown)
            elif entry.get("status") != "executed":
                unknown.append(shown)
        if beyond:
            await self._fail(run, attempt, self._beyond_text(beyond))
            return False
        if unknown:
            what = (
                "The worker executing this run stopped (or stalled) while "
                + ", ".join(unknown)
                + " was executing."
            )
            await self._review(run, attempt, job.kind, what)
            return False
        return True

    @staticmethod
    def _beyond_text(calls: list[str]) -> str:
        return (
            "The worker executing this run stopped (or stalled) after these calls had started: "
            + ", ".join(calls)
            + ". They may have had their effect, and a retried agent could ask for them again, "
            "so the run was stopped instead of retried. Check what they did, then start a new "
            "run if needed."
        )

    async def _review(self, run: RunRecord, attempt: str, kind: str, what: str) -> None:
        """Stop for a person: whether a call had its effect is unknown. Nothing re-runs."""
        review_id = keys.new_approval_id(run.run_id)
        text = (
            f"{what} Whether it had its effect is unknown, so the bot did not run it again. "
            "Check what happened, then choose: *Mark done* (continue; the agent is told the "
            "call was done) or *Run again* (the call runs once more)."
        )
        if not await self.store.to_review(run.run_id, attempt, review_id, text, kind):
            return
        await self.audit("needs_review", run=run, detail=text)
        await self._post_review(run, review_id, text)
        await self._refresh_run(run.run_id)

    async def _post_review(self, run: RunRecord, review_id: str, text: str) -> None:
        """Post the review request (one retry); the sweeper posts it later if this fails."""
        for _ in (1, 2):
            try:
                ts = await self.notifier.post_review(run, review_id, text)
                await self.store.set_run_fields(run.run_id, review_ts=ts)
                return
            except Exception:
                log.warning("could not post the review of run %s", run.run_id, exc_info=True)

    async def resolve_review(self, actor: Actor, review_id: str, *, action: str) -> Reply:
        """A person settles a review: mark the unknown calls done, or run them again."""
        run_id = keys.run_of(review_id)
        run = await self.store.get_run(run_id) if run_id else None
        if run is None or run.review_id != review_id or run.status != "needs_review":
            return Reply(False, "This review is already settled, or the run no longer exists.")
        policy = self.policies.current().policy
        tools = {
            str(e.get("tool", ""))
            for e in (await self.journal.entries(run.run_id)).values()
            if e.get("status") == "executing"
        } or {"*"}
        for tool in sorted(tools):
            rule = policy.rule_for(channel=run.channel_id, agent=run.agent_name, tool=tool)
            verdict = await self.authorizer.may_decide(
                policy, actor, run_team=run.team_id, run_starter=run.user_id,
                channel=run.channel_id, tool=tool, rule=rule,
            )  # fmt: skip
            if not verdict.allowed:
                await self.audit("refused", run=run, actor=actor, decision=f"review_{action}",
                                 detail=verdict.reason)  # fmt: skip
                return Reply(False, verdict.reason)
        execution = self._owner()
        status = "running" if run.review_kind == "start" else "resuming"
        changed = await self.store.resolve_review(
            run.run_id, review_id, action=action, execution=execution, user=actor.user_id,
            status=status,
        )  # fmt: skip
        if changed is None:
            return Reply(False, "This review is already settled.")
        await self.audit(
            "review_settled", run=run, actor=actor, decision=action, detail=", ".join(changed)
        )
        verb = "marked the unknown call(s) done" if action == "done" else "chose to run them again"
        self.later(
            "post review outcome",
            self.notifier.post_in_run_thread(run, f"<@{actor.user_id}> {verb}; continuing."),
        )
        await self._enqueue(run.review_kind or "resume", run.run_id, execution)
        self.later("update run message", self._refresh_run(run.run_id))
        return Reply(True)

    async def _resume_owned(self, run: RunRecord, owner: str, execution: Execution) -> None:
        calls = await self.store.pause_calls(run.run_id)
        snapshot = await self.store.load_snapshot(run.run_id)
        if snapshot is None:
            await self._fail(run, owner, "The run's stored state is missing, so it cannot resume.")
            return
        changed = [c for c in calls if self._digest(c) != c.digest]
        if changed:
            await self._fail(
                run,
                owner,
                f"{len(changed)} decided call(s) changed since they were posted, so the run was "
                "not resumed and none of them ran.",
            )
            return
        await self._refresh_run(run.run_id)
        approved = sum(c.status == "approved" for c in calls)
        summary = f"Resuming: {approved} approved, {len(calls) - approved} rejected."
        await self.audit("resumed", run=run, detail=summary)
        await self._safely("post resume note", self.notifier.post_in_run_thread(run, summary))
        decisions = [
            Decision(
                call_id=c.call_id,
                approve=c.status == "approved",
                always=c.always,
                message=c.reason or None,
                shown=(c.agent, c.tool, c.arguments),
            )
            for c in calls
        ]
        checkpoint = Checkpoint(snapshot.state, snapshot.sdk_version, snapshot.fingerprint)
        outcome = await self.engine.resume(
            run.agent_name,
            checkpoint,
            decisions,
            progress=self._progress(run),
            execution=execution,
        )
        await self._settle(run, owner, outcome)

    # Liveness -----------------------------------------------------------------------------

    async def sweep_forever(self, every: float) -> None:
        """Re-enqueue, every `every` seconds, executions no worker ever took."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.requeue_stalled(older_than=every * 2)
            except Exception:
                log.warning("sweep for stalled runs failed", exc_info=True)

    async def requeue_stalled(self, *, older_than: float) -> int:
        """Finish what a stopped process left half done; returns how many runs it touched.

        - a run waiting for a worker that never got its job (the process that should have
          enqueued it stopped first): enqueue it again (a duplicate job is harmless: only one
          delivery can take an execution);
        - a pause saved but not shown (its worker stopped before posting the messages);
        - a review not posted.
        Then trim the job stream of entries every worker is done with.
        """
        count = 0
        cutoff = float(now()) - older_than
        for run_id in await self.store.active_runs():
            run = await self.store.get_run(run_id)
            if run is None or run.status in ("finished", "failed"):
                await self.store.forget_active(run_id)
                continue
            if float(run.updated_at or 0) > cutoff or not run.message_ts:
                continue
            if run.status in ("running", "resuming") and run.owner and "/" not in run.owner:
                kind = "start" if run.status == "running" else "resume"
                await self.store.set_run_fields(run_id, updated_at=now())  # once per interval
                await self.queue.enqueue(kind, run_id, run.owner)
                count += 1
            elif run.status == "paused" and any(
                not c.message_ts for c in await self.store.pause_calls(run_id)
            ):
                await self._show_pause(run)
                count += 1
            elif (
                run.status == "needs_review"
                and not run.review_ts
                and await self.store.claim_once(f"review:{run.review_id}", ttl=int(older_than))
            ):
                await self._post_review(run, run.review_id, run.error)
                count += 1
        await self.queue.trim()
        return count
