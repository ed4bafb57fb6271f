"""Prometheus metrics of the bot, in a registry of their own (served on `/metrics`).

Counters move where things happen: decisions, resumes and failures where the service records
them in the audit trail, Slack API errors in the Web API client. Gauges that describe shared
state (pending calls, the job queue) are read from Redis when scraped, so every process reports
the same value for them: aggregate them with `max`, not `sum`.

The serving processes of one `serve --http --processes N` (`bot.processes`) are one bot to
whoever scrapes it: each calls `share` as it starts, and from then on every value it holds is
kept in a file of its own in a directory the supervisor made for them all (prometheus_client's
multiprocess mode: memory-mapped, so a value is there the moment it moves, and stays there when
its process is killed). Any of them renders the whole from those files: counters and histograms
summed over every process that ever served (a restarted process's counts are kept, so a total
never goes backwards), the Redis-backed gauges as last read by any live process, and the gauges
that are each process's own (`redis_up`, `slack_auth_ok`, `serving`) by `pid`, live ones only.
Why not prometheus_client's usual switch (PROMETHEUS_MULTIPROC_DIR before the first metric is
made): the supervisor has made these metrics before it knows how many processes it forks, and
must not count itself as one of them; `_Value` keeps every value in memory until `share`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import platform
import time
from importlib import metadata
from typing import Any, ClassVar, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
    values,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

# The environment variable prometheus_client's shared values read their directory from.
SHARED_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


class _Held(Protocol):
    def inc(self, amount: float) -> None: ...
    def set(self, value: float, timestamp: float | None = None) -> None: ...
    def set_exemplar(self, exemplar: Any) -> None: ...
    def get(self) -> float: ...
    def get_exemplar(self) -> Any: ...


class _Value:
    """One sample's value (prometheus_client's `values.ValueClass`): in this process's memory,
    until `share` moves it, and every one made after, into this process's file of the shared
    directory (carrying its value over: the gauges set at import)."""

    made: ClassVar[list[_Value]] = []
    shared: ClassVar[Any] = None  # prometheus_client's MultiProcessValue class, once shared

    def __init__(
        self,
        typ: str,
        metric_name: str,
        name: str,
        labelnames: Any,
        labelvalues: Any,
        help_text: str,
        multiprocess_mode: str = "",
        **kwargs: Any,
    ) -> None:
        self._params = (typ, metric_name, name, labelnames, labelvalues, help_text)
        self._mode = multiprocess_mode
        self.inner: _Held
        if _Value.shared is None:
            self.inner = values.MutexValue(*self._params)  # type: ignore[no-untyped-call]
            _Value.made.append(self)
        else:
            self.inner = _Value.shared(*self._params, multiprocess_mode=multiprocess_mode)

    def share(self) -> None:
        value = self.inner.get()
        self.inner = _Value.shared(*self._params, multiprocess_mode=self._mode)
        if value:
            self.inner.set(value)

    def inc(self, amount: float) -> None:
        self.inner.inc(amount)

    def set(self, value: float, timestamp: float | None = None) -> None:
        self.inner.set(value, timestamp)

    def set_exemplar(self, exemplar: Any) -> None:
        self.inner.set_exemplar(exemplar)

    def get(self) -> float:
        return self.inner.get()

    def get_exemplar(self) -> Any:
        return self.inner.get_exemplar()


values.ValueClass = _Value  # (before the first metric below is made)

# `*_created` series double the output and no dashboard uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]

REGISTRY = CollectorRegistry(auto_describe=True)

# The outcome label of decisions: what the decision was, and who or what made it.
OUTCOMES = (
    "approve",
    "reject",
    "always_approve",
    "always_reject",
    "auto_approve",
    "auto_reject",
    "vote",
    "refused",
    "answer",
)

DECISIONS = Counter(
    "approval_bot_decisions",
    "Decisions on pending calls by outcome: approve, reject, always_*, auto_* (by the policy), "
    "vote (an approval counted towards a quorum), answer (a question answered), "
    "refused (not recorded: not allowed, late, ...).",
    ["outcome"],
    registry=REGISTRY,
)
TIME_TO_DECISION = Histogram(
    "approval_bot_time_to_decision_seconds",
    "From a call's pause to its decision, per decided call.",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 86400),
    registry=REGISTRY,
)
PENDING_CALLS = Gauge(
    "approval_bot_pending_calls",
    "Calls waiting for a decision, over all runs (read from Redis at scrape time).",
    multiprocess_mode="livemostrecent",
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "approval_bot_queue_depth",
    "Start and resume jobs not yet delivered or not yet acknowledged (at scrape time).",
    multiprocess_mode="livemostrecent",
    registry=REGISTRY,
)
QUEUE_OLDEST_AGE = Gauge(
    "approval_bot_queue_oldest_age_seconds",
    "Age of the oldest job not yet acknowledged, 0 when the queue is empty (at scrape time).",
    multiprocess_mode="livemostrecent",
    registry=REGISTRY,
)
EXPIRIES = Counter(
    "approval_bot_expiries",
    "Pending calls that expired undecided (moves once approval expiry exists).",
    registry=REGISTRY,
)
SLACK_API_ERRORS = Counter(
    "approval_bot_slack_api_errors",
    "Slack Web API calls that failed, by method and Slack's error (connection: no answer).",
    ["method", "error"],
    registry=REGISTRY,
)
SLACK_RATE_LIMITED = Counter(
    "approval_bot_slack_rate_limited",
    "Slack Web API calls answered with HTTP 429 (rate limited), by method.",
    ["method"],
    registry=REGISTRY,
)
RUNS_STARTED = Counter("approval_bot_runs_started", "Runs started.", registry=REGISTRY)
RESUMES = Counter(
    "approval_bot_resumes", "Paused runs resumed after their decisions.", registry=REGISTRY
)
RUN_FAILURES = Counter("approval_bot_run_failures", "Runs that ended failed.", registry=REGISTRY)
RUNS_CANCELLED = Counter(
    "approval_bot_runs_cancelled", "Runs cancelled by a person.", registry=REGISTRY
)
REDIS_UP = Gauge(
    "approval_bot_redis_up",
    "1 while this process reaches Redis, 0 during an outage (from its first failed command "
    "until a PING answers again).",
    multiprocess_mode="liveall",  # by pid when several serve
    registry=REGISTRY,
)
REDIS_DOWN_SECONDS = Counter(
    "approval_bot_redis_down_seconds",
    "Seconds this process could not reach Redis, counted when each outage ends.",
    registry=REGISTRY,
)
SCRAPE_ERRORS = Counter(
    "approval_bot_scrape_errors",
    "Scrapes whose Redis-backed gauges could not be refreshed (they keep their last value).",
    registry=REGISTRY,
)

WORKSPACES_INSTALLED = Gauge(
    "approval_bot_workspaces_installed",
    "Workspaces (or Grid orgs) that installed the app (OAuth distribution; 0 otherwise; "
    "read from Redis at scrape time).",
    multiprocess_mode="livemostrecent",
    registry=REGISTRY,
)
WEBHOOK_BACKLOG_AGE = Gauge(
    "approval_bot_webhook_backlog_age_seconds",
    "Age of the oldest audit entry not yet accepted by the webhook receiver, 0 when none waits "
    "(read from Redis at scrape time).",
    multiprocess_mode="livemostrecent",
    registry=REGISTRY,
)
WEBHOOK_DELIVERED = Counter(
    "approval_bot_webhook_delivered",
    "Audit entries the webhook receiver accepted (2xx), counted by the delivering process.",
    registry=REGISTRY,
)
WEBHOOK_FAILURES = Counter(
    "approval_bot_webhook_failures",
    "Webhook attempts not accepted, by reason: the HTTP status, timeout or connection.",
    ["reason"],
    registry=REGISTRY,
)
WEBHOOK_SKIPPED = Counter(
    "approval_bot_webhook_skipped",
    "Audit entries never delivered because they waited longer than "
    "APPROVAL_BOT_WEBHOOK_MAX_AGE_HOURS (each skip is audited as webhook_skipped).",
    registry=REGISTRY,
)
SHADOW_DECISIONS = Counter(
    "approval_bot_shadow_decisions",
    "Calls a shadow rule (mode: shadow) would have decided, had it been enforced, by rule and "
    "by what it would have done: auto_approve, auto_reject, ask (its own approvers). Each is "
    "audited as `shadow`; `approval-bot report shadow` compares them with what people decided.",
    ["rule", "would"],
    registry=REGISTRY,
)

# Whether approvals are real (bot/service/oversight/attention.py). By channel, not by person: a
# label per person would grow without bound; `approval-bot report reviewers` has each person's
# figures.
REVIEW_SECONDS = Histogram(
    "approval_bot_review_seconds",
    "From a card shown in Slack to a person's decision on it (approvals, votes, rejections), "
    "by channel.",
    ["channel"],
    buckets=(1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400),
    registry=REGISTRY,
)
REVIEW_TOO_FAST = Counter(
    "approval_bot_review_too_fast",
    "Decisions made in less time than their card takes to read "
    "(APPROVAL_BOT_REVIEW_READ_CHARS_PER_SECOND), by channel.",
    ["channel"],
    registry=REGISTRY,
)
REVIEW_UNOPENED = Counter(
    "approval_bot_review_unopened",
    "Decisions on cards whose arguments were folded, made without opening Show all or the "
    "conversation, by channel.",
    ["channel"],
    registry=REGISTRY,
)
RUBBER_STAMPS = Counter(
    "approval_bot_rubber_stamp_alarms",
    "Rubber-stamp alarms: an approver's quick approvals in a row reached "
    "APPROVAL_BOT_RUBBER_STAMP_STREAK, by channel.",
    ["channel"],
    registry=REGISTRY,
)
# The advisor's second opinion (bot/service/oversight/advice.py): its time per call, by outcome.
ADVISOR_SECONDS = Histogram(
    "approval_bot_advisor_seconds",
    "From asking the advisor about a call (its card posted) to its answer, by outcome: advised, "
    "failed, timed_out, out_of_shape (the card then says no advice).",
    ["outcome"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
    registry=REGISTRY,
)

# The kinds of request Slack sends, as the ack histogram labels them (anything else: "other").
ACK_KINDS = (
    "command",
    "block_actions",
    "view_submission",
    "view_closed",
    "block_suggestion",
    "event_callback",
    "shortcut",
    "message_action",
)
ACK_SECONDS = Histogram(
    "approval_bot_ack_seconds",
    "From a Slack request's arrival to this process's answer, by kind of request (command, "
    "block_actions, view_submission, event_callback, ...). Slack counts an answer after 3 s "
    "as failed; the bot answers by APPROVAL_BOT_ACK_BUDGET_SECONDS.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0),
    registry=REGISTRY,
)
SLACK_AUTH_OK = Gauge(
    "approval_bot_slack_auth_ok",
    "1 once Slack's auth.test accepted the bot token, 0 while it fails (the bot refuses every "
    "request then, and /readyz answers 503). 1 under OAuth distribution (a token per workspace).",
    multiprocess_mode="liveall",  # by pid when several serve
    registry=REGISTRY,
)
SERVING = Gauge(
    "approval_bot_serving",
    "1 while this process accepts Slack requests (serve), 0 while it starts or drains and in a "
    "worker; by pid when several processes serve: their sum is how many serve.",
    multiprocess_mode="liveall",
    registry=REGISTRY,
)
BUILD = Info(
    "approval_bot_build",
    "The running bot's version and the Python it runs on (the value is always 1).",
    registry=REGISTRY,
)


def version() -> str:
    """The installed package's version ("unknown" when run from a tree not installed)."""
    try:
        return metadata.version("slack-approval-bot")
    except metadata.PackageNotFoundError:
        return "unknown"


BUILD.info({"version": version(), "python": platform.python_version()})

ADVISOR_TOKENS = Counter(
    "approval_bot_advisor_tokens",
    "The advisor's model tokens, input and output (its cost), as the Agents SDK counted them, "
    "for the calls it advised.",
    ["kind"],
    registry=REGISTRY,
)

for _outcome in OUTCOMES:
    DECISIONS.labels(outcome=_outcome)
for _kind in (*ACK_KINDS, "other"):
    ACK_SECONDS.labels(kind=_kind)


def acknowledged(body: dict[str, object], seconds: float) -> None:
    """Observe the time one Slack request waited for its answer."""
    kind = "command" if body.get("command") else str(body.get("type") or "")
    ACK_SECONDS.labels(kind=kind if kind in ACK_KINDS else "other").observe(max(0.0, seconds))


def decided(outcome: str, paused_at: float | str = "") -> None:
    """Count one decided (or refused) call; observe its wait when the pause time is known."""
    DECISIONS.labels(outcome=outcome if outcome in OUTCOMES else "refused").inc()
    if outcome in ("vote", "refused") or not paused_at:
        return
    with contextlib.suppress(ValueError):
        TIME_TO_DECISION.observe(max(0.0, time.time() - float(paused_at)))


_whole: CollectorRegistry | None = None  # every serving process's metrics, once shared
_shared_dir = ""


def share(directory: str) -> None:
    """Keep this process's metrics in `directory` with those of the other serving processes
    of its `serve` (one file per kind of metric per process), and render the whole of them
    from now on. Called once, in a serving process, before it serves."""
    global _whole, _shared_dir
    os.environ[SHARED_DIR_VARIABLE] = directory
    _Value.shared = values.MultiProcessValue()  # type: ignore[no-untyped-call]
    for value in _Value.made:
        value.share()
    _Value.made.clear()
    _shared_dir = directory
    _whole = CollectorRegistry(auto_describe=True)
    _WholeCollector(_whole, path=directory)  # type: ignore[no-untyped-call]
    _whole.register(BUILD)  # (an info metric has no shared form: every process's is the same)


class _WholeCollector(MultiProcessCollector):  # type: ignore[misc]
    """Every serving process's metrics, from their files (`_merge`)."""

    def collect(self) -> Any:
        return _merge(self._path, "*.db", accumulate=True)


def _merge(directory: str, pattern: str, *, accumulate: bool) -> Any:
    """The metrics in `directory`'s files matching `pattern`, merged, leaving out a file that
    another process is creating at that moment or has just removed. prometheus_client makes a
    process's file for a kind of metric empty and sizes it a moment later (read then, it
    fails: `struct.error`; two processes starting together made one of them crash at its
    start, its registry reading the other's files), and removes a process's live gauges'
    files when it is gone (`forget`). Files only grow until they are removed: an empty one
    holds no value yet, a removed one none any longer."""
    for _ in range(3):
        files = []
        for path in glob.glob(os.path.join(directory, pattern)):
            with contextlib.suppress(OSError):  # removed meanwhile
                if os.path.getsize(path) > 0:
                    files.append(path)
        try:
            return MultiProcessCollector.merge(files, accumulate=accumulate)  # type: ignore[no-untyped-call]
        except FileNotFoundError:
            continue  # removed between the listing and its reading: list again
    return []


def shared() -> bool:
    """Whether this process's metrics are shared with other serving processes."""
    return bool(_shared_dir)


def forget(pid: int, directory: str) -> None:
    """Serving process `pid` is gone: its own gauges leave the whole (its counts stay)."""
    mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


def others_unready() -> dict[str, str]:
    """The other serving processes of this `serve` that serve but are not ready, by pid: what
    their own gauges say is wrong (none when this process serves alone)."""
    if not _shared_dir:
        return {}
    states: dict[str, dict[str, float]] = {}
    for metric in _merge(_shared_dir, "gauge_liveall_*.db", accumulate=False):
        for sample in metric.samples:
            states.setdefault(sample.labels.get("pid", ""), {})[sample.name] = sample.value
    unready = {}
    for pid, state in states.items():
        if pid == str(os.getpid()) or not state.get("approval_bot_serving"):
            continue
        problems = [
            what
            for name, what in (
                ("approval_bot_redis_up", "redis unreachable"),
                ("approval_bot_slack_auth_ok", "slack does not accept the token"),
            )
            if not state.get(name, 1)
        ]
        if problems:
            unready[pid] = ", ".join(problems)
    return unready


def render() -> tuple[bytes, str]:
    """The exposition text and its content type: this process's metrics, or every serving
    process's once shared."""
    return generate_latest(_whole or REGISTRY), CONTENT_TYPE_LATEST
