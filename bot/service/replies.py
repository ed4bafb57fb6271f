"""What the services answer the person who acted, and how they word decision times."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from bot.store.records import AlreadyDecided, CallRecord


@dataclass(frozen=True)
class Reply:
    """What to tell the person who acted; `ok` is False when nothing changed because of them."""

    ok: bool
    text: str = ""


@dataclass(frozen=True)
class RejectForm:
    """What the reject modal needs: the call it is for and the reason to pre-fill."""

    call: CallRecord
    prefill: str


@dataclass(frozen=True)
class ConfirmReject:
    """A thread reply that starts like a rejection without its colon: ask its author, privately,
    whether it rejects the call. `reply_id` names the reply held on the server; the answer
    buttons carry nothing else."""

    reply_id: str
    text: str


def when(timestamp: float | str) -> str:
    """A decision time as people read it (UTC); empty when not set."""
    if not timestamp:
        return ""
    try:
        moment = datetime.fromtimestamp(float(timestamp), tz=UTC)
    except ValueError:
        return str(timestamp)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def already_text(result: AlreadyDecided) -> str:
    if result.status == "expired":
        return (
            f"This request expired at {when(result.decided_at)}: no reviewer decided in time, "
            "so the call was not run and the agent was told so. Nothing changed."
        )
    verb = result.status or "decided"  # approved, rejected, cancelled, ...
    if result.via == "cancel":
        verb = "cancelled (with its run)"
    who = f"<@{result.decided_by}>" if result.decided_by else "someone"
    return f"This call was already {verb} by {who} at {when(result.decided_at)}. Nothing changed."
