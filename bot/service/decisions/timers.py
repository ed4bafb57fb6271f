"""Timers of pending calls: a call nobody decides expires (rejected, with a reason the agent
reads), its approvers are reminded in the card's thread, and it escalates to more people.

Each process runs `timers_forever`; any of them fires a due timer, and fire_timers.lua makes
each firing happen once. The service records what happened (the call, and outbox marks for
its card, the run message and `remind:` thread replies); the projector shows it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from logging import WARNING

from bot.engine.questions import QUESTION_KIND
from bot.outage import log_failure
from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.policy.answerers import question_rule
from bot.service.policy.gate import subject_of_call
from bot.service.policy.rules import human
from bot.store.parts.timers import TimerClaim
from bot.store.records import CallRecord

log = logging.getLogger(__name__)

CLAIM_BATCH = 50


def expired_reason(call: CallRecord) -> str:
    """What the agent receives as the result of a call that expired undecided."""
    if call.kind == QUESTION_KIND:
        return f"No one answered within {human(call.expire_after)}."
    return f"No reviewer decided within {human(call.expire_after)}; the call was not run."


class Timers:
    """Expiry, reminders and escalation of pending calls."""

    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.store = core.store
        self._timers_stop: asyncio.Event | None = None
        # Called on each pass of the loop, on the same clock (the weekly review digest): each
        # must return at once (what takes time, it spawns).
        self.on_pass: list[Callable[[], None]] = []

    def stop_timers(self) -> None:
        """Ask `timers_forever` to return (a cancellation that lands inside a Redis command
        may be absorbed by the client; this flag is not)."""
        if self._timers_stop is not None:
            self._timers_stop.set()

    async def timers_forever(self, every: float = 1.0, lease: float = 30.0) -> None:
        """Fire due timers until `stop_timers()`: polls at least every `every` seconds, and
        wakes up when the earliest timer is due (a timer fires within a few tens of ms of its
        time)."""
        self._timers_stop = stop = asyncio.Event()
        while not stop.is_set():
            wait = every
            try:
                fired, due_in = await self.look(lease=lease)
                if fired == 0:
                    if due_in is not None:
                        wait = max(0.02, min(every, due_in + 0.01))
                else:
                    wait = 0.0
            except Exception:
                log_failure(log, "firing timers failed; retrying", level=WARNING)
            for hook in self.on_pass:
                try:
                    hook()
                except Exception:
                    log_failure(log, "a timer loop's hook failed", level=WARNING)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def look(self, *, lease: float = 30.0) -> tuple[int, float | None]:
        """`fire_due`, and the seconds until the earliest timer left (None: none), read in
        the claim's round trip."""
        claims, due_in = await self.store.timers.look(CLAIM_BATCH, lease)
        self._spawn_fires(claims)
        return len(claims), due_in

    async def fire_due(self, *, lease: float = 30.0) -> int:
        """Claim the timers due now and fire them in tracked tasks (a shutdown drains them, so
        an expiry is never left half done); returns how many calls were claimed. A firing that
        fails leaves its call on the index, due again at the lease's end."""
        claims = await self.store.timers.claim(CLAIM_BATCH, lease)
        self._spawn_fires(claims)
        return len(claims)

    def _spawn_fires(self, claims: list[TimerClaim]) -> None:
        for claim in claims:
            self.core.spawn(self._fire(claim), name=f"timer-{claim.approval_id}")

    async def _fire(self, claim: TimerClaim) -> None:
        timers = self.store.timers
        call = await self.store.get_call(claim.approval_id)
        if call is None or call.decided:
            await timers.release(claim, None)
            return
        owner = self.core.new_owner()
        reason = expired_reason(call)
        run = await self.store.get_run(call.run_id)
        # Who is reminded, and whom the call escalates to: the policy in force now decides.
        policy = self.core.policies.current().policy.for_team(run.team_id if run else "")
        rule = (
            policy.rule_for(
                channel=run.channel_id,
                agent=call.agent,
                tool=call.tool,
                subject=subject_of_call(call),
            )
            if run is not None
            else None
        )
        if rule is not None and run is not None and call.kind == QUESTION_KIND:
            rule = question_rule(rule, run.user_id, call.asked_by(run))  # answerers reminded
        fired = await timers.fire(
            call,
            pause=await self.store.pause_ids(call.run_id),
            owner=owner,
            reason=reason,
            approvers=rule.approvers if rule is not None else (),
            escalate_to=rule.escalate_to if rule is not None else (),
        )
        if fired.expired or fired.fired:
            await self.store.outbox.schedule(call.run_id)
        if fired.expired:
            await self.core.audit(
                AuditKind.EXPIRED, run=run, call=call, decision="expired", detail=reason
            )
            if fired.resume:  # the same path as a pause's last decision (the sweeper backs it)
                await self.core.enqueue("resume", call.run_id, owner)
        for what in fired.fired:
            if what == "escalated":
                await self.core.audit(
                    AuditKind.ESCALATED,
                    run=run,
                    call=call,
                    detail=json.dumps(list(rule.escalate_to if rule is not None else ())),
                )
            else:
                await self.core.audit(AuditKind.REMINDED, run=run, call=call, detail=what)
        await timers.release(claim, fired.next_due)
