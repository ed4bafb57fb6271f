"""What every part of the application service shares: its collaborators, background tasks and
the audit trail. One `ServiceCore` value is handed to each flow (see `ApprovalService`)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Coroutine
from typing import Any, Protocol

from bot.engine.runner import Engine
from bot.outage import log_failure
from bot.service.audit import AuditKind, audit_fields
from bot.service.authorize import Authorizer
from bot.service.foreground import Foreground
from bot.service.policy.source import PolicySource
from bot.service.ports import Actor, Notifier
from bot.service.running.limits import StartLimits
from bot.store.admission import AdmissionStore
from bot.store.journal import RedisJournal
from bot.store.queue import Job, JobQueue
from bot.store.records import CallRecord, RunRecord
from bot.store.runs import RunStore, Taken
from bot.store.trail.audit import AuditLog

log = logging.getLogger(__name__)


class LocalWorker(Protocol):
    """This process's worker, as a decision hands it its run's resume job
    (`bot.service.running.worker.Worker`)."""

    def reserve(self) -> str | None:
        """Its consumer name, with a free slot held for a job; None: none free."""

    def adopt(self, jobs: list[tuple[Job | None, Taken]]) -> None:
        """Run the jobs read and taken for it (none: the slot is given back)."""


class ServiceCore:
    """The service's collaborators and the helpers every flow uses: owner tokens, tracked
    background tasks, best-effort calls, the audit trail and the job queue."""

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
        # This process's background tasks (drained on shutdown, and by the test harness).
        self.tasks: set[asyncio.Task[None]] = set()
        # This process's own worker (None: it has none), to which a decision hands its run's
        # resume job in its round trip when a slot is free (`Decisions._record`).
        self.worker: LocalWorker | None = None

    def new_owner(self) -> str:
        """A fresh owner token of this process: what an execution or a decision's resume
        is recorded under."""
        return f"{self.process_id}:{secrets.token_hex(4)}"

    def track(self, task: asyncio.Task[None]) -> None:
        """Count `task` among the background tasks a shutdown drains."""
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run `coro` in a tracked background task that cannot die silently."""

        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log_failure(log, "background task %s failed", name)

        self.track(asyncio.create_task(guarded(), name=name))

    def later(self, what: str, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a best-effort call (a private reply) in the background; failures are logged."""

        async def run() -> None:
            await self.safely(what, coro)

        self.spawn(run(), name=what)

    async def drain(self, timeout: float) -> None:
        """Wait for background runs to finish (on shutdown), up to `timeout` seconds."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout)

    async def abandon(self) -> None:
        """Cancel the background tasks still running after the drain (on shutdown)."""
        running = set(self.tasks)
        if not running:
            return
        log.warning("shutting down with %d background task(s) unfinished: %s", len(running),
                    ", ".join(t.get_name() for t in running))  # fmt: skip
        for task in running:
            task.cancel()
        await asyncio.wait(running, timeout=2.0)

    async def safely(self, what: str, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a notifier call; a failure to tell someone never breaks a transition."""
        try:
            return await coro
        except Exception:
            log_failure(log, "could not %s", what)
            return None

    async def audit(
        self,
        kind: AuditKind,
        *,
        run: RunRecord | None = None,
        call: CallRecord | None = None,
        actor: Actor | None = None,
        decision: str = "",
        detail: str = "",
        text: str = "",
    ) -> None:
        """Append to the audit trail and move the kind's metric; a failure to append is logged
        loudly but never breaks a flow. `detail`: the bot's own words; `text`: free text (see
        `audit_fields`)."""
        kind.tally(decision, call)
        fields = audit_fields(
            kind=kind, run=run, call=call, actor=actor, decision=decision, detail=detail, text=text
        )
        try:
            await self.audit_log.append(kind, **fields)
        except Exception:
            log_failure(log, "could not append %s to the audit trail", kind)

    def audit_in(
        self,
        pipe: Any,
        kind: AuditKind,
        *,
        run: RunRecord | None = None,
        call: CallRecord | None = None,
        actor: Actor | None = None,
        decision: str = "",
        detail: str = "",
        text: str = "",
        tally: bool = True,
    ) -> None:
        """`audit`, as one command of a pipeline that carries other writes (one round trip).
        Not `tally`: the caller moves the entry's metric (`AuditKind.tally`) once the entry
        is written (one that rides on a transition is written only if the transition is)."""
        if tally:
            kind.tally(decision, call)
        fields = audit_fields(
            kind=kind, run=run, call=call, actor=actor, decision=decision, detail=detail, text=text
        )
        self.audit_log.append_in(pipe, kind, **fields)

    async def enqueue(self, kind: str, run_id: str, execution: str) -> None:
        """Enqueue a start or resume job; if that fails, the sweeper enqueues it later."""
        try:
            await self.queue.enqueue(kind, run_id, execution)
        except Exception:
            log_failure(log, "could not enqueue %s of run %s; the sweeper will", kind, run_id)

    def agent_names(self) -> list[str]:
        """The agents this bot can run, by name."""
        return list(self.engine.registry.agents)
