"""Slack's rate limits, shared by every replica (issue #21): one token bucket per limit and
scope (posts per channel, updates per workspace, Home publishes per workspace) in Redis
(`pace.lua`), timed by the Redis server's clock, so that three replicas together send what
Slack allows, not three times as much; a 429's `Retry-After` seen by any replica holds every
replica's calls behind the same limit.

Urgency decides who waits when tokens are short: an approval card queues for its token (it
may reserve one ahead); outputs and answers take one only when it is free now; status updates
and notes only when some of the burst would still be left for the others. Those two never
queue, so a card never waits behind them: they are tried again when a token would be free.

One at a time, a run's output's token is taken in the round trip of the run's end, by the pass
that round trip claims (`SharedPacer.take_output_in`, #32); one its pass does not use goes back
(`give_back`), unless a hold came since.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.connection import UNREPLICATED
from bot.store.delivery.outbox import Shown
from bot.store.scripts import Batch, script, text

STATUS_RESERVE = 0.3  # of the burst, kept for cards and outputs when status updates draw
KEEP_AFTER = 0.05  # seconds: a card's turn further away than this is kept for its message


class Urgency(StrEnum):
    """What a Slack call carries, most urgent first."""

    CARD = "card"  # an approval card (and the run message its cards link to, until posted)
    OUTPUT = "output"  # a run's output, a review request, a reminder
    STATUS = "status"  # a run message's status, a thread note


@dataclass(frozen=True)
class Take:
    """What the shared bucket granted."""

    taken: bool
    """A token was taken (the call may go once `wait` has passed)."""
    wait: float
    """Seconds: before the taken token may be used, or until one would be free."""


@dataclass
class Prepaid:
    """A run's output's post token taken in the round trip of the run's end, for the pass that
    round trip started (`SharedPacer.take_output_in`, #32): `target` (the output), `take`,
    `posting` (the posting record written with it, when taken); used by the output's post,
    or given back (`give_back`)."""

    run_id: str
    scope: str
    target: str
    take: Take
    posting: Shown
    # The bucket right after the take: its holds, tokens and time (ms; what a give-back needs)
    bucket: tuple[str, str, str] = ("0", "0", "0")
    used: bool = field(default=False)


def decode_take(reply: list[Any]) -> Take:
    """`pace.lua`'s reply: {taken (1/0), wait in ms}."""
    return Take(taken=int(reply[0]) == 1, wait=max(0.0, float(text(reply[1])) / 1000))


class SharedPacer:
    """One of Slack's limits (`name`: "post", "update", "home"), `burst` calls and then `rate`
    per second per scope, shared through Redis by every process of the deployment."""

    def __init__(self, client: redis.Redis, name: str, rate: float, burst: int) -> None:
        self.name = name
        self.rate = rate
        self.burst = burst
        self._pace = client.register_script(script("pace"))
        UNREPLICATED.add(self._pace.sha)  # no WAIT for replicas: pacing may be lost at no cost
        pace = f"local function pace(KEYS, ARGV)\n{script('pace')}\nend\n"
        self._output = client.register_script(pace + script("output_token"))
        self.longest_wait = 0.0  # the longest wait this process was given (benchmarks)

    def _floor(self, urgency: Urgency) -> float:
        return self.burst * STATUS_RESERVE if urgency == Urgency.STATUS else 0.0

    def _request(
        self, scope: str, mode: str, extra: float, message: str
    ) -> tuple[list[str], list[Any]]:
        """pace.lua's keys and arguments for `mode` (a queue's turn is kept under `message`)."""
        bucket = keys.pace_key(self.name, scope)
        turn = keys.turn_key(self.name, scope, message or "-")
        names = [bucket, turn] if mode == "queue" else [bucket]
        return names, [repr(self.rate), self.burst, mode, repr(extra)]

    async def _call(self, scope: str, mode: str, extra: float = 0.0, message: str = "") -> Take:
        names, values = self._request(scope, mode, extra, message)
        return decode_take(await self._pace(keys=names, args=values))

    def _taking(self, urgency: Urgency, message: str) -> tuple[str, float]:
        """`take`'s mode and its figure: a card's turn is queued (kept `KEEP_AFTER` ahead);
        anything else's token taken now or not at all, above its urgency's floor."""
        if urgency == Urgency.CARD:
            return "queue", KEEP_AFTER * 1000 if message else 1e12  # (no message: never kept)
        return "now", self._floor(urgency)

    def _took(self, taken: Take) -> Take:
        if taken.taken:
            self.longest_wait = max(self.longest_wait, taken.wait)
        return taken

    def take_in(
        self, batch: Batch, scope: str, urgency: Urgency, message: str = ""
    ) -> Callable[[Any], Take]:
        """`take(scope, urgency, message)` as one command of a batch (one round trip with
        others): the reply's decoder."""
        request = self._request(scope, *self._taking(urgency, message), message)
        index = batch.script(self._pace, *request)
        return lambda replies: self._took(decode_take(replies[index]))

    def take_output_in(
        self, batch: Batch, scope: str, run_id: str, claim: str, retention: int
    ) -> Callable[[list[Any]], Prepaid | None]:
        """The post token of the run's output, queued on `batch` behind the claim (`claim`: its
        score) and the read of the pass that the run's end starts (output_token.lua): taken
        only while that claim holds the run, the run has ended with its message shown and its
        output is marked and was never posted or tried, with its posting record (the pass then
        posts it at once, its token in hand). What decodes it: None when nothing was asked of
        the bucket. (One server only: its keys are in several slots, `Outbox.reads_ahead`.)"""
        posting = Shown(posting=float(f"{time.time():.3f}"))
        names = self._output_keys(scope, run_id)
        values = [run_id, repr(self.rate), self.burst, posting.encode(), retention, "take", claim]
        index = batch.script(self._output, names, values)

        def decoded(replies: list[Any]) -> Prepaid | None:
            reply = replies[index]
            if isinstance(reply, Exception):
                raise reply
            target = text(reply[2])
            if not target:
                return None
            take = self._took(decode_take(reply[:2]))
            bucket = (text(reply[3]), text(reply[4]), text(reply[5]))
            return Prepaid(run_id, scope, target, take, posting, bucket)

        return decoded

    async def give_back(self, prepaid: Prepaid, retention: int) -> bool:
        """An output's token taken ahead (`take_output_in`) and not used: its posting record
        dropped (no post was tried) and the token back to the bucket, once, unless a hold came
        since or the bucket would have refilled to its burst without it (`pace.lua`'s 'give').
        Whether the token went back."""
        reply = await self._output(
            keys=self._output_keys(prepaid.scope, prepaid.run_id),
            args=[prepaid.run_id, repr(self.rate), self.burst, prepaid.posting.encode(),
                  retention, "give", prepaid.target, *prepaid.bucket],
        )  # fmt: skip
        return int(reply[0]) == 1

    def _output_keys(self, scope: str, run_id: str) -> list[str]:
        return [keys.pace_key(self.name, scope), keys.OUTBOX_LEASES, keys.run_key(run_id),
                keys.outbox_key(run_id), keys.shown_key(run_id)]  # fmt: skip

    async def take(self, scope: str, urgency: Urgency, message: str = "") -> Take:
        """A token for one call: a card's is reserved (`wait` before using it); anything
        else's only when one is free now (else `taken` is False: try again after `wait`).
        With `message` (its id), a card's turn more than `KEEP_AFTER` away is kept in Redis:
        asking again for the same message gives the same turn, from any process, until it
        has come (then it is used up)."""
        return self._took(await self._call(scope, *self._taking(urgency, message), message))

    async def wait(self, scope: str, urgency: Urgency = Urgency.CARD) -> float:
        """Take a token and wait for it (0), or, for a call that does not queue, the seconds
        until one would be free (no token taken)."""
        taken = await self.take(scope, urgency)
        if not taken.taken:
            return taken.wait
        if taken.wait > 0:
            await asyncio.sleep(taken.wait)
        return 0.0

    async def ahead(self, scope: str, urgency: Urgency = Urgency.OUTPUT) -> float:
        """The seconds until a call of `urgency` could take a token, taking none."""
        return (await self._call(scope, "peek", self._floor(urgency))).wait

    async def hold(self, scope: str, seconds: float) -> None:
        """No call behind this limit and scope, from any replica, for `seconds` (Slack's
        `Retry-After`)."""
        await self._call(scope, "hold", round(seconds * 1000))
