"""What the services answer the person who acted, and how they word decision times.

Answers are `Text`: the service's words, with people and literals as parts that the interface
renders (`bot.slack.replies` writes Slack's mrkdwn); the service writes no markup."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.store.records import AlreadyDecided, CallRecord, CallStatus


@dataclass(frozen=True)
class Mention:
    """A person, by their chat user id: the interface shows them its own way (in Slack, a
    mention); the service writes no markup."""

    user_id: str


@dataclass(frozen=True)
class Code:
    """A literal (an id, a tool or agent name, possibly untrusted), shown as code: the
    interface makes it safe and sets it apart, cut to `limit` characters."""

    text: str
    limit: int = 200


@dataclass(frozen=True)
class Plain:
    """Untrusted words shown as text (an error from elsewhere): the interface makes them
    safe, one line, cut to `limit` characters."""

    text: str
    limit: int = 200


@dataclass(frozen=True)
class Strong:
    """Words to stand out (a button's label named in a sentence)."""

    text: str


# A `str` part is the service's own words, shown as they are (untrusted values inside them are
# made safe by `bot.untrusted`); the other parts are rendered by the interface.
Part = str | Mention | Code | Plain | Strong


@dataclass(frozen=True)
class Text:
    """What to tell a person, as parts the interface renders (`bot.slack.replies` for Slack)."""

    parts: tuple[Part, ...] = ()

    @classmethod
    def of(cls, text: str | Text) -> Text:
        """`text` as a Text (a plain string is one part)."""
        if isinstance(text, Text):
            return text
        return cls((text,) if text else ())

    def plain(self) -> str:
        """The words without markup, for logs and the audit trail (a mention is its user id)."""
        return "".join(_plain(part) for part in self.parts)

    def __bool__(self) -> bool:
        return any(_plain(part) for part in self.parts)


def said(template: str, **parts: Part | tuple[Part, ...]) -> Text:
    """A sentence with named parts: `said("Tool {tool} is not allowed.", tool=Code(name))`.
    The template is the service's own words; each `{name}` becomes its part(s)."""
    pieces = re.split(r"\{(\w+)\}", template)
    out: list[Part] = []
    for number, piece in enumerate(pieces):
        if number % 2 == 0:
            if piece:
                out.append(piece)
            continue
        value = parts[piece]
        out.extend(value if isinstance(value, tuple) else (value,))
    return Text(tuple(out))


def naming(text: str, *users: str) -> tuple[Part, ...]:
    """The service's own `text` with each of `users` (ids the service wrote into it) as a
    `Mention`: a sentence kept for the audit trail, told to people."""
    parts: tuple[Part, ...] = (text,)
    for user in (u for u in users if u):
        split: list[Part] = []
        for part in parts:
            if not isinstance(part, str):
                split.append(part)
                continue
            pieces = part.split(user)
            for number, piece in enumerate(pieces):
                if number:
                    split.append(Mention(user))
                if piece:
                    split.append(piece)
        parts = tuple(split)
    return parts


def joined(items: Iterable[Part | tuple[Part, ...]], separator: str = ", ") -> tuple[Part, ...]:
    """Items (a part, or a few parts together) with `separator` between them: a list of names
    in a sentence."""
    out: list[Part] = []
    for item in items:
        if out:
            out.append(separator)
        out.extend(item if isinstance(item, tuple) else (item,))
    return tuple(out)


STORED = "\x1e"  # begins a `Text` kept as JSON (a plain note never holds this character)


def stored(text: Text) -> str:
    """`text` as a string to keep (a run's thread note), people and literals still parts."""
    parts: list[object] = []
    for part in text.parts:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, Mention):
            parts.append({"mention": part.user_id})
        elif isinstance(part, Strong):
            parts.append({"strong": part.text})
        else:
            parts.append({"code" if isinstance(part, Code) else "plain": part.text,
                          "limit": part.limit})  # fmt: skip
    return STORED + json.dumps(parts, ensure_ascii=False)


def from_stored(value: str) -> str | Text:
    """What `stored` kept, as a `Text`; a string kept by an earlier version as it is."""
    if not value.startswith(STORED):
        return value
    try:
        items = json.loads(value[1:])
    except ValueError:
        return value[1:]
    parts: list[Part] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, dict) and "mention" in item:
            parts.append(Mention(str(item["mention"])))
        elif isinstance(item, dict) and "strong" in item:
            parts.append(Strong(str(item["strong"])))
        elif isinstance(item, dict) and "code" in item:
            parts.append(Code(str(item["code"]), int(item.get("limit", 200))))
        elif isinstance(item, dict) and "plain" in item:
            parts.append(Plain(str(item["plain"]), int(item.get("limit", 200))))
    return Text(tuple(parts))


def _plain(part: Part) -> str:
    if isinstance(part, Mention):
        return part.user_id
    if isinstance(part, str):
        return part
    return part.text


@dataclass(frozen=True, init=False)
class Reply:
    """What to tell the person who acted; `ok` is False when nothing changed because of them.

    `said` is what they are told (parts the interface renders); `text` the same words without
    markup, for logs and the audit trail."""

    ok: bool
    said: Text

    def __init__(self, ok: bool, text: str | Text = "") -> None:
        object.__setattr__(self, "ok", ok)
        object.__setattr__(self, "said", Text.of(text))

    @property
    def text(self) -> str:
        return self.said.plain()


@dataclass(frozen=True)
class TypeToConfirm:
    """An approval that counts only once the reviewer types `expected` (the rule's
    `confirm: type`): the Approve click opens a modal asking for it, and decides nothing."""

    call: CallRecord
    expected: str
    """The text to type: the value at `what` in the call's arguments, or the tool name."""
    what: str
    """Where it comes from: an argument path (`args.database`), or `tool`."""


@dataclass(frozen=True)
class RejectForm:
    """What the reject modal needs: the call it is for and the reason to pre-fill."""

    call: CallRecord
    prefill: str


# The longest rejection reason a person may give (characters, after trimming): Slack's own
# plain_text_input maximum. The forms say so too, but that limit is the client's: a crafted
# submission or a `reject:` reply can send anything, so every way a reason comes is checked here.
REASON_LIMIT = 3000


def reason_too_long(reason: str) -> str | None:
    """The sentence to tell a person whose rejection reason is longer than `REASON_LIMIT`
    (None when it fits): nothing is decided with a reason cut short."""
    length = len(reason.strip())
    if length <= REASON_LIMIT:
        return None
    return (
        f"The reason is too long ({length:,} characters; at most {REASON_LIMIT:,}). Shorten it "
        "and try again: nothing was decided."
    )


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


def already_text(result: AlreadyDecided) -> Text:
    """Why a decision changed nothing: the call was decided (or expired) before."""
    if result.status == CallStatus.EXPIRED:
        return Text.of(
            f"This request expired at {when(result.decided_at)}: no reviewer decided in time, "
            "so the call was not run and the agent was told so. Nothing changed."
        )
    verb: str = result.status or "decided"  # approved, rejected, cancelled, ...
    if result.via == "cancel":
        verb = "cancelled (with its run)"
    who: Part = Mention(result.decided_by) if result.decided_by else "someone"
    return Text(
        (
            f"This call was already {verb} by ",
            who,
            f" at {when(result.decided_at)}. Nothing changed.",
        )
    )
