"""A second opinion on each card: the operator's advisor (`APPROVAL_BOT_ADVISOR`), asked about
a call once its card is posted, off every person's path.

The advisor reads what the card shows (`bot.engine.advisor.shown_to_advisor`): the tool, the
arguments as displayed, the agent's reason; never the run's state or anything secret. Its
advice is kept with the call (`CallRecord.advice`), shown on the card, and audited (`advised`);
when it fails, does not answer within `timeout_seconds` (on the bot's clock) or answers out of
shape, the card says "no advice" and the call stays as it was. Either way its time is measured
(`approval_bot_advisor_seconds`).

A policy may route on it (`when: {advice.risk: high}`). Until advice is given, and when none
is, such a condition is undecidable: the call waits for a person under the strictest rule that
could apply, and nothing approves it. When advice comes, the rule the policy in force gives
the call with it is written with it, in one transition (a call decided first is left as it
was): the card then names that rule's approvers and quorum, and a rule that decides on advice
(`auto: approve` with `advice.risk: low`) decides it, audited as made on the advisor's advice.
Every later judgement reads the advice with the call, as every judgement reads the policy in
force: a decision is judged under the rule the advice gives at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents import Agent
from agents.exceptions import ModelBehaviorError

from bot import metrics
from bot.engine.advisor import Advice, Answered, OutOfShape, ask_advisor, shown_to_advisor
from bot.engine.questions import QUESTION_KIND
from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.decisions.edits import EDITABLE_KINDS
from bot.service.judgement import Judgement
from bot.service.oversight.advised import (
    FAILED,
    NONE_SAID,
    OUT_OF_SHAPE,
    TIMED_OUT,
    encode_advice,
    encode_none,
)
from bot.service.policy.gate import rule_for
from bot.service.policy.rules import CallRule
from bot.service.running.runs import stored_value, time_call
from bot.store.records import CallRecord, RunRecord

log = logging.getLogger(__name__)

ADVISED = "advised"  # the outcome label of advice given
# The fields the rule in force gives a pending call (as `Runs._new_call` writes them).
RULED = ("auto", "rule", "required", "allow_always", "approvers", "confirm", "allow_edit",
         "expire_after", "remind_after", "remind_max", "escalate_after", "escalate_at",
         "escalate_to")  # fmt: skip


@dataclass(frozen=True)
class AdvisorSettings:
    """The advisor (`APPROVAL_BOT_ADVISOR`: None, none) and how long it may take
    (`APPROVAL_BOT_ADVISOR_TIMEOUT_SECONDS`), and how many calls it is asked about at once
    in one process (`APPROVAL_BOT_ADVISOR_CONCURRENCY`; the others wait their turn)."""

    agent: Agent[Any] | None = None
    timeout_seconds: float = 30.0
    concurrency: int = 4


def ruled_call(call: CallRecord, rule: CallRule) -> tuple[CallRecord, dict[str, str]]:
    """The pending `call` as `rule` has it (its approvers, quorum, automatic decision, offers,
    timers), and the stored fields that changes (none: the rule is the one it has)."""
    ruled = dataclasses.replace(call, escalate_after=0, escalate_at=0.0, escalate_to="")
    ruled.auto, ruled.rule, ruled.required = rule.auto or "", rule.source, rule.required
    ruled.allow_always, ruled.approvers = rule.allow_always, json.dumps(list(rule.approvers))
    ruled.confirm = (rule.confirm_value or "tool") if rule.confirm else ""
    ruled.allow_edit = call.kind in EDITABLE_KINDS and rule.editable(call.kind)
    time_call(ruled, rule)
    changed = {
        name: stored_value(getattr(ruled, name))
        for name in RULED
        if getattr(ruled, name) != getattr(call, name)
    }
    return ruled, changed


class Advisor:
    """Asks the advisor about each posted card, records its advice and what it routes."""

    def __init__(
        self,
        core: ServiceCore,
        judgement: Judgement,
        settings: AdvisorSettings,
        auto_decide: Callable[[RunRecord], Awaitable[None]],
    ) -> None:
        self.core = core
        self.judgement = judgement
        self.settings = settings
        self.auto_decide = auto_decide  # the runs' (the policy's automatic decisions)
        self.clock = core.store.timers.clock
        self._turns = asyncio.Semaphore(max(1, settings.concurrency))

    def card_posted(self, run: RunRecord, call: CallRecord) -> None:
        """A call's card was posted: ask the advisor about it, in the background."""
        if self.settings.agent is None or call.kind == QUESTION_KIND or call.decided:
            return
        self.core.spawn(self._advise(run, call.approval_id), name="advisor")

    async def _advise(self, run: RunRecord, approval_id: str) -> None:
        call, context = await self.core.store.call_with_context(approval_id)
        if call is None or call.decided or call.advice:
            return
        shown = shown_to_advisor(
            tool=call.tool, kind=call.kind, agent=call.agent,
            arguments=call.edited_arguments or call.arguments,
            reason=context.said if context is not None else "",
            description=context.description if context is not None else "",
        )  # fmt: skip
        async with self._turns:
            start = self.clock.monotonic()
            outcome, answered = await self._ask(shown, approval_id)
            seconds = max(0.0, self.clock.monotonic() - start)
        metrics.ADVISOR_SECONDS.labels(outcome=outcome).observe(seconds)
        took = f"{seconds:.2f} s"
        if answered is not None:
            metrics.ADVISOR_TOKENS.labels(kind="input").inc(answered.input_tokens)
            metrics.ADVISOR_TOKENS.labels(kind="output").inc(answered.output_tokens)
            took += f", {answered.input_tokens} + {answered.output_tokens} tokens"
        advice = answered.advice if answered is not None else None
        await self._record(run, call, outcome, advice, took)

    async def _ask(self, shown: str, approval_id: str) -> tuple[str, Answered | None]:
        """The advisor's advice, or why there is none, within the timeout (the bot's clock)."""
        assert self.settings.agent is not None
        asked = asyncio.create_task(ask_advisor(self.settings.agent, shown), name="advisor-ask")
        limit = asyncio.create_task(self.clock.sleep(self.settings.timeout_seconds))
        try:
            await asyncio.wait({asked, limit}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            limit.cancel()
        if not asked.done():
            asked.cancel()
            with contextlib.suppress(BaseException):
                await asked
            log.warning("the advisor did not answer about %s within %g s", approval_id,
                        self.settings.timeout_seconds)  # fmt: skip
            return TIMED_OUT, None
        error = asked.exception()
        if error is None:
            return ADVISED, asked.result()
        why = OUT_OF_SHAPE if isinstance(error, OutOfShape | ModelBehaviorError) else FAILED
        log.warning("the advisor gave no advice about %s (%s: %s)", approval_id,
                    type(error).__name__, NONE_SAID[why])  # fmt: skip
        return why, None

    async def _record(
        self, run: RunRecord, call: CallRecord, outcome: str, advice: Advice | None, took: str,
    ) -> None:  # fmt: skip
        """Keep the advice with the call (and the rule the policy in force gives it with the
        advice, when that is another), audit it, and let a rule that decides on it decide."""
        stored = encode_advice(advice) if advice is not None else encode_none(outcome)
        call.advice = stored
        rule = rule_for(self.judgement.policy_for(run), run, call)
        fields = {"advice": stored}
        ruled, routed = call, dict[str, str]()
        if rule is not None and advice is not None:
            ruled, routed = ruled_call(call, rule)
        written = await self.core.store.advise(call.approval_id, {**fields, **routed})
        if advice is None:
            await self.core.audit(AuditKind.ADVISED, call=call, decision="none",
                                  detail=f"{NONE_SAID[outcome]} ({took})")  # fmt: skip
            return
        concerns = "".join(f"\n- {c}" for c in advice.concerns)
        await self.core.audit(
            AuditKind.ADVISED, call=call, decision=advice.risk, detail=took,
            text=advice.rationale + concerns,
        )  # fmt: skip
        if not written or not routed or rule is None:
            return
        call = ruled
        await self.core.audit(
            AuditKind.ROUTED, call=call,
            detail=f"policy rule {rule.source} on the advisor's advice (risk {advice.risk})",
        )  # fmt: skip
        if rule.auto:
            await self.auto_decide(run)
        else:
            await self.core.store.timers.schedule([call])
