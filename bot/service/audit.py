"""What the service writes in the audit trail: the kinds of entries, the metric each kind moves,
and an entry's fields.

The stored entries keep the kinds' plain string values (operators and tests read them); the
metrics count what is audited, so both tell the same story."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from prometheus_client import Counter

from bot import metrics
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
}


def audit_fields(
    *,
    run: RunRecord | None = None,
    call: CallRecord | None = None,
    actor: Actor | None = None,
    decision: str = "",
    detail: str = "",
    text: str = "",
) -> dict[str, str]:
    """An audit entry's fields: what was decided, about which run or call, by whom, and who
    asked for it (`requester`: the turn's, when not the run's starter: a follow-up's author).

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
    if actor is not None:
        fields.update(team=actor.team_id, user=actor.user_id, enterprise=actor.enterprise_id)
    return fields
