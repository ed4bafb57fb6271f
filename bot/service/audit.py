"""What the service writes in the audit trail: the kinds of entries, the metric each kind moves,
and an entry's fields.

The stored entries keep the kinds' plain string values (operators and tests read them); the
metrics count what is audited, so both tell the same story."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from prometheus_client import Counter

from bot import metrics
from bot.service.oversight.advised import without_advice
from bot.service.policy.conditions import REQUESTED_AT, encode_subject, stored_subject
from bot.service.policy.gate import subject_of_call
from bot.service.ports import Actor
from bot.store.records import CallRecord, RunRecord


class AuditKind(StrEnum):
    """The kind of an audit entry; `tally` moves the metric it carries (`METRICS`), if any."""

    RUN_STARTED = "run_started"
    START_REFUSED = "start_refused"
    PAUSED = "paused"
    DECIDED = "decided"
    APPROVAL_VOTE = "approval_vote"
    EDITED = "edited"  # a reviewer's arguments replaced the call's (both digests, the editor)
    REFUSED = "refused"
    ALWAYS_DROPPED = "always_dropped"
    RESUMED = "resumed"
    RUN_FINISHED = "run_finished"
    RUN_FAILED = "run_failed"
    JOB_RETRIED = "job_retried"
    NEEDS_REVIEW = "needs_review"
    REVIEW_VOTE = "review_vote"
    REVIEW_SETTLED = "review_settled"
    EXPIRED = "expired"
    REMINDED = "reminded"
    ESCALATED = "escalated"
    CANCELLED = "cancelled"
    ASKED = "asked"  # the agent asked a question (ask_human); detail: the question
    ANSWERED = "answered"  # a person answered it; detail: the answer
    GRANT_MADE = "grant_made"  # an Always approve that lasts in the channel (grant_max)
    GRANT_USED = "grant_used"  # a grant settled a call of a later run
    GRANT_DROPPED = "grant_dropped"  # expired, or no longer allowed by the policy in force
    GRANT_REVOKED = "grant_revoked"  # by its grantor or an approver of the channel
    WEBHOOK_SKIPPED = "webhook_skipped"  # entries the webhook receiver never got (too old)
    TURN_STARTED = "turn_started"  # a follow-up began turn n; detail: turn n, what was said
    TURN_QUEUED = "turn_queued"  # a follow-up waits for the turn going on to end
    FOLLOW_UP_REFUSED = "follow_up_refused"  # detail: why
    ROUTED = "routed"  # a call's rule, when it is not the one it was posted under
    # A rule's conditions could not be decided on a call: a person decides it, under the
    # strictest rule that could apply (`Policy.rule_for`); detail: why, and that rule.
    UNDECIDABLE = "undecidable"
    # what a shadow rule would have done with a call (bot/service/policy/shadow.py)
    SHADOW = "shadow"
    # Whether approvals are real (bot/service/oversight/attention.py): a person opened what lies
    # behind a card (decision: show_all | conversation), a person's quick approvals in a row raised
    # the rubber-stamp alarm (detail: how many, how quick).
    VIEWED = "viewed"
    RUBBER_STAMP = "rubber_stamp"
    # A call's card was posted: decision folded | whole (its arguments), detail its characters.
    CARD_SHOWN = "card_shown"
    # The advisor's second opinion on a call (bot/service/oversight/advice.py): decision its risk,
    # or `none` (detail: why); detail its rationale and the seconds it took; text its concerns.
    ADVISED = "advised"

    def tally(self, decision: str, call: CallRecord | None) -> None:
        """Move this kind's metric for one entry (`decision` and `call` as audited)."""
        metric = METRICS.get(self)
        if metric is not None:
            metric(decision, call)


Metric = Callable[[str, CallRecord | None], None]


def _counter(counter: Counter) -> Metric:
    return lambda _decision, _call: counter.inc()


def _decided(decision: str, call: CallRecord | None) -> None:
    metrics.decided(decision, call.paused_at if call is not None else "")


def _shadow(would: str, call: CallRecord | None) -> None:
    """A shadow entry's call carries the shadow rule's label as its `rule`."""
    metrics.SHADOW_DECISIONS.labels(rule=call.rule if call is not None else "", would=would).inc()


def _run_cancelled(_decision: str, call: CallRecord | None) -> None:
    if call is None:  # the run (each cancelled call is audited too, and not counted)
        metrics.RUNS_CANCELLED.inc()


# The metric each kind moves; the kinds not listed move none.
METRICS: dict[AuditKind, Metric] = {
    AuditKind.DECIDED: _decided,
    AuditKind.ANSWERED: _decided,
    AuditKind.APPROVAL_VOTE: lambda _decision, _call: metrics.decided("vote"),
    AuditKind.REFUSED: lambda _decision, _call: metrics.decided("refused"),
    AuditKind.RUN_STARTED: _counter(metrics.RUNS_STARTED),
    AuditKind.RESUMED: _counter(metrics.RESUMES),
    AuditKind.RUN_FAILED: _counter(metrics.RUN_FAILURES),
    AuditKind.EXPIRED: _counter(metrics.EXPIRIES),
    AuditKind.CANCELLED: _run_cancelled,
    AuditKind.SHADOW: _shadow,
}

# The entries that say how a call was settled, and so keep what a backtest replays
# (`approval-bot policy backtest`, bot/learning/): the call's subject as the policy judged it
# (the same JSON, bounded by conditions.SUBJECT_LIMIT, as the call itself keeps), when it was
# requested (`during:`), and what it was posted under (approvers, quorum, typed confirmation).
# An edit keeps the subject as proposed (the decision after it, the edited one's).
REPLAYED = frozenset({AuditKind.DECIDED, AuditKind.EXPIRED, AuditKind.GRANT_USED, AuditKind.EDITED})
# A shadow entry keeps what its rule would have asked (its call's approvers are the rule's).
JUDGED = REPLAYED | {AuditKind.SHADOW}


def audit_fields(
    *,
    kind: AuditKind | None = None,
    run: RunRecord | None = None,
    call: CallRecord | None = None,
    actor: Actor | None = None,
    decision: str = "",
    detail: str = "",
    text: str = "",
) -> dict[str, str]:
    """An audit entry's fields: what was decided, about which run or call, by whom, and who
    asked for it (`requester`: the turn's, when not the run's starter: a follow-up's author);
    for the kinds that settle a call, what a backtest replays (`REPLAYED`: its `subject`, a
    call's argument values, never leaves the bot either: `bot.webhooks.outgoing`).

    `detail` is the bot's own words (identifiers, digests, counts, policy rules); `text` is
    the entry's **free text**: what a person or the agent wrote, or a call's argument values
    (a task, a follow-up, a question and its answer, a rejection reason, edited arguments, a
    grant's narrowed values, a run's output or error). Free text is never put in `detail`:
    what leaves the bot of it is decided in one place (`bot.webhooks.outgoing`)."""
    fields = {"decision": decision, "detail": detail, "text": text}
    if run is not None:
        fields.update(run_id=run.run_id, channel=run.channel_id, agent=run.agent_name)
        fields.update(team=run.team_id, user=run.user_id, enterprise=run.enterprise_id)
        fields.update(requester=run.requester)
    if call is not None:
        fields.update(approval_id=call.approval_id, run_id=call.run_id, agent=call.agent)
        fields.update(tool=call.tool, digest=call.digest, channel=call.channel_id)
        fields.update(requester=call.requester)  # the call's turn's (the run may be further)
        if call.rule:  # the rule that decided or routed it
            fields.update(rule=call.rule)
        if kind in JUDGED:
            fields.update(judged_fields(call, replayed=kind in REPLAYED))
    if actor is not None:
        fields.update(team=actor.team_id, user=actor.user_id, enterprise=actor.enterprise_id)
    return fields


def judged_fields(call: CallRecord, *, replayed: bool) -> dict[str, str]:
    """What `call` was posted under (approvers, quorum, typed confirmation) and, `replayed`,
    its subject as judged and when it was requested. Defaults are left out (one approval, no
    confirmation), as the call's own hash leaves them out."""
    fields = {"approvers": call.approvers}
    if call.required > 1:
        fields["required"] = str(call.required)
    if call.confirm:
        fields["confirm"] = call.confirm
    if replayed:
        subject = subject_as_decided(call)
        fields["subject"] = encode_subject(subject)
        if call.paused_at:
            fields["requested"] = f"{call.paused_at:.3f}"
    return fields


def subject_as_decided(call: CallRecord) -> dict[str, Any]:
    """The subject the decision was about: the edited arguments' once a reviewer edited a
    function or MCP call (what approving it runs; the JSON as entered, read as a stored call's
    arguments are), else the call's as the policy judged it."""
    if call.edited_arguments and call.kind in ("function", "hosted_mcp"):
        return stored_subject(call.kind, call.edited_arguments)
    subject = without_advice(subject_of_call(call))  # (the advice is audited on its own)
    subject.pop(REQUESTED_AT, None)
    return subject
