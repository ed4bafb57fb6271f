"""The weekly review digest (`APPROVAL_BOT_REVIEW_DIGEST`, off by default): each channel where
people decided, let calls expire or raised a rubber-stamp alarm that week gets its figures
of `approval-bot report reviews` for the week (bot/learning/reviews.py).

It is posted to the channel, not sent to each approver: a channel's approvers are its rules'
(people, user groups, the channel's members, per tool and condition), which only Slack could
expand, week after week; the channel is where they review, and one message per channel is
one post to get right. The figures name each approver (the Slack layer mentions them); the
rubber-stamp alarm itself was told privately when it was raised.

Every process's timer loop (bot/service/decisions/timers.py) calls `tick` on each pass: it costs
nothing until the week's time comes (on the timers' clock, which tests move forward). Then
the first process to claim the week (an atomic SET NX, bot/store/trail/digests.py) reads the week's
trail and posts; the others find it claimed. A process that starts within a day after the
time (every one was down then) still sends it; the claim keeps that to once. A post Slack
refuses is logged, not retried: a digest missed is better than one sent twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from bot.learning.history import read_history
from bot.learning.reviews import ReviewFigures, review_figures
from bot.outage import log_failure
from bot.service.core import ServiceCore
from bot.store.trail.digests import DigestClaims
from bot.weekly import DAY, WEEK, Weekly

log = logging.getLogger(__name__)

GRACE = DAY  # a process started this long after the time still sends the week's digest

# Posts one channel's digest: (team, channel, its rows, the week's end).
PostDigest = Callable[[str, str, list[ReviewFigures], float], Awaitable[None]]


class ReviewDigests:
    """Sends the weekly digest, once per week across processes."""

    def __init__(
        self, core: ServiceCore, schedule: Weekly, post: PostDigest, *,
        read_chars_per_second: float = 500.0,
    ) -> None:  # fmt: skip
        self.core = core
        self.schedule = schedule
        self.post = post
        self.read_chars_per_second = read_chars_per_second
        self.claims = DigestClaims(core.store.redis)
        self.clock = core.store.timers.clock
        self.due: float | None = None  # the next time this process looks (set by `tick`)

    def tick(self) -> None:
        """Called on each pass of the timer loop: when the week's time has come, send (in the
        background) the digest of the week that ended then, unless another process did."""
        now = self.clock.time()
        if self.due is None:
            last = self.schedule.last(now)
            self.due = last if now - last < GRACE else last + WEEK
        if now < self.due:
            return
        week_end = self.schedule.last(now)
        self.due = week_end + WEEK
        if now - week_end < GRACE:
            self.core.spawn(self._send(week_end), name="review-digest")

    async def _send(self, week_end: float) -> None:
        await self.send(week_end)

    async def send(self, week_end: float) -> int:
        """Claim the week ending at `week_end` and post each channel's digest; returns the
        channels posted to (0: another process claimed it, or nothing happened that week)."""
        if not await self.claims.claim(week_end, self.core.new_owner()):
            return 0
        started = time.monotonic()
        history = await read_history(self.core.audit_log, since=week_end - WEEK, until=week_end)
        channels: dict[str, list[ReviewFigures]] = {}
        for row in review_figures(history, read_chars_per_second=self.read_chars_per_second):
            channels.setdefault(row.channel, []).append(row)
        posted = 0
        for channel, rows in channels.items():
            try:
                await self.post(rows[0].team, channel, rows, week_end)
                posted += 1
            except Exception:
                log_failure(log, "could not post the review digest to %s", channel)
        log.info(
            "review digest of the week to %s: %d channels (%d entries read in %.1f s)",
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(week_end)), posted,
            history.entries, time.monotonic() - started,
        )  # fmt: skip
        return posted
