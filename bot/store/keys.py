"""Redis key names and the opaque ids that point at them.

Layout 2 (#9): a run hash and a call hash store only fields that differ from their record's
default and are not derived from the key (`bot.store.records`); the current pause's approval
tokens are a field of the run hash; the snapshot is a plain string. Keys of layout 1 (the
snapshot hash, the pause set, call hashes with every field) are still read, on the fly.

Layout 3 (#17): a task or a call's arguments longer than a hash value may be under Redis's
default settings (64 bytes) is kept once, in a string key of its own (`task_key`,
`arguments_key`, `bot.store.parts.texts`), read with its hash; the snapshot refers to the task
instead of holding a copy. Runs of layout 2 (a cut copy of the task in the run hash, the
arguments in the call hash) are read as they are.

Every key of one run shares the hash tag `{<run id>}`, so a transition script that touches a run's
keys works unchanged on Redis Cluster. An approval id is `<run id>.<random>`: a click can address
its run's keys directly, without a lookup, and guessing one is as hard as guessing 96 random bits.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

PREFIX = "ab"

RUN_ID_RE = re.compile(r"^[0-9a-f]{16}\Z")  # \Z: `$` lets a final "\n" through
APPROVAL_ID_RE = re.compile(r"^([0-9a-f]{16})\.([A-Za-z0-9_-]{16})\Z")

# Keys outside any run (each is used alone, never inside a multi-key script).
EXECUTING_RUNS = f"{PREFIX}:runs:active"
# Sorted set: run id -> since when (Unix seconds) it waits on the bot itself, not on a person: an
# execution enqueued but not yet taken by a worker, a pause whose automatic decisions may not
# have been applied. The sweeper reads only the members older than its interval (`due_runs`).
DUE_RUNS = f"{PREFIX}:runs:due"


def new_run_id() -> str:
    return secrets.token_hex(8)


def new_approval_id(run_id: str) -> str:
    return f"{run_id}.{secrets.token_urlsafe(12)}"


def run_of(approval_id: str) -> str | None:
    """The run id inside a well-formed approval id, or None for anything else."""
    match = APPROVAL_ID_RE.match(approval_id)
    return match.group(1) if match else None


def run_key(run_id: str) -> str:
    return f"{PREFIX}:{{{run_id}}}:run"


def task_key(run_id: str) -> str:
    """A task too long for the run hash (`bot.store.parts.texts`), for the run's whole life (layout
    2 kept one only until the run first paused)."""
    return f"{PREFIX}:{{{run_id}}}:task"


def arguments_key(approval_id: str) -> str:
    """A call's display arguments too long for its hash (`bot.store.parts.texts`)."""
    return call_key(approval_id) + ":args"


def state_key(run_id: str) -> str:
    """String: a paused run's snapshot (`bot.store.runs.encode_snapshot`: a tag, the SDK
    version, the agent fingerprint, then the engine's compressed RunState JSON)."""
    return f"{PREFIX}:{{{run_id}}}:state"


# Layout 1 (before #9), still read: runs paused under it resume after an upgrade.
def snapshot_key(run_id: str) -> str:
    """Layout 1: hash {state, sdk_version, fingerprint}; now `state_key`."""
    return f"{PREFIX}:{{{run_id}}}:snapshot"


def pause_key(run_id: str) -> str:
    """Layout 1: set of the current pause's approval ids; now the run hash's `calls` field."""
    return f"{PREFIX}:{{{run_id}}}:pause"


def sticky_key(run_id: str) -> str:
    """The run's Always decisions: sticky key -> JSON {decision, user, team, reason, ...}."""
    return f"{PREFIX}:{{{run_id}}}:sticky"


def edits_key(run_id: str) -> str:
    """The run's edited calls: approval id -> JSON {agent, tool, sha, pause, by, team, ...,
    used}: the one-shot approval each gives the agent's re-proposed call (edit.lua)."""
    return f"{PREFIX}:{{{run_id}}}:edits"


def journal_key(run_id: str) -> str:
    return f"{PREFIX}:{{{run_id}}}:journal"


def call_key(approval_id: str) -> str:
    run_id, _, token = approval_id.partition(".")
    return f"{PREFIX}:{{{run_id}}}:call:{token}"


def comments_key(approval_id: str) -> str:
    return call_key(approval_id) + ":comments"


def context_key(approval_id: str) -> str:
    """String: JSON of what the card shows beside the call (`records.CallContext`), bounded."""
    return call_key(approval_id) + ":context"


def votes_key(approval_id: str) -> str:
    return call_key(approval_id) + ":votes"


def reply_key(reply_id: str) -> str:
    """A thread reply waiting for its author to say whether it rejects the call (JSON, TTL)."""
    run_id, _, token = reply_id.partition(".")
    return f"{PREFIX}:{{{run_id}}}:reply:{token}"


# Admission limits: every key shares the hash tag {limits}, so one script checks them together.
def user_bucket_key(team: str, user: str) -> str:
    return f"{PREFIX}:{{limits}}:rate:user:{team}:{user}"


def channel_bucket_key(channel: str) -> str:
    return f"{PREFIX}:{{limits}}:rate:channel:{channel}"


def user_open_key(team: str, user: str) -> str:
    """A user's runs admitted and not known to be finished (sorted set, by admission time)."""
    return f"{PREFIX}:{{limits}}:open:user:{team}:{user}"


def channel_open_key(channel: str) -> str:
    return f"{PREFIX}:{{limits}}:open:channel:{channel}"


def command_seen_key(delivery_id: str) -> str:
    """A `/agent` command's trigger id already admitted or refused (a replay starts nothing),
    beside the limits it is checked with (one script)."""
    return f"{PREFIX}:{{limits}}:seen:{delivery_id}"


def message_key(channel: str, ts: str) -> str:
    """Maps a message (channel, ts) to what it shows, for thread replies: an approval id (a
    card), or a run id (a run message: replies there are follow-ups)."""
    return f"{PREFIX}:msg:{channel}:{ts}"


def delivery_key(kind: str, delivery_id: str) -> str:
    return f"{PREFIX}:seen:{kind}:{delivery_id}"


def pace_key(limit: str, scope: str) -> str:
    """One of Slack's rate limits (`limit`: post, update, home) for one channel or workspace,
    shared by every replica (bot/store/delivery/pacing.py). Its own hash tag, shared with its kept
    turns: a cluster spreads the limits over its nodes."""
    return f"{PREFIX}:pace:{{{limit}:{scope}}}"


def turn_key(limit: str, scope: str, message: str) -> str:
    """A message's reserved turn in one of Slack's queues (string: when, ms), with a TTL."""
    return f"{pace_key(limit, scope)}:turn:{message}"


# What people see in Slack is derived from these (bot/store/delivery/outbox.py,
# bot/slack/delivery/projector.py). One hash tag, so the claim script touches one slot on Redis
# Cluster.
# sorted set: run id (or `@<person>`: their notice, `notice_entry`) -> when it is due (ms)
OUTBOX_INDEX = f"{PREFIX}:{{outbox}}:due"
OUTBOX_LEASES = f"{PREFIX}:{{outbox}}:leases"  # hash: run id -> the claim holding it (score)

# Decision webhooks (bot/store/trail/webhooks.py): the audit stream is their outbox; these say how
# far its delivery got and which process delivers. One hash tag: the fenced advance touches one
# slot.
WEBHOOK_CURSOR = f"{PREFIX}:{{webhook}}:cursor"  # string: id of the last audit entry delivered
WEBHOOK_LEASE = f"{PREFIX}:{{webhook}}:lease"  # string (PX): the delivering process's token

# Timers of pending calls (expiry, reminders, escalation): approval id -> when its next timer
# is due (ms). One hash tag of its own: the claim touches one slot; each firing is then a script
# on its run's keys (bot/store/parts/timers.py).
TIMERS = f"{PREFIX}:{{timers}}:due"

# A run's messages ("targets", see `Target`): its run message, one card per call, the result in
# its thread, one review request per review, notes, reminders, the requester's notice.
TargetKind = Literal["run", "result", "card", "review", "note", "remind", "notice"]
_TARGET_KINDS = ("run", "result", "card", "review", "note", "remind", "notice")


@dataclass(frozen=True)
class Target:
    """One message of a run, as its outbox and shown hashes name it (`str(target)`): the run
    message (`run`), its result (`result`), the starter's notice (`notice`), a call's card
    (`card:<approval id>`), a review request (`review:<review id>`), a note (`note:<n>`), a
    reminder in a card's thread (`remind:<approval id>:<n>` or `...:escalated`)."""

    kind: TargetKind
    """Which message it is."""
    id: str = ""
    """What names it among its kind: the approval id, review id, note number, or for a
    reminder `<approval id>:<n | escalated>`; empty for run, result and notice."""

    @classmethod
    def parse(cls, name: str) -> Target:
        kind, _, rest = name.partition(":")
        assert kind in _TARGET_KINDS, name
        return cls(kind, rest)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}" if self.id else self.kind

    @property
    def number(self) -> int:
        """A note's number (1 is the first)."""
        return int(self.id)

    @property
    def reminder(self) -> tuple[str, str]:
        """A reminder's approval id and which one it is (`<n>` or `escalated`)."""
        approval_id, _, which = self.id.rpartition(":")
        return approval_id, which


def outbox_key(run_id: str) -> str:
    """Hash: target -> change counter, and `<target>@` -> when it first changed since shown."""
    return f"{PREFIX}:{{{run_id}}}:outbox"


def shown_key(run_id: str) -> str:
    """Hash: target -> `<ts> <hash>[ <posting>]` (`bot.store.delivery.outbox.Shown`; layout 2:
    JSON): what Slack holds of that message."""
    return f"{PREFIX}:{{{run_id}}}:shown"


def progress_key(run_id: str) -> str:
    """List: the run's latest progress lines (shown in its run message)."""
    return f"{PREFIX}:{{{run_id}}}:progress"


def turns_key(run_id: str) -> str:
    """Hash: the run's follow-up turns (turn 1 is the task): `<n>` -> who asked what, as JSON;
    `<n>:status` and `<n>:answer` once turn n ended (shown by target `result:<n>`)."""
    return f"{PREFIX}:{{{run_id}}}:turns"


def followups_key(run_id: str) -> str:
    """List: follow-ups that came while a turn was going (JSON), taken in order as turns end."""
    return f"{PREFIX}:{{{run_id}}}:followups"


def history_key(run_id: str) -> str:
    """String: the conversation so far (the SDK's input list after the last turn, packed), the
    input of the next turn."""
    return f"{PREFIX}:{{{run_id}}}:history"


def partial_key(run_id: str) -> str:
    """String: the answer being streamed (JSON: turn, text so far), shown by its turn's
    result target until the turn ends (finish deletes it)."""
    return f"{PREFIX}:{{{run_id}}}:partial"


def notes_key(run_id: str) -> str:
    """List: plain-text notes for the run's thread (note n is shown by target `note:<n>`)."""
    return f"{PREFIX}:{{{run_id}}}:notes"


def review_votes_key(run_id: str, review_id: str) -> str:
    return f"{PREFIX}:{{{run_id}}}:review:{review_id}:votes"


def target_kind(target: str) -> TargetKind:
    return Target.parse(target).kind


def result_target(turn: int = 1, part: int = 1) -> str:
    """The message that shows turn `turn`'s answer (`Target` of kind `result`): `result` for
    turn 1, `result:<turn>` for a follow-up turn's; a long answer's further parts
    `result:[<turn>]#<part>` (turn 1's `result:#<part>`). (finish.lua, turn.lua and
    output_token.lua spell the first part's the same way.)"""
    turn_id = str(turn) if turn > 1 else ""
    if part > 1:
        return f"result:{turn_id}#{part}"
    return str(Target("result", turn_id))


# People: their recent runs, and the App Home tabs to keep up to date.
def lists_key(team: str, user: str) -> str:
    """Counter: the lists (`/agent list`) a person asked for in the current minute."""
    return f"{PREFIX}:lists:{team}:{user}"


def user_runs_key(team: str, user: str) -> str:
    """Sorted set: the runs a person started (run id -> created time), the latest kept."""
    return f"{PREFIX}:runs:user:{team}:{user}"


def channel_runs_key(channel: str) -> str:
    """Sorted set: the unfinished runs started in a channel (run id -> created time): what
    `/agent list` and the App Home read instead of every active run (`bot.store.parts.indexes`).
    Used alone, never inside a run's script, like `EXECUTING_RUNS`; it only narrows what is
    read: every run and call read through it is judged by the policy in force."""
    return f"{PREFIX}:runs:channel:{channel}"


# String: set once every run active when a process started is on its channel's index (the
# backfill of runs started before the index existed); until then lists read every active run.
CHANNEL_RUNS_INDEXED = f"{PREFIX}:runs:channels:indexed"


# One hash tag, so the claim script touches one slot on Redis Cluster.
HOME_VIEWERS = f"{PREFIX}:{{home}}:viewers"  # hash: "<team>:<user>" -> when they last opened it
HOME_DUE = f"{PREFIX}:{{home}}:due"  # sorted set: "<team>:<user>" -> when to publish (ms)
HOME_SHOWN = f"{PREFIX}:{{home}}:shown"  # hash: "<team>:<user>" -> "<ms> <hash>" last published
HOME_ORGS = f"{PREFIX}:{{home}}:orgs"  # hash: "<team>:<user>" -> their enterprise id ('' if none)
# Counter: bumped with every change to HOME_VIEWERS, so a process may keep the viewers it read
# while it is unchanged (read with a projector pass's records: no round trip of its own).
HOME_VIEWERS_VERSION = f"{PREFIX}:{{home}}:viewers:version"

# The requester's message about their run's outcomes is one more outbox target of the run.
NOTICE = "notice"


def notice_runs_key(person: str) -> str:
    """Sorted set: the runs of one person (`<team>:<user>`, and `:<channel>` for ephemeral
    notices) with outcomes they were not told yet -> since when. One notice tells them all.
    The person's keys share their hash tag: one slot, for `notice.lua`."""
    return f"{PREFIX}:notice:{{{person}}}:runs"


NOTICE_ENTRY = "@"  # an outbox index entry `@<person>`: their notice (not a run's messages)


def notice_entry(person: str) -> str:
    """The outbox index's entry for a person's notice (#32): one projector pass tells all their
    runs listed with news (`notice_runs_key`), not a pass per run."""
    return NOTICE_ENTRY + person


def notice_person(entry: str) -> str | None:
    """The person of an outbox index entry (`notice_entry`); None: a run's."""
    return entry[1:] if entry.startswith(NOTICE_ENTRY) else None


def notice_next_key(person: str) -> str:
    """String: when this person's next notice may go (Unix seconds): one per notice window."""
    return f"{PREFIX}:notice:{{{person}}}:next"


def notice_lock_key(person: str) -> str:
    """String: the token of the projector pass writing this person's notice right now."""
    return f"{PREFIX}:notice:{{{person}}}:lock"


def outcomes_key(run_id: str) -> str:
    """Hash: what the run's starter must be told (approval id, or `run`) -> the outcome, and
    `<id>!` -> the outcome they were last told (their message is the `notice` target)."""
    return f"{PREFIX}:{{{run_id}}}:outcomes"


@dataclass(frozen=True)
class RunKeys:
    """Every key of one run, and the KEYS list of each script over them, in one place: a
    script's KEYS order is written once, here, beside the names of what each key holds."""

    run_id: str

    @property
    def run(self) -> str:
        return run_key(self.run_id)

    @property
    def task(self) -> str:
        return task_key(self.run_id)

    @property
    def state(self) -> str:
        return state_key(self.run_id)

    @property
    def snapshot(self) -> str:
        return snapshot_key(self.run_id)

    @property
    def pause(self) -> str:
        return pause_key(self.run_id)

    @property
    def sticky(self) -> str:
        return sticky_key(self.run_id)

    @property
    def journal(self) -> str:
        return journal_key(self.run_id)

    @property
    def edits(self) -> str:
        return edits_key(self.run_id)

    @property
    def outbox(self) -> str:
        return outbox_key(self.run_id)

    @property
    def shown(self) -> str:
        return shown_key(self.run_id)

    @property
    def progress(self) -> str:
        return progress_key(self.run_id)

    @property
    def notes(self) -> str:
        return notes_key(self.run_id)

    @property
    def outcomes(self) -> str:
        return outcomes_key(self.run_id)

    def review_votes(self, review_id: str) -> str:
        return review_votes_key(self.run_id, review_id)

    # The KEYS of each script (see the script's header for what it does with them).

    def save_pause(self, approval_ids: Sequence[str]) -> list[str]:
        """save_pause.lua: the run's keys, then the new call hashes, then their arguments
        keys (in the same order)."""
        return [
            self.run,
            self.state,
            self.snapshot,
            self.task,
            self.outbox,
            self.pause,
            *(call_key(i) for i in approval_ids),
            *(arguments_key(i) for i in approval_ids),
        ]

    def finish(self) -> list[str]:
        return [
            self.run, self.state, self.snapshot, self.task, self.outbox, self.pause,
            turns_key(self.run_id), history_key(self.run_id), partial_key(self.run_id),
            followups_key(self.run_id),
        ]  # fmt: skip

    def turn(self) -> list[str]:
        """turn.lua: the run, its turns, its queued follow-ups, its outbox, its progress."""
        return [
            self.run, turns_key(self.run_id), followups_key(self.run_id), self.outbox,
            self.progress,
        ]  # fmt: skip

    def decide(self, approval_id: str, others: Sequence[str]) -> list[str]:
        """decide.lua: the run's keys around the decided call, then the other calls of the
        pause an Always decision may settle."""
        return [
            self.run,
            call_key(approval_id),
            votes_key(approval_id),
            self.state,
            self.snapshot,
            self.sticky,
            self.outbox,
            *(call_key(i) for i in others),
        ]

    def edit(self, approval_id: str) -> list[str]:
        """edit.lua: the run's keys around the edited call, and the run's edits."""
        return [
            self.run,
            call_key(approval_id),
            votes_key(approval_id),
            self.state,
            self.snapshot,
            self.outbox,
            self.edits,
        ]

    def use_edit(self, approval_id: str, edited_id: str) -> list[str]:
        """use_edit.lua: the run's keys around the call it settles, the run's edits, and the
        edited call whose one-shot approval settles it."""
        return [
            self.run,
            call_key(approval_id),
            self.edits,
            call_key(edited_id),
            self.state,
            self.snapshot,
            self.outbox,
        ]

    def fire_timers(self, approval_id: str, others: Sequence[str]) -> list[str]:
        return [
            self.run,
            call_key(approval_id),
            self.outbox,
            self.state,
            self.snapshot,
            self.pause,
            self.sticky,
            votes_key(approval_id),
            *(call_key(i) for i in others),
        ]

    def cancel(self, approval_ids: Sequence[str]) -> list[str]:
        return [self.run, self.pause, self.outbox, self.task, *(call_key(i) for i in approval_ids)]

    def take_job(self, pause: Sequence[str] = ()) -> list[str]:
        """take_job.lua: the run, its snapshot and task, then the hashes and the arguments keys
        of the calls of `pause` (approval ids: the pause the job names)."""
        return [
            self.run, self.state, self.task, *(call_key(i) for i in pause),
            *(arguments_key(i) for i in pause),
        ]  # fmt: skip

    def to_review(self) -> list[str]:
        return [self.run, self.outbox]

    def resolve_review(self) -> list[str]:
        return [self.run, self.journal, self.outbox]

    def begin_call(self) -> list[str]:
        return [self.run, self.journal]

    def end_call(self) -> list[str]:
        return [self.journal, self.run]

    def add_note(self) -> list[str]:
        return [self.notes, self.outbox]

    def record_outcomes(self) -> list[str]:
        return [self.outcomes, self.outbox]

    def delivered(self) -> list[str]:
        """The outbox's `_DELIVERED`: what Slack holds, and the marks."""
        return [self.shown, self.outbox]
