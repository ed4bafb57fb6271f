"""The work queue: starting and resuming runs are jobs on a Redis Streams consumer group.

A worker reads jobs with XREADGROUP, renews its lease on a job while it runs (XCLAIM to itself
resets the job's idle time), and acknowledges it with XACK when done. A job whose worker stopped
renewing for longer than the lease is taken over by another worker with XAUTOCLAIM. Jobs are
idempotent: the run's state in Redis (see take_job.lua) decides whether a delivery does anything.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from bot.store.connection import is_cluster
from bot.store.keys import PREFIX
from bot.store.scripts import script

log = logging.getLogger(__name__)

STREAM = f"{PREFIX}:jobs"
GROUP = "workers"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Job:
    """One delivery of a job message."""

    message_id: str
    kind: str  # start | resume
    run_id: str
    execution: str  # the execution token the run's owner field held when it was enqueued
    pause: str = ""
    """A resume: the tokens of the pause it resumes (the run's `calls`, as the decision that
    enqueued it read them), so that taking it reads the calls too; '': not named."""
    deliveries: int = 1
    """Which delivery of the message this is (Redis's count: 1 when read, one more at each
    take-over). Only the latest may renew or acknowledge it: a worker whose lease lapsed may
    take its own job over while the first attempt still runs (a failover's stall), and that
    attempt, superseded, must not acknowledge the job its successor still needs."""

    @classmethod
    def parse(cls, message_id: Any, fields: dict[Any, Any], deliveries: int = 1) -> Job:
        data = {_text(k): _text(v) for k, v in fields.items()}
        return cls(
            _text(message_id), data["kind"], data["run_id"], data["execution"],
            data.get("pause", ""), deliveries,
        )  # fmt: skip


@dataclass
class Acknowledgement:
    """A worker's acknowledgement of one delivered job: written with the writes that follow
    the run's end when that is what the job did (one round trip less), else by the worker
    once the job is handled."""

    job: Job
    sent: bool = False

    def send_in(self, pipe: Any) -> None:
        """XACK the job in a pipeline that follows the run's end. Only the execution that owns
        the run can end it, so no other worker runs this job's execution: the acknowledgement
        needs no check of who holds the delivery. (The stream's trim is left to the next
        checked ack, or the sweeper's pass.) The caller sets `sent` once it is written (it may
        ride on the end's own round trip, written only if the run ended: `Runs.finish`)."""
        pipe.xack(STREAM, GROUP, self.job.message_id)


def _fields(kind: str, run_id: str, execution: str, pause: str) -> dict[str, str]:
    """A job message: what it does, to which run, for which execution (and a resume's pause)."""
    fields = {"kind": kind, "run_id": run_id, "execution": execution}
    if pause:
        fields["pause"] = pause
    return fields


def _stream_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class JobQueue:
    """Enqueue, read, renew and acknowledge jobs."""

    def __init__(
        self, client: redis.Redis, *, lease_seconds: float, leases: redis.Redis | None = None
    ) -> None:
        """`leases`: a client of its own for renewals and acks, so that a burst of other work
        waiting for pooled connections can never make a live worker miss its lease."""
        self.redis = client
        self.lease_ms = int(lease_seconds * 1000)
        self._hold = (leases or client).register_script(script("renew_job"))
        # The blocking reads' own connection (`read`) and its id on the server, which
        # `interrupt` ends a blocked read by (None: not asked yet, or it may have changed).
        self._reader: redis.Redis | None = None
        self._reader_id: int | None = None
        self._reading = False

    @property
    def interruptible(self) -> bool:
        """Whether `interrupt` can end a blocked read at once: not on Redis Cluster (a read
        there goes to whichever node holds the stream, on a connection of that node's)."""
        return not is_cluster(self.redis)

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def enqueue(self, kind: str, run_id: str, execution: str, pause: str = "") -> str:
        message_id = await self.redis.xadd(STREAM, _fields(kind, run_id, execution, pause))  # type: ignore[arg-type]
        return _text(message_id)

    @staticmethod
    def message(kind: str, run_id: str, execution: str, pause: str = "") -> list[str]:
        """A job message's fields and values, in turn (as XADD takes them after the id)."""
        return [part for pair in _fields(kind, run_id, execution, pause).items() for part in pair]

    @staticmethod
    def enqueue_in(pipe: Any, kind: str, run_id: str, execution: str, pause: str = "") -> None:
        """`enqueue`, as one command of a pipeline that carries other writes (one round trip:
        a decision's job goes with its audit entry and index writes)."""
        pipe.xadd(STREAM, _fields(kind, run_id, execution, pause))

    async def read(self, consumer: str, count: int, block_ms: int) -> list[Job]:
        """New jobs for this consumer, waiting up to `block_ms` for some. Where
        `interruptible`, a read that blocks goes on a connection of its own, whose id the
        server gave (one round trip, the first time), so that `interrupt` can end it."""
        if block_ms <= 0 or not self.interruptible:
            reply: Any = await self.redis.xreadgroup(
                GROUP, consumer, {STREAM: ">"}, count=count, block=block_ms
            )
        else:
            if self._reader is None:
                self._reader = self.redis.client()  # (one connection, held until `close`)
            try:
                if self._reader_id is None:
                    self._reader_id = int(await self._reader.client_id())
                self._reading = True
                reply = await self._reader.xreadgroup(
                    GROUP, consumer, {STREAM: ">"}, count=count, block=block_ms
                )
            except BaseException:
                self._reader_id = None  # (a new connection may follow: its id is asked again)
                raise
            finally:
                self._reading = False
        jobs = []
        for _, messages in reply or []:
            for message_id, fields in messages:
                jobs.extend(await self._parsed(message_id, fields))
        return jobs

    async def interrupt(self) -> bool:
        """End a read blocked in `read` now, as if its wait were over (the server's CLIENT
        UNBLOCK: a job is either delivered to it before, and read, or not at all: none is
        lost). False when none was blocked here, or it could not be ended."""
        if not self._reading or self._reader_id is None:
            return False
        try:
            return bool(await self.redis.client_unblock(self._reader_id))
        except redis.RedisError:
            return False

    async def close(self) -> None:
        """Give back the blocking reads' connection (`read`)."""
        reader, self._reader, self._reader_id = self._reader, None, None
        if reader is not None:
            await reader.aclose()

    async def _parsed(self, message_id: Any, fields: Any, deliveries: int = 1) -> list[Job]:
        """The job in a message; a malformed (or trimmed) message is acknowledged and skipped."""
        try:
            return [Job.parse(message_id, fields, deliveries)]
        except (KeyError, TypeError, AttributeError):
            log.error("dropping malformed job message %s: %r", _text(message_id), fields)
            await self.redis.xack(STREAM, GROUP, message_id)
            return []

    async def reclaim(self, consumer: str, count: int) -> list[Job]:
        """Jobs whose worker has not renewed them for longer than the lease."""
        reply: Any = await self.redis.xautoclaim(
            STREAM, GROUP, consumer, min_idle_time=self.lease_ms, start_id="0-0", count=count
        )
        messages = reply[1] if reply else []
        if not messages:
            return []
        # How many times each was delivered, now this take-over counted (one round trip, only
        # when jobs were taken over): what `renew` and `ack` check.
        async with self.redis.pipeline(transaction=False) as pipe:
            for message_id, _ in messages:
                pipe.xpending_range(STREAM, GROUP, message_id, message_id, 1, consumer)
            counts: list[Any] = await pipe.execute()
        jobs = []
        for (message_id, fields), found in zip(messages, counts, strict=True):
            deliveries = int(found[0]["times_delivered"]) if found else 1
            jobs.extend(await self._parsed(message_id, fields, deliveries))
        return jobs

    async def renew(self, consumer: str, job: Job) -> bool | None:
        """Reset the job's idle time, if this delivery of it is still this worker's (False: it
        lost the job, to another worker or to a later take-over of its own; None: the job is
        acknowledged already, as a run's end does with its own writes, which a renewal sent
        meanwhile may follow: nothing is left to hold, and nothing was lost)."""
        held = int(
            await self._hold(
                keys=[STREAM], args=[GROUP, consumer, job.message_id, "renew", job.deliveries]
            )
        )
        return None if held == 2 else held == 1

    async def ack(self, consumer: str, job: Job) -> bool:
        """Acknowledge the job, if this delivery of it is still this worker's (it may have been
        taken over, by another worker or by this one again)."""
        held = await self._hold(
            keys=[STREAM], args=[GROUP, consumer, job.message_id, "ack", job.deliveries]
        )
        return int(held) == 1

    async def trim(self) -> None:
        """Drop the entries every worker is done with: older than any pending or undelivered
        job (trimming by length could drop a job a dead worker still holds). Each ack does
        the same (renew_job.lua); the sweeper's pass catches what a stopped worker left."""
        await self._hold(keys=[STREAM], args=[GROUP, "", "", "trim"])

    async def _last_delivered(self) -> str:
        """The id of the last entry the workers' group was given ("0-0": none yet)."""
        groups: Any = await self.redis.xinfo_groups(STREAM)
        for group in groups:
            info = {_text(k): v for k, v in dict(group).items()}
            if _text(info.get("name", "")) == GROUP:
                return _text(info.get("last-delivered-id") or "0-0")
        return "0-0"

    async def held(self, message_id: str) -> bool:
        """Whether a delivery of the job is pending (a worker holds it, or its lease lapsed and
        another will take it over): what watches a taken run. One round trip."""
        found: Any = await self.redis.xpending_range(STREAM, GROUP, message_id, message_id, 1)
        return bool(found)

    async def waiting_runs(self) -> set[str]:
        """Runs with a job in the stream that no worker has been given yet (queued behind busy
        workers): the entries after the group's last delivered one. One round trip each."""
        delivered = await self._last_delivered()
        entries: Any = await self.redis.xrange(STREAM, min=f"({delivered}")
        return {_text(fields.get(b"run_id", b"")) for _, fields in entries or []}

    async def oldest_age(self) -> float:
        """Seconds since the oldest job not yet acknowledged was enqueued (0: none): the
        oldest pending delivery, or else the first entry after the group's last delivered."""
        pending: Any = await self.redis.xpending(STREAM, GROUP)
        oldest = _text(pending.get("min")) if pending.get("min") else ""
        if not oldest:
            delivered = await self._last_delivered()
            after: Any = await self.redis.xrange(STREAM, min=f"({delivered}", count=1)
            oldest = _text(after[0][0]) if after else ""
        if not oldest:
            return 0.0
        ms, _ = _stream_order(oldest)
        return max(0.0, time.time() - ms / 1000)

    async def backlog(self) -> int:
        """Jobs not yet delivered plus jobs delivered but not acknowledged."""
        pending: Any = await self.redis.xpending(STREAM, GROUP)
        groups: Any = await self.redis.xinfo_groups(STREAM)
        lag = 0
        for group in groups:
            info = {_text(k): v for k, v in dict(group).items()}
            if _text(info.get("name", "")) == GROUP:
                lag = int(info.get("lag") or 0)
        return int(pending.get("pending") or 0) + lag
