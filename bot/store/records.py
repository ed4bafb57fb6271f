"""What the store keeps about runs and pending calls, as plain typed records.

Redis hashes hold strings; these records convert at the edge so the rest of the bot sees types.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal, TypeVar

from bot.checkpoint import Checkpoint

# The store's name for a paused run's stored state: the engine's checkpoint, as it is.
Snapshot = Checkpoint


class RunStatus(StrEnum):
    """Where a run is (its hash's `status`; equal to the stored string)."""

    RUNNING = "running"
    PAUSED = "paused"
    RESUMING = "resuming"
    NEEDS_REVIEW = "needs_review"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class CallStatus(StrEnum):
    """Where a call is (its hash's `status`; equal to the stored string)."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


# A run in one of these states does nothing more: no job takes it, no call of it is decided.
ENDED: tuple[str, ...] = (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED)

# How much of a call's arguments the store keeps for display (the snapshot holds them whole).
# (Layout 2 also cut a run's task to SHOWN_TASK in the run hash; layout 3 keeps it whole, once.)
SHOWN_TASK = 3000
SHOWN_ARGUMENTS = 3000

# `via` of a call settled by an Always decision of an earlier pause: "always:<approval id>".
EARLIER_ALWAYS = "always:"
GRANTED = EARLIER_ALWAYS + "grant:"  # settled by a channel grant (also without a card)
# `via` of a call settled by the one-shot approval of an edited call: "edit:<approval id>".
EDITED_VIA = "edit:"
# `via` of a call its decider settled with others at once (Approve all, Reject all), or by a
# reaction on its card (#33): their own decision, made another way than a click.
BY_BATCH = "batch"
BY_REACTION = "reaction"

_R = TypeVar("_R", "RunRecord", "CallRecord")


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


def _decode(raw: Mapping[Any, Any]) -> dict[str, str]:
    # (`_text` inline: a call per field and value was a third of reading a record)
    return {
        (k.decode("utf-8", "surrogatepass") if isinstance(k, bytes) else str(k)): (
            v.decode("utf-8", "surrogatepass") if isinstance(v, bytes) else str(v)
        )
        for k, v in raw.items()
    }


def _from_hash(cls: type[_R], raw: Mapping[Any, Any], derived: dict[str, str]) -> _R:
    """A record from its stored fields; a field not stored has its default (see `_to_hash`),
    and `derived` fields come from the key (an older layout that stored them still reads)."""
    values = _decode(raw)
    values.update(derived)
    kwargs: dict[str, Any] = {}
    for name, convert, missing in _READING.get(cls) or _reading(cls):
        if name not in values:
            if missing is not _SKIP:
                kwargs[name] = missing
            continue
        kwargs[name] = values[name] if convert is None else convert(values[name])
    return cls(**kwargs)


_SKIP = object()  # a field not stored that takes its dataclass default
# Per record class, how `_from_hash` reads each field: (name, what converts its stored string,
# or None; its value when it is not stored, or _SKIP), worked out once (a record is read about
# fifteen times a decision: this was 14 µs a run record, most of it finding out again).
_READING: dict[type, tuple[tuple[str, Callable[[str], Any] | None, Any], ...]] = {}


def _reading(cls: type[_R]) -> tuple[tuple[str, Callable[[str], Any] | None, Any], ...]:
    steps = []
    for f in dataclasses.fields(cls):
        convert: Callable[[str], Any] | None = None
        if f.type in ("int", int):
            convert = _int
        elif f.type in ("bool", bool):
            convert = _bool
        elif f.type in ("float", float):
            convert = _float
        elif f.type in _ENUMS:
            convert = _ENUMS[str(f.type)]
        missing: Any = _SKIP
        if f.name in cls.USUAL:
            missing = cls.USUAL[f.name]
        elif f.default is dataclasses.MISSING and f.type in ("str", str):
            missing = ""  # a long text kept in a key of its own (bot.store.parts.texts)
        steps.append((f.name, convert, missing))
    reading = _READING[cls] = tuple(steps)
    return reading


def _int(value: str) -> int:
    return int(value or 0)


def _bool(value: str) -> bool:
    return value == "1"


def _float(value: str) -> float:
    return float(value or 0)


# Fields stored as the string value of an enum (`_from_hash` reads them back as the enum).
_ENUMS: dict[str, type[StrEnum]] = {"RunStatus": RunStatus, "CallStatus": CallStatus}


# Per record class: its fields that `_typed` converts, with the type to convert to.
_CONVERTED: dict[type, tuple[tuple[str, Any], ...]] = {}


def _typed(record: RunRecord | CallRecord) -> None:
    """A record built with plain strings for its status or times (as stored): typed."""
    converted = _CONVERTED.get(type(record))
    if converted is None:
        converted = _CONVERTED[type(record)] = tuple(
            (f.name, _ENUMS.get(str(f.type), float))
            for f in dataclasses.fields(record)
            if f.type in _ENUMS or f.type in ("float", float)
        )
    for name, kind in converted:
        value = getattr(record, name)
        if type(value) is str:  # a member of the enum, or a float, is left as it is
            setattr(record, name, kind(value or 0) if kind is float else kind(value))


def _to_hash(record: RunRecord | CallRecord) -> dict[str, str]:
    """The fields worth storing: none derived from the key, none equal to its default or its
    usual value (`USUAL`; read back as that), except those the transition scripts compare
    (`STORED_ALWAYS`).
    Adding a field to a record is one line: it is stored only once it differs from its default."""
    out: dict[str, str] = {}
    always = type(record).STORED_ALWAYS
    derived = type(record).DERIVED
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if f.name in derived:
            continue
        usual = type(record).USUAL.get(f.name, f.default)
        if f.name not in always and usual is not dataclasses.MISSING and value == usual:
            continue
        if isinstance(value, bool):
            out[f.name] = "1" if value else "0"
        elif isinstance(value, float):
            out[f.name] = f"{value:.3f}"  # a time: Unix seconds to the millisecond, as `now()`
        else:
            out[f.name] = str(value)
    return out


@dataclass
class RunRecord:
    """One agent run started from Slack."""

    run_id: str
    team_id: str
    user_id: str
    channel_id: str
    agent_name: str
    task: str  # the whole task (a run paused under layout 2 may hold a SHOWN_TASK cut copy)
    enterprise_id: str = ""
    task_chars: int = 0  # the whole task's length, when `task` is a cut copy (layout 2)
    status: RunStatus = RunStatus.RUNNING
    created_at: float = 0.0  # times: Unix seconds (0: not set)
    updated_at: float = 0.0
    message_ts: str = ""
    pause: int = 0
    undecided: int = 0
    owner: str = ""
    output: str = ""
    error: str = ""
    job: str = ""  # the job message whose delivery holds the current execution
    review_id: str = ""  # opaque id of the open review, while status is needs_review
    review_kind: str = ""  # the job to run again once the review is settled
    review_ts: str = ""  # the review request's message, once posted
    review_required: int = 0  # approvers needed to run a reviewed call again (quorum rules)
    resolved_review: str = ""  # the last review settled, by whom, and how (done | rerun)
    resolved_by: str = ""
    resolved_action: str = ""
    calls: str = ""  # the approval tokens of the current pause, in the SDK order, space-separated
    cancelled_by: str = ""  # who cancelled the run (status cancelled), and when
    cancelled_at: float = 0.0
    turn: int = 0  # the turn of its conversation going on or last ended (0: the first)
    # Who asked for that turn, when not its starter: the author of the follow-up that began it
    # (turn.lua sets it; empty: the starter, who asked for the first turn).
    requester: str = ""

    # Stored layout (see `_to_hash`): derived from the key, and compared by the scripts.
    DERIVED: ClassVar[frozenset[str]] = frozenset({"run_id"})
    STORED_ALWAYS: ClassVar[frozenset[str]] = frozenset({"status"})
    USUAL: ClassVar[dict[str, Any]] = {}

    def __post_init__(self) -> None:
        _typed(self)

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def asked_by(self) -> str:
        """Who asked for the turn going on (or last ended): its requester, else the starter."""
        return self.requester or self.user_id

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any], run_id: str = "") -> RunRecord:
        return _from_hash(cls, raw, {"run_id": run_id} if run_id else {})

    def call_ids(self) -> list[str]:
        """The approval ids of the current pause (empty for a run paused before they were kept
        here: its pause set holds them)."""
        return [f"{self.run_id}.{token}" for token in self.calls.split()]

    def to_hash(self) -> dict[str, str]:
        return _to_hash(self)


@dataclass
class CallRecord:
    """One tool call waiting for (or given) a human decision."""

    approval_id: str
    run_id: str
    index: int
    call_id: str
    agent: str
    tool: str
    kind: str
    sticky: str
    arguments: str  # display text, at most SHOWN_ARGUMENTS characters
    pause: int = 0
    arguments_chars: int = 0  # the whole display text's length, when `arguments` is cut
    arguments_sha: str = ""  # SHA-256 of the canonical arguments, when `arguments` is cut
    # (empty: `arguments` is the whole text; calls of layout 2 stored it for every call)
    status: CallStatus = CallStatus.PENDING
    always: bool = False
    decided_team: str = ""
    decided_by: str = ""
    decided_at: float = 0.0  # times: Unix seconds (0: not set)
    reason: str = ""
    via: str = ""
    channel_id: str = ""
    message_ts: str = ""
    # What the policy said when the call was posted, and what binds the decision to the call.
    required: int = 1
    votes: int = 0
    voters: str = ""  # comma-separated user ids of approvals counted towards `required`
    allow_always: bool = True
    approvers: str = ""  # JSON list of the rule's principals, for display
    rule: str = ""
    auto: str = ""
    policy_version: str = ""
    digest: str = ""
    paused_at: float = 0.0  # when the run paused on this call (time to decision)
    # Timers (bot/store/parts/timers.py), from the policy when the call was posted; times in Unix s.
    # Seconds from `paused_at` to the call's expiry (`expires_at`); 0: a call stored before
    # expiry existed (never expires).
    expire_after: int = 0
    remind_after: int = 0  # seconds between reminders (0: none)
    remind_max: int = 0
    reminders: int = 0  # reminders fired so far
    escalate_after: int = 0  # seconds (0: never)
    escalate_at: float = 0.0
    escalate_to: str = ""  # JSON list of principals who may decide once escalated
    escalated_at: float = 0.0  # set once, atomically, when escalate_after has passed
    # What the policy's conditions read (bot/service/policy/conditions.py), as JSON: kept only when
    # it cannot be read again from `arguments` (a cut display copy, a shell or patch call's facts).
    subject: str = ""
    # The argument path whose value Approve asks to type (`tool`: the tool name; "": none),
    # from the rule when the call was posted (the card says so; the policy in force decides).
    confirm: str = ""
    # Edit, then approve (bot/service/decisions/edits.py, edit.lua): the call then stands for the
    # reviewer's arguments; the original ones never run (the agent is asked to call again).
    allow_edit: bool = False  # the policy offered Edit when the call was posted
    edited_arguments: str = ""  # the edited arguments, pretty JSON (empty: not edited)
    edited_sha: str = ""  # arguments_sha of the edited arguments (what a re-proposal must match)
    edited_by: str = ""  # who edited last, from which team, when
    edited_team: str = ""
    edited_at: float = 0.0
    original_digest: str = ""  # the digest the call was posted with, before its first edit
    edits: int = 0
    # The edited call (approval id) whose one-shot approval may settle this call (use_edit.lua).
    edit_grant: str = ""
    # The channel grant (#19) this call made (its Always approve) or was settled by, as JSON
    # (`bot.service.decisions.grants.GrantNote`): what the card says it did; empty: none.
    granted: str = ""
    # Who asked for the turn that made this call, when not the run's starter (the author of a
    # follow-up; empty: the starter, as for every call stored before requesters were kept),
    # and that turn's number (0: the first). Self-approval is judged against the requester.
    requester: str = ""
    turn: int = 0
    # The advisor's second opinion (bot/service/oversight/advice.py), as JSON: `{risk, rationale,
    # concerns}`, or `{none: why}` when it gave none (failed, timed out, out of shape); empty:
    # not (yet) advised. Written after the card is posted, while the call is pending.
    advice: str = ""
    # The generation of the call's routing: counted up by every write, while the call is pending,
    # that changes what the policy in force makes of it (the advice, advise.lua; its escalation,
    # fire_timers.lua; the policy's automatic decision handed to people). A decision's judgement
    # reads it with the call; decide.lua and edit.lua decide nothing when it moved since.
    routed: int = 0

    def __post_init__(self) -> None:
        _typed(self)

    def asked_by(self, run: RunRecord) -> str:
        """Who asked for this call: its turn's requester, else `run`'s starter."""
        return self.requester or run.user_id

    @property
    def version(self) -> str:
        """The version token of the call's arguments: its edit count ("0": as proposed). A
        card's decision buttons carry it; a decision whose token is not the current one was
        made on a card drawn before an edit, and is refused (decide.lua)."""
        return str(self.edits)

    @property
    def by_edit(self) -> bool:
        """Settled, without a card of its own, by the approved edit of an earlier call."""
        return self.via.startswith(EDITED_VIA)

    def escalated_principals(self) -> list[str]:
        """Who the escalation added to the approvers: nobody before it fired."""
        if not self.escalated_at or not self.escalate_to:
            return []
        try:
            return [str(p) for p in json.loads(self.escalate_to)]
        except ValueError:
            return []

    DERIVED: ClassVar[frozenset[str]] = frozenset({"approval_id", "run_id"})
    STORED_ALWAYS: ClassVar[frozenset[str]] = frozenset({"status", "pause"})
    # The first call of a pause, of a function tool: most calls, stored without these fields
    # (issue #17: every field name and value costs the call's hash its bytes).
    USUAL: ClassVar[dict[str, Any]] = {"index": 0, "kind": "function"}

    @property
    def expires_at(self) -> float:
        """When the call expires (Unix s; 0: never): `expire_after` seconds after its pause,
        derived rather than stored (fire_timers.lua reads it the same way)."""
        return self.paused_at + self.expire_after if self.expire_after else 0.0

    def voter_ids(self) -> list[str]:
        return [v for v in self.voters.split(",") if v]

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any], approval_id: str = "") -> CallRecord:
        derived = {"approval_id": approval_id, "run_id": approval_id.partition(".")[0]}
        call = _from_hash(cls, raw, derived if approval_id else {})
        stored = raw.get("expires_at") or raw.get(b"expires_at")  # as layouts up to 3 did
        if stored and call.expire_after:
            later = math.ceil(float(_text(stored)) - call.paused_at)
            call.expire_after = max(call.expire_after, later)
        return call

    def to_hash(self) -> dict[str, str]:
        return _to_hash(self)

    @property
    def decided(self) -> bool:
        return self.status != CallStatus.PENDING

    @property
    def by_earlier_always(self) -> bool:
        """Settled, without a card of its own, by an Always decision made in an earlier pause."""
        return self.via.startswith(EARLIER_ALWAYS)


@dataclass(frozen=True)
class ArgumentField:
    """One argument of a function-tool call, as its card shows it."""

    name: str
    """The argument's name."""
    value: str
    """Its value (a string as it is, anything else as JSON), cut with "…" when long."""
    chars: int
    """The whole value's length in characters (the snapshot holds the whole value)."""
    about: str = ""
    """The parameter's description from the tool's schema."""


@dataclass(frozen=True)
class PatchOperation:
    """One operation of a patch call, as its card's header names it: what the editor does
    (the model's type), to which path, and where it moves the file (None: nowhere)."""

    kind: str
    path: str
    move_to: str | None = None


@dataclass(frozen=True)
class CallContext:
    """Why and what, beside a pending call: the agent's words, the tool's description, what the
    call runs with. Bounded untrusted text (the engine cuts it), kept in its own string key
    (`keys.context_key`), so the call hash stays small. Missing for calls posted before it."""

    said: str = ""
    """The assistant text of the model response that proposed the call."""
    thought: str = ""
    """That response's reasoning summary."""
    description: str = ""
    """The tool's description, one line."""
    details: tuple[tuple[str, str], ...] = ()
    """Per kind: (label, value), e.g. a shell's working directory and timeout, a hosted MCP
    server's label and URL."""
    fields: tuple[ArgumentField, ...] = ()
    """A function tool's arguments, by name."""
    operations: tuple[PatchOperation, ...] = ()
    """A patch's operations, each as its editor applies it (the first ones, bounded)."""
    operations_total: int = 0
    """How many operations the patch has, those not kept too."""

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "said": self.said, "thought": self.thought, "description": self.description,
            "details": [list(d) for d in self.details],
            "fields": [[f.name, f.value, f.chars, f.about] for f in self.fields],
            "operations": [[o.kind, o.path, o.move_to] for o in self.operations],
            "operations_total": self.operations_total,
        }  # fmt: skip
        return json.dumps({k: v for k, v in data.items() if v}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> CallContext:
        data = json.loads(text)
        return cls(
            said=str(data.get("said", "")),
            thought=str(data.get("thought", "")),
            description=str(data.get("description", "")),
            details=tuple((str(a), str(b)) for a, b in data.get("details") or []),
            fields=tuple(
                ArgumentField(str(n), str(v), int(c), str(a))
                for n, v, c, a in data.get("fields") or []
            ),
            operations=tuple(
                PatchOperation(str(k), str(p), None if m is None else str(m))
                for k, p, m in data.get("operations") or []
            ),
            operations_total=int(data.get("operations_total") or 0),
        )


@dataclass(frozen=True)
class StickyDecision:
    """An Always approve / Always reject made in a run: it may settle later calls of the same
    agent's tool, but only while the policy in force still lets its decider decide them alone."""

    key: str  # the call's sticky key (agent-scoped tool identity)
    decision: str  # approved | rejected
    team: str
    user: str
    at: str
    reason: str
    approval_id: str  # the call it was made on
    agent: str
    tool: str

    @classmethod
    def from_json(cls, key: str, text: str) -> StickyDecision:
        data = json.loads(text)
        return cls(key=key, **{f: str(data.get(f, "")) for f in _STICKY_FIELDS})


_STICKY_FIELDS = ("decision", "team", "user", "at", "reason", "approval_id", "agent", "tool")


@dataclass(frozen=True)
class Decided:
    """The caller's decision was recorded (now, or this same request before)."""

    settled: list[str]
    """Every call it decided: the clicked one, and those an Always decision settled with it."""
    resume: bool
    """It was the pause's last decision: the caller now owns the run's one resume."""
    undecided: int
    """Calls of the pause still waiting for a decision."""


@dataclass(frozen=True)
class Voted:
    """An approval counted towards a quorum; the call is still pending."""

    votes: int
    """Distinct approvers so far."""
    required: int
    """Approvers the call's rule requires."""
    repeated: bool = False
    """This person had already approved: counted once, nothing written."""


@dataclass(frozen=True)
class AlreadyDecided:
    """Someone decided this call before; nothing changed."""

    status: CallStatus
    """How it was decided (approved, rejected, expired, cancelled)."""
    decided_by: str
    """Who decided it (a user id, or `policy`)."""
    decided_at: float
    """When (Unix seconds; 0: not recorded)."""
    via: str = ""
    """What decided it when not the decider's own click (an Always decision, a cancel)."""


@dataclass(frozen=True)
class Gone:
    """The call or its pause no longer exists (expired, or the run moved on)."""

    why: str = field(default="This approval request no longer exists.")
    """What to tell the clicker."""


@dataclass(frozen=True)
class Rerouted(Gone):
    """Nothing was decided: the call was routed anew (`CallRecord.routed`) after the judgement
    read it. The caller judges again on a fresh read; any other caller refuses, as for `Gone`."""

    why: str = field(
        default="The policy routed this call anew while your decision was being recorded, "
        "so nothing was decided: look at its card and decide again."
    )


DecideResult = Decided | Voted | AlreadyDecided | Gone


@dataclass(frozen=True)
class CancelResult:
    """What `cancel.lua` did: `ok` (cancelled now; `calls` lists the pending calls it
    cancelled), `already` (cancelled before, by `by` at `at`), `ended` (finished or failed
    before: `status`), or `missing`."""

    outcome: Literal["ok", "already", "ended", "missing"]
    """What the script found and did."""
    status: str = ""
    """ok: the status the run had when cancelled; ended: how it ended."""
    by: str = ""
    """already: who cancelled it."""
    at: float = 0.0
    """already: when (Unix seconds)."""
    calls: tuple[str, ...] = ()
    """ok: the pending calls it cancelled."""
    message_ts: str = ""
    """ok: the run message's ts (empty: not posted yet)."""
