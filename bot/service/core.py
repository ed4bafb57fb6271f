"""What every part of the application service shares: its collaborators, background tasks,
the audit trail, and small helpers over runs and calls."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections.abc import Callable, Coroutine
from typing import Any

from bot import metrics
from bot.engine.context import RunContext
from bot.engine.runner import (
    Engine,
)
from bot.service.authorize import Authorizer
from bot.service.digest import call_digest
from bot.service.foreground import Foreground
from bot.service.limits import StartLimits
from bot.service.policy import CallRule, Policy, Verdict
from bot.service.policy_source import PolicySource
from bot.service.ports import Actor, Notifier
from bot.store.admission import AdmissionStore
from bot.store.audit import AuditLog
from bot.store.journal import RedisJournal
from bot.store.queue import JobQueue
from bot.store.records import (
    CallRecord,
    RunRecord,
)
from bot.store.runs import Ended, NotOwner, RunStore

log = logging.getLogger(__name__)


def _count(kind: str, decision: str, call: CallRecord | None) -> None:
    if kind == "decided":
        metrics.decided(decision, call.paused_at if call is not None else "")
    elif kind == "approval_vote":
        metrics.decided("vote")
    elif kind == "refused":
        metrics.decided("refused")
    elif kind == "run_started":
        metrics.RUNS_STARTED.inc()
    elif kind == "resumed":
        metrics.RESUMES.inc()
    elif kind == "run_failed":
        metrics.RUN_FAILURES.inc()
    elif kind == "expired":
        metrics.EXPIRIES.inc()
    elif kind == "cancelled" and call is None:  # the run (each cancelled call is audited too)
        metrics.RUNS_CANCELLED.inc()


class ServiceCore:
    """The service's collaborators and shared helpers (see `ApprovalService`)."""

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
        admission: AdmissionStore,
        limits: StartLimits | None = None,
        foreground: Foreground | None = None,
    ) -> None:
        self.store = store
        self.engine = engine
        self.notifier = notifier
        self.policies = policies
        self.authorizer = authorizer
        self.audit_log = audit
        self.queue = queue
        self.journal = journal
        self.admission = admission
        self.limits = limits or StartLimits()
        # Slack's requests in flight in this process; deferrable work waits for a lull.
        self.foreground = foreground or Foreground()
        self.process_id = secrets.token_hex(6)
        self._tasks: set[asyncio.Task[None]] = set()

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
        """Run a best-effort call (a private reply) in the background; failures are logged."""

        async def run() -> None:
            await self._safely(what, coro)

        self.spawn(run(), name=what)

    async def drain(self, timeout: float) -> None:
        """Wait for background runs to finish (on shutdown), up to `timeout` seconds."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    async def abandon(self) -> None:
        """Cancel the background tasks still running after the drain (on shutdown)."""
        running = set(self._tasks)
        if not running:
            return
        log.warning("shutting down with %d background task(s) unfinished: %s", len(running),
                    ", ".join(t.get_name() for t in running))  # fmt: skip
        for task in running:
            task.cancel()
        await asyncio.wait(running, timeout=2.0)

    async def _safely(self, what: str, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a notifier call; a failure to tell someone never breaks a transition."""
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
        """Append to the audit trail; a failure is logged loudly but never breaks a flow.
        The metrics count what is audited, so both tell the same story."""
        fields = self._audited(
            kind, run=run, call=call, actor=actor, decision=decision, detail=detail
        )
        try:
            await self.audit_log.append(kind, **fields)
        except Exception:
            log.exception("could not append %s to the audit trail", kind)

    def audit_in(
        self, pipe: Any, kind: str, *, call: CallRecord, actor: Actor, decision: str, detail: str
    ) -> None:
        """`audit`, as one command of a pipeline that carries other writes (one round trip)."""
        fields = self._audited(kind, call=call, actor=actor, decision=decision, detail=detail)
        self.audit_log.append_in(pipe, kind, **fields)

    @staticmethod
    def _audited(
        kind: str,
        *,
        run: RunRecord | None = None,
        call: CallRecord | None = None,
        actor: Actor | None = None,
        decision: str = "",
        detail: str = "",
    ) -> dict[str, str]:
        """An audit entry's fields (and the metrics that count it)."""
        _count(kind, decision, call)
        fields = {"decision": decision, "detail": detail}
        if run is not None:
            fields.update(run_id=run.run_id, channel=run.channel_id, agent=run.agent_name)
            fields.update(team=run.team_id, user=run.user_id, enterprise=run.enterprise_id)
        if call is not None:
            fields.update(approval_id=call.approval_id, run_id=call.run_id, agent=call.agent)
            fields.update(tool=call.tool, digest=call.digest, channel=call.channel_id)
        if actor is not None:
            fields.update(team=actor.team_id, user=actor.user_id, enterprise=actor.enterprise_id)
        return fields

    def agent_names(self) -> list[str]:
        return list(self.engine.registry.agents)

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
        """Progress lines are recorded (shown with the run message, through the outbox) in the
        background, in order: neither Redis nor Slack ever holds up a run for them."""
        lines: list[str] = []
        writing: list[asyncio.Task[None]] = []

        async def write() -> None:
            while lines:
                line = lines.pop(0)
                try:
                    await self.store.add_progress(run.run_id, line)
                except Exception:  # best effort, like every progress line
                    log.warning("could not record progress of run %s", run.run_id, exc_info=True)

        async def progress(text: str) -> None:
            lines.append(text)
            if not writing or writing[0].done():
                task = asyncio.create_task(write(), name=f"progress-{run.run_id}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                writing[:] = [task]

        return progress

    async def _fail(self, run: RunRecord, owner: str, error: str) -> None:
        """End the run as failed. `error` is plain text (escaped once, where it is shown)."""
        try:
            ended = await self.store.finish(
                run.run_id, owner, status="failed", text=error, drop_snapshot=False
            )
        except NotOwner:
            log.info("run %s not failed here: this execution no longer owns it", run.run_id)
            return
        if isinstance(ended, Ended):
            await self.audit("run_failed", run=run, detail=error)

    async def _enqueue(self, kind: str, run_id: str, execution: str) -> None:
        try:
            await self.queue.enqueue(kind, run_id, execution)
        except Exception:
            log.exception("could not enqueue %s of run %s; the sweeper will", kind, run_id)

    @staticmethod
    def _digest(call: CallRecord) -> str:
        return call_digest(
            agent=call.agent,
            tool=call.tool,
            arguments=call.arguments,
            arguments_sha=call.arguments_sha,
            run_id=call.run_id,
            call_id=call.call_id,
            policy_version=call.policy_version,
        )

    async def _approved_in_pause(self, run: RunRecord) -> set[str]:
        calls = await self.store.pause_calls(run.run_id) if run.pause else []
        return {c.call_id for c in calls if c.status == "approved"}

    async def _authorize(
        self, actor: Actor, call: CallRecord, run: RunRecord | None = None
    ) -> tuple[RunRecord | None, Verdict]:
        """`run`: the call's run when the caller already read it."""
        if run is None:
            run = await self.store.get_run(call.run_id)
        if run is None:
            return None, Verdict(False, "This run no longer exists.")
        _, verdict = await self._judge(actor, run, call)
        return run, verdict

    async def _judge(
        self, actor: Actor, run: RunRecord, call: CallRecord
    ) -> tuple[CallRule | None, Verdict]:
        """The rule the policy in force gives `call`, and whether `actor` may decide it."""
        policy = self.policies.current().policy
        rule = self._rule_for(policy, run, call)
        verdict = await self.authorizer.may_decide(
            policy,
            actor,
            run_team=run.team_id,
            run_starter=run.user_id,
            channel=run.channel_id,
            tool=call.tool,
            rule=rule,
        )
        return rule, verdict

    @staticmethod
    def _rule_for(policy: Policy, run: RunRecord, call: CallRecord) -> CallRule | None:
        """The policy's rule for `call`, its approvers widened by the call's escalation once
        (and only once) that has fired (recorded on the call by fire_timers.lua)."""
        rule = policy.rule_for(channel=run.channel_id, agent=call.agent, tool=call.tool)
        extra = [p for p in call.escalated_principals() if rule and p not in rule.approvers]
        if rule is not None and extra:
            rule = dataclasses.replace(rule, approvers=(*rule.approvers, *extra))
        return rule
