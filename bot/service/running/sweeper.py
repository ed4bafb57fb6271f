"""The sweeper: finishes what a stopped process left half done (executions no worker took,
runs taken by an attempt whose job a failover lost, pauses whose automatic decisions were not
applied, runs left off the indexes).

Each process runs `sweep_forever`; everything it does is safe to repeat from any process."""

from __future__ import annotations

import asyncio
import logging
import math
from logging import WARNING

from bot.outage import OUTAGE, log_failure
from bot.service.core import ServiceCore
from bot.service.policy.gate import rule_for
from bot.service.running.runs import Runs, time_call
from bot.store.connection import primaries
from bot.store.records import ENDED, RunRecord, RunStatus
from bot.store.runs import now

log = logging.getLogger(__name__)


class Sweeper:
    """Looks at what is due for too long, and at every active run now and then."""

    def __init__(self, core: ServiceCore, runs: Runs) -> None:
        self.core = core
        self.store = core.store
        self.runs = runs
        self._recoveries = OUTAGE.recoveries  # see `_redis_changed`
        self._primaries = ""
        self.sweeps = 0
        """Sweeps done (the first is a full pass): what a test waits on, rather than time."""
        self._policy = core.policies.current().version
        """The version of the policy whose automatic decisions the pending calls were given."""

    # A full pass over the active runs, on the first sweep and every RECONCILE_EVERY after: it
    # catches what a process that stopped in the instant between a transition and the write
    # that indexes it left unindexed. Every other sweep reads only what is due, unless Redis
    # changed under the bot (see `_redis_changed`).
    RECONCILE_EVERY = 20

    async def sweep_forever(self, every: float) -> None:
        """Every `every` seconds, finish what is due: executions no worker took, pauses whose
        automatic decisions were not applied (see `requeue_stalled`)."""
        while True:
            await asyncio.sleep(every)
            try:
                changed = await self._redis_changed()
                await self.requeue_stalled(
                    older_than=every * 2,
                    reconcile=changed or self.sweeps % self.RECONCILE_EVERY == 0,
                )
            except Exception:
                log_failure(log, "sweep for stalled runs failed", level=WARNING)
            self.sweeps += 1

    async def _redis_changed(self) -> bool:
        """Whether an outage ended, or another server answers as primary (a failover, a
        restart), since the last sweep. A write the old primary acknowledged but had not
        passed on (a decided pause's job, its due-index entry: they are not in the decision's
        script, whose keys share one slot) is gone, and the due index that would find it may
        be gone with it: the full pass finds the run anyway (resuming, not due) and enqueues
        it now, not a reconcile period later."""
        recoveries, self._recoveries = self._recoveries, OUTAGE.recoveries
        now_primaries = await primaries(self.store.redis)
        before, self._primaries = self._primaries, now_primaries
        changed = recoveries != OUTAGE.recoveries or (bool(before) and before != now_primaries)
        if changed:
            log.info("Redis recovered or failed over since the last sweep: checking every run")
        return changed

    async def requeue_stalled(self, *, older_than: float, reconcile: bool = True) -> int:
        """Finish what a stopped process left half done; returns how many runs it touched.

        It looks only at the runs due (`ab:runs:due`) for longer than `older_than`, so its cost
        follows what is due, not how many runs wait for people:
        - a run waiting for a worker that never got its job (the process that should have
          enqueued it stopped first): enqueue it again (a duplicate job is harmless: only one
          delivery can take an execution), unless its job is still in the stream waiting for a
          free worker;
        - a run taken by a worker whose job no delivery holds any more, pending or waiting (a
          failover lost it): released and enqueued again once seen so twice (see
          `_recover_lost_job`);
        - a pause saved but whose automatic decisions were not applied (its worker stopped).
        With `reconcile`, first a full pass (one pipeline) over the active runs: a run whose
        outbox holds marks but which is not on the outbox index (the process stopped between
        a transition and its index write) is indexed, so a projector brings its messages up to
        date; an unfinished run missing from the due set (taken or not) is put back on it; an
        unfinished run missing from its channel's index (started by an older version) is put
        on it.
        When the policy in force changed since the last sweep (a reload), the full pass also
        applies its automatic decisions to every paused run (`Runs.auto_decide`): a call still
        pending that the new policy rejects by itself is rejected so, not left to expire.
        Then trim the job stream of entries every worker is done with.
        """
        version = self.core.policies.current().version
        reapply, self._policy = version != self._policy, version
        count = await self._reconcile(reapply) if reconcile or reapply else 0
        cutoff = float(now()) - older_than
        due = await self.store.due_runs(cutoff)
        runs = await self.store.runs([run_id for run_id, _ in due]) if due else []
        waiting: set[str] | None = None
        for (run_id, since), run in zip(due, runs, strict=True):
            if run is None or run.ended:
                await self.store.forget_active(run_id, run.channel_id if run else "")
                await self.store.not_due(run_id, since)
            elif (
                run.status in (RunStatus.RUNNING, RunStatus.RESUMING)
                and run.owner
                and "/" not in run.owner
            ):
                if waiting is None:
                    waiting = await self.core.queue.waiting_runs()
                if run_id not in waiting:  # its job is lost, not merely queued
                    kind = "start" if run.status == RunStatus.RUNNING else "resume"
                    await self.core.queue.enqueue(kind, run.run_id, run.owner)
                    count += 1
                await self.store.due(run_id, float(now()))  # looked at again, later
            elif run.status == RunStatus.PAUSED:
                # a pause whose process stopped before indexing its timers: indexed now
                await self.store.timers.schedule(
                    await self.store.pause_calls(run_id), only_missing=True
                )
                if await self._undecided_by_rule(run_id):
                    await self.runs.auto_decide(run)
                    count += 1
                await self.store.not_due(run_id, since)
            elif run.status in (RunStatus.RUNNING, RunStatus.RESUMING) and run.owner:
                # Taken by a worker: its job's lease watches it, while a delivery of the job is
                # pending. A failover may lose that (see `_recover_lost_job`): looked at again.
                if not (run.job and await self.core.queue.held(run.job)):
                    if waiting is None:
                        waiting = await self.core.queue.waiting_runs()
                    if run_id not in waiting:  # nor will a delivery of it come
                        count += await self._recover_lost_job(run, older_than)
                await self.store.due(run_id, float(now()))
            else:  # waiting for a review
                await self.store.not_due(run_id, since)
        await self.core.queue.trim()
        return count

    async def _recover_lost_job(self, run: RunRecord, after: float) -> int:
        """A run taken by an attempt whose job no delivery holds, pending or waiting: a
        failover lost the job's entry or its delivery (the take, confirmed by the replica,
        survived it), or a superseded attempt acknowledged it. No lease watches the run and no
        worker would take it over: it stayed `resuming` for good. Seen so on two looks `after`
        seconds apart at least (two leases: an attempt still running has time to end the run),
        the run is released and its execution enqueued again; the next delivery takes it over
        as a retry, and the journal keeps every tool call to one run (a call left executing
        goes to a person). Returns 1 once released."""
        found = await self.store.release_lost_job(run.run_id, run.owner, run.job, after)
        if found == "marked":
            log.info("run %s is held by %s with no job pending (%r): looked at again",
                     run.run_id, run.owner, run.job)  # fmt: skip
        if found != "released":
            return 0
        execution = run.owner.rpartition("/")[0]
        kind = "start" if run.status == RunStatus.RUNNING else "resume"
        await self.core.queue.enqueue(kind, run.run_id, execution)
        log.warning("run %s: the job of attempt %s was lost (a failover?); enqueued again",
                    run.run_id, run.owner)  # fmt: skip
        return 1

    async def _reconcile(self, reapply: bool = False) -> int:
        """The full pass over active runs (see `requeue_stalled`); returns the runs indexed.
        `reapply`: the policy changed: each paused run's automatic decisions are applied again
        under it (one of the pass's runs is one of what the App Home reads: no other index
        lists pending calls)."""
        await self.store.index_channels()
        count = 0
        outbox = self.store.outbox
        for run_id, status, _, indexed, marked, due in await self.store.active_overview():
            if marked and not indexed:
                log.info("re-indexing the undelivered messages of run %s", run_id)
                await outbox.schedule(run_id)
                count += 1
            if status is None or status in ENDED:
                await self.store.forget_active(run_id)
            elif not due and status in (RunStatus.PAUSED, RunStatus.RUNNING, RunStatus.RESUMING):
                await self.store.due(run_id, 0.0)  # looked at by this very sweep
            if status == RunStatus.PAUSED:
                count += await self._time_older_calls(run_id)
                if reapply:
                    count += await self._reapply(run_id)
        return count

    async def _reapply(self, run_id: str) -> int:
        """The automatic decisions of the policy now in force, applied to a paused run's
        pending calls (safe to repeat, from any process); returns 1 when it was paused."""
        run = await self.store.get_run(run_id)
        if run is None or run.status != RunStatus.PAUSED:
            return 0
        await self.runs.auto_decide(run)
        return 1

    async def _time_older_calls(self, run_id: str) -> int:
        """Give timers to the pending calls of a pause saved by a version without them (they
        would otherwise wait unseen forever): the policy's expiry and escalation, counted from
        now (the first sweep after the upgrade); no reminders (they would all be overdue)."""
        calls = [
            c
            for c in await self.store.pause_calls(run_id)
            if not c.decided and not c.auto and not c.expires_at
        ]
        run = await self.store.get_run(run_id) if calls else None
        if run is None:
            return 0
        policy = self.core.policies.current().policy.for_team(run.team_id)
        timed = []
        for call in calls:
            rule = rule_for(policy, run, call)
            if rule is None:
                continue
            paused_at, call.paused_at = call.paused_at, float(now())
            time_call(call, rule)  # expiry and escalation count from now
            if call.expire_after:  # expires_at is paused_at + expire_after
                call.expire_after += math.ceil(call.paused_at - paused_at)
            call.paused_at = paused_at
            call.remind_after = call.remind_max = 0  # its reminders would be long overdue
            stored = call.to_hash()  # as the record stores them
            fields = {
                name: stored[name]
                for name in ("expire_after", "remind_after", "remind_max",
                             "escalate_after", "escalate_at", "escalate_to")
                if getattr(call, name)
            }  # fmt: skip
            if await self.store.set_pending_call_fields(call.approval_id, fields):
                log.info("call %s, paused before timers existed, now expires", call.approval_id)
                timed.append(call)
        await self.store.timers.schedule(timed)
        return len(timed)

    async def _undecided_by_rule(self, run_id: str) -> bool:
        """Whether a pending call awaits a policy rule or an earlier Always decision."""
        sticky = await self.store.sticky_decisions(run_id)
        calls = await self.store.pause_calls(run_id)
        return any(not c.decided and (c.auto or c.sticky in sticky) for c in calls)
