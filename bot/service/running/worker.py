"""A worker: takes start and resume jobs from the queue and runs them, several at a time.

While a job runs its lease is renewed; if this process dies, the lease lapses and another
worker reclaims the job (XAUTOCLAIM). A job is acknowledged once handled, whatever the outcome;
one whose handler crashed is left unacknowledged, to be reclaimed and retried safely.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from logging import WARNING

from bot.outage import log_failure
from bot.service.approvals import ApprovalService
from bot.stopping import cancel_and_wait
from bot.store.queue import Acknowledgement, Job, JobQueue
from bot.store.runs import Taken

log = logging.getLogger(__name__)

# How long an idle worker's read of the job stream waits for a job (a job enqueued meanwhile
# ends the wait at once): each read and its wake-up cost the idle process some 0.3 ms of CPU,
# 5 a second at 200 ms. `stop` ends a blocked read at once (`JobQueue.interrupt`); where it
# cannot (Redis Cluster), the read waits `SHORT_BLOCK_MS`, which a stop waits out.
BLOCK_MS = 2000
SHORT_BLOCK_MS = 200


class Worker:
    def __init__(
        self,
        service: ApprovalService,
        queue: JobQueue,
        *,
        concurrency: int = 8,
        lease_seconds: float = 30.0,
    ) -> None:
        self.service = service
        self.queue = queue
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.consumer = f"worker-{service.process_id}-{secrets.token_hex(3)}"
        self._running: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        # The jobs in hand, each its delivery's acknowledgement (by identity: a worker may hold
        # a job it took over from itself beside its first attempt), renewed by one loop.
        self._held: dict[int, Acknowledgement] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._reserved = 0  # free slots promised to decisions' hand-offs (`reserve`)

    @property
    def busy(self) -> int:
        return len(self._running)

    def reserve(self) -> str | None:
        """This worker's consumer name, with one of its free slots held for a job handed to it
        (`adopt`, or `unreserve` when none came), when it is idle: no job in hand, none handed
        to it yet (#32: a decision one at a time resumes its run without the worker's blocked
        read waking and its take's round trip). None when it is busy, or stopping: the job
        then goes through the queue, to whichever worker reads it first, as before."""
        if self._stopping.is_set() or self._running or self._reserved:
            return None
        self._reserved += 1
        return self.consumer

    def unreserve(self) -> None:
        """Give back a slot `reserve` held, no job having come."""
        self._reserved = max(0, self._reserved - 1)

    def adopt(self, jobs: list[tuple[Job | None, Taken]]) -> None:
        """Run jobs read and taken for this worker elsewhere in this process (a decision's
        hand-off, in its round trip), in the slot `reserve` held: after a lull in Slack's
        requests, as the jobs it reads; a skip is acknowledged as theirs are."""
        self.unreserve()
        for job, taken in jobs:
            if job is not None:
                self._start(job, taken, lull=True)

    def _start(self, job: Job, taken: Taken | None, *, lull: bool = False) -> None:
        async def handle() -> None:
            if lull:
                await self.service.foreground.lull()
            await self._handle(job, taken)

        task = asyncio.create_task(handle(), name=f"job-{job.message_id}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def run(self) -> None:
        """Take jobs until `stop()`; then finish the jobs in hand."""
        while not self._stopping.is_set():  # Redis may be gone before this task first runs
            try:
                await self.queue.ensure_group()
                break
            except Exception:
                log_failure(
                    log, "the worker could not reach the job queue; retrying", level=WARNING
                )
                await asyncio.sleep(1.0)
        next_reclaim = 0.0
        loop = asyncio.get_running_loop()
        # Whether jobs may be waiting: the last read filled every free slot. Then the next
        # read takes them too, in one round trip (`take_next`); else it blocks until one comes.
        backlog = False
        takes = self.service.runs.takes_next
        while not self._stopping.is_set():
            try:
                free = self.concurrency - len(self._running) - self._reserved
                if free <= 0:
                    if self._running:
                        await asyncio.wait(set(self._running), return_when=asyncio.FIRST_COMPLETED)
                    else:  # its free slots held for hand-offs, for their round trip
                        await asyncio.sleep(0.001)
                    continue
                jobs: list[tuple[Job | None, Taken | None]] = []
                if loop.time() >= next_reclaim:
                    next_reclaim = loop.time() + self.lease_seconds / 3
                    jobs = [(job, None) for job in await self.queue.reclaim(self.consumer, free)]
                if not jobs and backlog and takes:
                    jobs = list(await self.service.take_next(self.consumer, free))
                    backlog = len(jobs) >= free
                    if not jobs:
                        continue  # none waited after all: block for the next
                if not jobs:
                    block = BLOCK_MS if self.queue.interruptible else SHORT_BLOCK_MS
                    read = await self.queue.read(self.consumer, free, block_ms=block)
                    backlog = len(read) >= free
                    jobs = [(job, None) for job in read]
                if jobs:
                    # Acks first: new jobs start at a lull in this process's Slack requests
                    # (at most a moment: their leases run far longer); the jobs in hand go on.
                    await self.service.foreground.lull()
                for job, taken in jobs:
                    if job is None:
                        continue  # a malformed message (acknowledged by `take_next`)
                    self._start(job, taken)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if "NOGROUP" in str(exc):  # the stream was lost (Redis without persistence)
                    with contextlib.suppress(Exception):
                        await self.queue.ensure_group()
                log_failure(log, "the worker could not read jobs; retrying", level=WARNING)
                await asyncio.sleep(1.0)

    async def _handle(self, job: Job, taken: Taken | None = None) -> None:
        ack = Acknowledgement(job)  # sent with the run's end, when the job ends the run
        self._held[id(ack)] = ack  # its lease renewed while it runs (`_renewals`)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renewals(), name="job-leases")
        try:
            await self.service.run_job(job, ack, taken)
        except Exception:
            log_failure(log, "job %s (%s of run %s) crashed; it will be retried", job.message_id,
                          job.kind, job.run_id)  # fmt: skip
            return
        finally:
            self._held.pop(id(ack), None)
        if ack.sent:
            return
        try:
            if not await self.queue.ack(self.consumer, job):
                log.warning("job %s was taken over by another worker; not acknowledged here",
                            job.message_id)  # fmt: skip
        except Exception:
            log_failure(log, "could not acknowledge job %s", job.message_id, level=WARNING)

    async def _renewals(self) -> None:
        """Renew the lease of every job in hand every third of the lease (one loop for them
        all, not a task, a timer and a cancellation per job: a job started just after a
        round is renewed within two thirds of its lease), until none is left."""
        while self._held:
            await asyncio.sleep(self.lease_seconds / 3)
            for key, ack in list(self._held.items()):
                if ack.sent or key not in self._held:
                    continue  # acknowledged with the run's end (or done): nothing to hold
                try:
                    renewed = await self.queue.renew(self.consumer, ack.job)
                    if renewed is None:  # acknowledged by its run's end meanwhile
                        self._held.pop(key, None)
                    elif not renewed:
                        log.warning(
                            "lost the lease of job %s to another worker; this attempt's writes "
                            "are refused from now on",
                            ack.job.message_id,
                        )
                        self._held.pop(key, None)
                except Exception:
                    log_failure(log, "could not renew the lease of job %s", ack.job.message_id,
                                level=WARNING)  # fmt: skip

    async def stop(self, loop_task: asyncio.Task[None] | None, timeout: float) -> None:
        """Stop taking jobs, then wait (up to `timeout`) for the ones in hand."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._stopping.set()
        with contextlib.suppress(Exception):  # (else the read's own wait ends it)
            await self.queue.interrupt()  # a read blocked waiting for a job ends now
        if loop_task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(loop_task), timeout=min(5.0, timeout))
            if loop_task.done():
                with contextlib.suppress(Exception):
                    await self.queue.close()  # the blocking reads' connection, given back
        if self._running:
            await asyncio.wait(set(self._running), timeout=max(0.0, deadline - loop.time()))
        if not self._running:
            await cancel_and_wait(self._renewer)

    async def abandon(self) -> None:
        """Cancel the jobs still running after the drain: they stay unacknowledged, so another
        worker takes them over once the lease lapses (the journal guards their tool calls)."""
        running = set(self._running)
        await cancel_and_wait(self._renewer)  # their leases lapse: another worker takes them
        if not running:
            return
        log.warning("shutting down with %d job(s) unfinished; another worker will take them "
                    "over: %s", len(running), ", ".join(t.get_name() for t in running))  # fmt: skip
        for task in running:
            task.cancel()
        await asyncio.wait(running, timeout=2.0)
