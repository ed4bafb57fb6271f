"""The application service: start runs, authorize and apply decisions, resume exactly once.

This is where the rules live. Slack handlers call it with an `Actor` taken from the signed request
and an opaque approval id; it answers with what to tell that person. Agents run in jobs taken by
workers, so that Slack gets its acknowledgement within three seconds. The service is assembled
from one module per concern: core, reviews, runs, decisions, and the sweeper below."""

from __future__ import annotations

import asyncio
import logging

from bot.service.people import PeopleFlow
from bot.service.replies import RejectForm, Reply, when
from bot.store.runs import now

log = logging.getLogger(__name__)


class ApprovalService(PeopleFlow):
    """Runs and decisions, for one bot process (any number of processes may share Redis).

    This class adds the sweeper, which finishes what a stopped process left half done.
    """

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
        - a pause saved but whose automatic decisions were not applied (its worker stopped);
        - (the reconciler) a run whose outbox holds marks but which is not on the outbox
          index (the process stopped between a transition and its index write): indexed, so a
          projector brings its messages up to date.
        Then trim the job stream of entries every worker is done with.
        """
        count = 0
        cutoff = float(now()) - older_than
        for run_id in await self.store.active_runs():
            run = await self.store.get_run(run_id)
            outbox = self.store.outbox
            if await outbox.marks(run_id) and not await outbox.indexed(run_id):
                log.info("re-indexing the undelivered messages of run %s", run_id)
                await outbox.schedule(run_id)
                count += 1
            if run is None or run.ended:
                await self.store.forget_active(run_id)
                continue
            if float(run.updated_at or 0) > cutoff:
                continue
            if run.status in ("running", "resuming") and run.owner and "/" not in run.owner:
                kind = "start" if run.status == "running" else "resume"
                await self.store.set_run_fields(run_id, updated_at=now())  # once per interval
                await self.queue.enqueue(kind, run_id, run.owner)
                count += 1
            elif run.status == "paused" and await self._undecided_by_rule(run_id):
                await self._auto_decide(run)
                count += 1
        await self.queue.trim()
        return count

    async def _undecided_by_rule(self, run_id: str) -> bool:
        """Whether a pending call awaits a policy rule or an earlier Always decision."""
        sticky = await self.store.sticky_decisions(run_id)
        calls = await self.store.pause_calls(run_id)
        return any(not c.decided and (c.auto or c.sticky in sticky) for c in calls)


__all__ = ["ApprovalService", "RejectForm", "Reply", "when"]
