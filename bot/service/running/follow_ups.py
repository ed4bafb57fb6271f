"""Talking to a run: a reply in a run's thread is said to its agent. After the run finished it
starts the run's next turn (the agent sees the whole conversation); while a turn is going it
waits in the run's queue and starts the turn after. Every turn is a run's execution like the
first: the same policy, cards, limits, journal and audit trail."""

from __future__ import annotations

import dataclasses
import logging
import time

from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.policy.rules import Verdict
from bot.service.ports import Actor
from bot.service.replies import Code, Mention, Reply, Text, said
from bot.service.running.limits import refusal, task_too_long
from bot.store.parts.turns import FollowUp, Queued, Refused, Started
from bot.store.records import RunRecord, RunStatus

log = logging.getLogger(__name__)

ENDED = {
    "failed": "This run failed, so it cannot go on. Start a new run with `/agent <task>`.",
    "cancelled": "This run was cancelled, so it cannot go on. Start a new run with "
    "`/agent <task>`.",
    "missing": "This run is no longer stored, so it cannot go on. Start a new run with "
    "`/agent <task>`.",
    "full": "Several follow-ups are already waiting for this run's current turn to end; send "
    "this one once the agent has answered those.",
}


def ended_text(run: RunRecord) -> Text:
    """Why an ended run cannot go on: it failed, or it was cancelled (by whom)."""
    if run.status == RunStatus.CANCELLED and run.cancelled_by:
        return said(
            "This run was cancelled by {who}, so it cannot go on. Start a new run with {usage}.",
            who=Mention(run.cancelled_by),
            usage=Code("/agent <task>"),
        )
    return Text.of(ENDED.get(run.status, ENDED["missing"]))


class FollowUps:
    """Follow-ups in runs' threads, and the turns they start."""

    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.store = core.store

    async def follow_up(
        self, actor: Actor, channel: str, thread_ts: str, text: str, *, ts: str = ""
    ) -> Reply | None:
        """A reply in a thread: None when the thread is not a run's (nothing to do); else what
        to tell its author (privately) when it was refused or queued."""
        run_id = await self.store.run_for_message(channel, thread_ts)
        if run_id is None or not text.strip():
            return None
        run = await self.store.get_run(run_id)
        if run is None:
            return Reply(False, ENDED["missing"])
        policy = self.core.policies.current().policy
        verdict = self.core.authorizer.served(policy, actor)  # a team the policy lists
        if verdict.allowed:
            verdict = await self.core.authorizer.may_follow(
                policy.for_team(run.team_id), actor, run_team=run.team_id, starter=run.user_id,
                channel=run.channel_id, agent=run.agent_name,
            )  # fmt: skip
        if verdict.allowed and run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
            verdict = Verdict(False, ended_text(run))  # before anything is spent on it
        if verdict.allowed and task_too_long(self.core.limits, text):
            verdict = Verdict(False, task_too_long(self.core.limits, text))
        if (
            verdict.allowed
            and run.status == RunStatus.FINISHED
            and not await self.store.turns.has_history(run.run_id)
        ):
            verdict = Verdict(
                False,
                "This run finished before the bot kept conversations (or its conversation "
                "expired), so it cannot go on. Start a new run with `/agent <task>`.",
            )
        if (
            verdict.allowed
            and ts
            and not await self.store.first_delivery("follow_up", f"{channel}:{ts}")
        ):
            # Slack's retry of an event already handled, or the same message's other event (a
            # mention in a run's thread comes as `message` and `app_mention`): handled, nothing
            # to say. Not None, which says the thread is not a run's (a mention would then
            # start a run of its own).
            return Reply(True)
        if verdict.allowed:
            admission = await self.core.admission.admit(
                self.core.limits.quota,
                team=actor.team_id,
                user=actor.user_id,
                channel=run.channel_id,
                run_id=run.run_id,
            )
            if admission.verdict != "ok":
                verdict = Verdict(False, refusal(self.core.limits, admission))
        if not verdict.allowed:
            await self.core.audit(
                AuditKind.FOLLOW_UP_REFUSED, run=_about(run), actor=actor, detail=verdict.reason
            )
            return Reply(False, verdict.said)
        said = FollowUp(actor.user_id, text, time.time())
        execution = self.core.new_owner()
        result = await self.store.turns.follow(run.run_id, said, execution)
        if isinstance(result, Started):
            await self._started(run, result, execution)
            return Reply(True)
        if isinstance(result, Queued):
            await self.core.audit(
                AuditKind.TURN_QUEUED,
                run=_about(run),
                actor=actor,
                detail=f"#{result.position}",
                text=text,
            )
            ahead = result.position - 1
            return Reply(
                True,
                "The agent is still on this run's current turn; it takes this up when that "
                "turn ends"
                + (
                    f" (after {ahead} other follow-up{'s' if ahead != 1 else ''})."
                    if ahead
                    else "."
                ),
            )
        assert isinstance(result, Refused)
        if result.why == RunStatus.CANCELLED:  # cancelled since it was read
            return Reply(False, ended_text(await self.store.get_run(run.run_id) or run))
        return Reply(False, ENDED.get(result.why, ENDED["missing"]))

    async def next_turn(self, run: RunRecord) -> None:
        """A turn just finished: a follow-up queued meanwhile starts the next one. (Never
        raises: if this fails, the follow-up stays queued, and the next reply starts it.)"""
        try:
            execution = self.core.new_owner()
            started = await self.store.turns.next_turn(run.run_id, execution)
            if started is not None:
                await self._started(run, started, execution)
        except Exception:
            log.warning("could not start the queued follow-up of run %s", run.run_id)

    async def _started(self, run: RunRecord, started: Started, execution: str) -> None:
        """Its job is enqueued last: if this process dies before, the sweeper enqueues it
        (the run is executing and due)."""
        await self.store.reopened(run)
        asked = started.follow_up.user
        await self.core.audit(
            AuditKind.TURN_STARTED,
            run=dataclasses.replace(
                run, turn=started.turn, requester="" if asked == run.user_id else asked
            ),
            actor=Actor(run.team_id, asked, run.enterprise_id),
            detail=f"turn {started.turn}",
            text=started.follow_up.text[:2000],
        )
        await self.core.enqueue("start", run.run_id, execution)


def _about(run: RunRecord) -> RunRecord:
    """The run, as the audit entry of a follow-up that began no turn names it: the entry's
    user is the follow-up's author, and no turn's requester is theirs."""
    return dataclasses.replace(run, requester="")
