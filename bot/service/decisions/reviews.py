"""Runs that need a person: a call whose outcome is unknown after a worker stopped.

Nothing is run again by itself; an approver of the tool chooses Mark done or Run again."""

from __future__ import annotations

import logging

from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.judgement import Judgement, requester_of
from bot.service.policy.gate import subject_of_call
from bot.service.ports import Actor
from bot.service.replies import Reply
from bot.store import keys
from bot.store.records import (
    RunRecord,
    RunStatus,
)

log = logging.getLogger(__name__)


class Reviews:
    """Stopping for a review, and settling it exactly once."""

    def __init__(self, core: ServiceCore, judgement: Judgement) -> None:
        self.core = core
        self.judgement = judgement  # who may settle a review: as who may decide its calls

    async def stop_for_review(self, run: RunRecord, attempt: str, kind: str, what: str) -> None:
        """Stop for a person: whether a call had its effect is unknown. Nothing re-runs."""
        store = self.core.store
        review_id = keys.new_approval_id(run.run_id)
        text = (
            f"{what} Whether it had its effect is unknown, so the bot did not run it again. "
            "Check what happened, then choose: *Mark done* (continue; the agent is told the "
            "call was done) or *Run again* (the call runs once more)."
        )
        if not await store.to_review(run.run_id, attempt, review_id, text, kind):
            return
        await self.core.audit(AuditKind.NEEDS_REVIEW, run=run, detail=text)

    async def resolve_review(self, actor: Actor, review_id: str, *, action: str) -> Reply:
        """A person settles a review: mark the unknown calls done, or run them again."""
        core, store = self.core, self.core.store
        run_id = keys.run_of(review_id)
        run = await store.get_run(run_id) if run_id else None
        if run is None or run.review_id != review_id or run.status != RunStatus.NEEDS_REVIEW:
            return Reply(False, "This review is already settled, or the run no longer exists.")
        policy = core.policies.current().policy.for_team(run.team_id)
        # The calls in question are approved calls of the pause: judge each by its own rule
        # (its agent may be a handoff's or a nested agent's, not the run's first agent).
        paused = {c.call_id: c for c in await store.pause_calls(run.run_id)}
        agents = {key: c.agent for key, c in paused.items()}
        subjects = {
            (agents.get(key, run.agent_name), str(entry.get("tool", "")), key)
            for key, entry in (await core.journal.entries(run.run_id)).items()
            if entry.get("status") == "executing"
        } or {(run.agent_name, "*", "")}
        required = 1
        for agent, tool, key in sorted(subjects):
            read = subject_of_call(paused[key]) if key in paused else {}
            rule = policy.rule_for(channel=run.channel_id, agent=agent, tool=tool, subject=read)
            required = max(required, rule.required if rule is not None else 1)
            asked_by = requester_of(run, paused.get(key))
            verdict = await self.judgement.person(policy, rule, actor, run, tool, asked_by=asked_by)
            if not verdict.allowed:
                await core.audit(AuditKind.REFUSED, run=run, actor=actor,
                                 decision=f"review_{action}", detail=verdict.reason)  # fmt: skip
                return Reply(False, verdict.said)
        if action == "rerun" and required > 1:
            # Running a call again is approving it again: the same quorum applies.
            votes = await store.review_vote(run.run_id, review_id, actor.user_id)
            if votes < required:
                await core.audit(AuditKind.REVIEW_VOTE, run=run, actor=actor, decision=action,
                                 detail=f"{votes} of {required}")  # fmt: skip
                await store.set_run_fields(run.run_id, review_required=str(required))
                return Reply(True)  # the review message shows the vote (outbox)
        execution = core.new_owner()
        status = "running" if run.review_kind == "start" else "resuming"
        changed = await store.resolve_review(
            run.run_id, review_id, action=action, execution=execution, user=actor.user_id,
            status=status,
        )  # fmt: skip
        if changed is None:
            return Reply(False, "This review is already settled.")
        await core.audit(
            AuditKind.REVIEW_SETTLED, run=run, actor=actor, decision=action,
            detail=", ".join(changed),
        )  # fmt: skip
        await core.enqueue(run.review_kind or "resume", run.run_id, execution)
        return Reply(True)  # the review and run messages show the outcome (outbox)


def beyond_text(calls: list[str]) -> str:
    """Why a run was stopped rather than retried: calls beyond the approved ones had started."""
    return (
        "The worker executing this run stopped (or stalled) after these calls had started: "
        + ", ".join(calls)
        + ". They may have had their effect, and a retried agent could ask for them again, "
        "so the run was stopped instead of retried. Check what they did, then start a new "
        "run if needed."
    )
