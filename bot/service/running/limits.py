"""What one person or one channel may cost: how fast runs may be started, how many may be
unfinished at once, and how long a task may be. Refusals say exactly which limit and what to do."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.store.admission import Admission, Quota

DEFAULT_QUOTA = Quota(
    user_per_minute=10, user_burst=5, channel_per_minute=30, channel_burst=10,
    user_open=10, channel_open=50,
)  # fmt: skip


@dataclass(frozen=True)
class StartLimits:
    quota: Quota = field(default=DEFAULT_QUOTA)
    max_task_chars: int = 4000  # 0: no limit
    lists_per_minute: int = 10  # `/agent list` per person a minute (each reads every paused run)


def task_too_long(limits: StartLimits, task: str) -> str:
    """The refusal for a task over the length limit, or ''."""
    if limits.max_task_chars and len(task) > limits.max_task_chars:
        return (
            f"The task is {len(task):,} characters long; the limit here is "
            f"{limits.max_task_chars:,}. Shorten it, or put the details where the agent can "
            "read them and point to them."
        )
    return ""


def refusal(limits: StartLimits, admission: Admission) -> str:
    """The sentence for a run the quota refused."""
    q, n = limits.quota, admission.figure
    wait = f"Try again in {n} second{'s' if n != 1 else ''}."
    if admission.verdict == "user_rate":
        return (
            f"You are starting runs faster than this bot allows ({q.user_per_minute:g} a "
            f"minute, bursts of {q.user_burst}). {wait}"
        )
    if admission.verdict == "channel_rate":
        return (
            f"Runs are being started in this channel faster than this bot allows "
            f"({q.channel_per_minute:g} a minute, bursts of {q.channel_burst}). {wait}"
        )
    if admission.verdict == "user_open":
        return (
            f"You already have {n} unfinished runs, the most one person may have at once. "
            "Wait for one to finish (or decide what it waits for), then try again."
        )
    return (
        f"This channel already has {n} unfinished runs, the most it may have at once. Wait "
        "for one to finish (or decide what it waits for), then try again."
    )
