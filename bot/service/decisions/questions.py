"""Answers to the agent's questions (`ask_human`): the Answer form, its submission and thread
replies on a question's card, each recorded exactly once.

A question is a pending call of kind `question` (bot/engine/questions.py). An answer is an
approval of that call whose reason is the answer: `decide.lua`'s compare-and-swap on `pending`
records it (two answers at once: one wins, the other is told who answered first), and the
resume that follows gives the recorded answer to the tool, which returns it to the model."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.engine.questions import QUESTION_KIND
from bot.service.audit import AuditKind
from bot.service.authorize import principal_parts
from bot.service.core import ServiceCore
from bot.service.digest import digest_of
from bot.service.policy.gate import rule_for
from bot.service.policy.rules import Verdict
from bot.service.ports import Actor
from bot.service.replies import Mention, Part, Reply, Text, said, when
from bot.store.records import (
    AlreadyDecided,
    CallRecord,
    CallStatus,
    Decided,
    DecideResult,
    Gone,
    Rerouted,
    RunRecord,
)

log = logging.getLogger(__name__)

ANSWER_LIMIT = 3000  # characters of an answer (the modal's limit too)


@dataclass(frozen=True)
class AnswerForm:
    """A question someone may answer now: what the Answer modal shows."""

    call: CallRecord
    """The question's call (its `arguments` hold the question text)."""


def answered_text(result: AlreadyDecided) -> Text:
    """Why an answer changed nothing: the question was answered, expired or cancelled."""
    if result.status == CallStatus.EXPIRED:
        return Text.of(
            f"This question expired at {when(result.decided_at)}: no one answered in time, and "
            "the agent was told so. Nothing changed."
        )
    if result.status == CallStatus.CANCELLED:
        return Text.of("This question was cancelled with its run. Nothing changed.")
    who: Part = Mention(result.decided_by) if result.decided_by else "someone"
    return Text(
        ("This question was already answered by ", who, f" at {when(result.decided_at)}. "
         "Your answer was not sent.")
    )  # fmt: skip


class Questions:
    """Answering the agent's questions (thread replies on a question's card come here from
    `Decisions.thread_reply`)."""

    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.store = core.store

    async def _may_answer(self, actor: Actor, run: RunRecord, call: CallRecord) -> Verdict:
        """May `actor` answer `call`? The served workspace, the run's workspace, and the
        question's answerers under the policy in force (bot/service/policy/answerers.py)."""
        policy = self.core.policies.current().policy
        authorizer = self.core.authorizer
        served = authorizer.served(policy, actor)
        if not served.allowed:
            return served
        if actor.team_id != run.team_id:
            return Verdict(False, "This run belongs to another Slack workspace.")
        rule = rule_for(policy.for_team(run.team_id), run, call)
        if rule is None:
            return Verdict(
                False, "This channel is no longer in the bot's policy, so nobody may answer."
            )
        member = await authorizer.is_among(actor, rule.approvers, run.channel_id)
        if member.allowed:
            return member
        return Verdict(
            False,
            member.said
            or said(
                "You may not answer this question: it is for {answerers}.",
                answerers=principal_parts(rule.approvers),
            ),
        )

    async def _check(self, actor: Actor, approval_id: str) -> tuple[CallRecord, RunRecord] | Reply:
        """What must hold before an answer is recorded; a Reply when it does not."""
        call, run = await self.store.call_and_run(approval_id)  # one round trip
        if call is None:
            return Reply(False, Gone().why)
        if call.kind != QUESTION_KIND:
            return Reply(False, "This is not a question: decide it with its card's buttons.")
        if run is None:
            verdict = Verdict(False, "This run no longer exists.")
        else:
            verdict = await self._may_answer(actor, run, call)
        if run is None or not verdict.allowed:
            reply = Reply(False, verdict.said)
        elif call.decided:
            earlier = AlreadyDecided(call.status, call.decided_by, call.decided_at, call.via)
            reply = Reply(False, answered_text(earlier))
        elif digest_of(call) != call.digest:
            reply = Reply(False, "This question changed since it was posted; nothing changed.")
        else:
            return call, run
        await self.core.audit(
            AuditKind.REFUSED, call=call, actor=actor, decision="answer", detail=reply.text
        )
        return reply

    async def answer_form(self, actor: Actor, approval_id: str) -> AnswerForm | Reply:
        """Check an Answer click before its modal opens: it opens only for someone who may
        answer a question still waiting."""
        checked = await self._check(actor, approval_id)
        if isinstance(checked, Reply):
            return checked
        return AnswerForm(checked[0])

    def _audited(
        self, call: CallRecord, actor: Actor, answer: str
    ) -> Callable[[Any, DecideResult], None]:
        """The answer's audit entry, sent with the write that follows a recorded answer."""

        def audited(pipe: Any, result: DecideResult) -> None:
            if isinstance(result, Decided):
                self.core.audit_in(
                    pipe, AuditKind.ANSWERED, call=call, actor=actor, decision="answer",
                    text=answer,
                )  # fmt: skip

        return audited

    async def answer(self, actor: Actor, approval_id: str, text: str) -> Reply:
        """Record `actor`'s answer exactly once and resume the run (the tool returns it)."""
        answer = text.strip()
        if not answer:
            return Reply(False, "The answer is empty: write what the agent should be told.")
        if len(answer) > ANSWER_LIMIT:
            return Reply(
                False,
                f"The answer is too long ({len(answer):,} characters; at most "
                f"{ANSWER_LIMIT:,}). Shorten it and answer again.",
            )
        for rejudge in (True, False):
            checked = await self._check(actor, approval_id)
            if isinstance(checked, Reply):
                return checked
            call, run = checked
            owner = self.core.new_owner()
            result = await self.store.decide(
                approval_id,
                approve=True,
                always=False,
                team=actor.team_id,
                user=actor.user_id,
                reason=answer,
                owner=owner,
                routed=str(call.routed),  # routed anew since (an escalation): judged again, once
                after=self._audited(call, actor, answer),
            )
            if not (rejudge and isinstance(result, Rerouted)):
                break
        if isinstance(result, AlreadyDecided):
            reply = Reply(False, answered_text(result))
        elif isinstance(result, Decided):
            if result.resume:
                self.core.spawn(
                    self.core.enqueue("resume", run.run_id, owner), name=f"resume-{run.run_id}"
                )
            return Reply(True)
        else:  # Gone (a question is never voted on: one answer settles it)
            reply = Reply(False, result.why if isinstance(result, Rerouted) else Gone().why)
        await self.core.audit(
            AuditKind.REFUSED, call=call, actor=actor, decision="answer", detail=reply.text
        )
        return reply
