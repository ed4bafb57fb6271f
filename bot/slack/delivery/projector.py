"""The projector: makes Slack show what Redis holds. The only code that posts or updates the
bot's run messages, approval cards, results and review requests.

It takes runs whose outbox has marks (see `bot.store.delivery.outbox`), with a lease that it renews
while it works, reads the current records once, renders them (`bot.slack.render`), and delivers only
what differs from what Slack already holds (a content hash per message):

- a post carries message metadata (run id and target); when a post's outcome is unknown (a
  timeout, a 5xx, a lost connection, a process killed mid-post) the next attempt looks the
  message up (`conversations.history` / `conversations.replies` with `include_all_metadata`)
  before posting again, so a card is never posted twice;
- posts are paced per channel, updates per workspace, in buckets every replica shares
  (`bot.store.delivery.pacing`); a card queues for its token, an output or a status update goes only
  when a token is free (else it is tried again then), so no card waits behind status
  updates; a 429's `Retry-After` holds every replica's calls behind that limit;
- a run message update waits `coalesce` seconds after its first change, so the changes of a
  resume (status, progress) become one `chat.update`; an ended run's waits no longer; a resuming
  run's changes gather from when a worker took its job, not while the job is queued (up to
  `busy_coalesce` seconds), so that a burst of decisions, whose resumes queue up, costs no more
  updates per decision than a quiet decision does; a card
  whose decision resumed the run waits up to `GATHER` for the resume, so that a quick resume's
  card, result and run message go out in one pass, and the resume does not share the process
  with a pass of its own run;
- a permanent refusal (`not_in_channel`, ...) of a run message or card stops the run and tells
  its starter the real cause; anything else is retried with backoff, forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from logging import WARNING
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.outage import log_failure
from bot.service.foreground import Foreground
from bot.service.policy.gate import subject_of_call
from bot.service.replies import from_stored, when
from bot.slack.api.serving import serving
from bot.slack.api.webapi import Later, Refused, classify
from bot.slack.blocks import SHOW_ALL
from bot.slack.delivery.streams import AnswerStreams, streamable, streamed
from bot.slack.delivery.streams import found as found_stream
from bot.slack.delivery.streams import opening as opening_state
from bot.slack.delivery.thread_status import ThreadStatus
from bot.slack.render import card, notices, output, run_message
from bot.slack.render.base import as_dicts
from bot.slack.render.overview import notice_message
from bot.stopping import cancel_and_wait
from bot.store import keys
from bot.store.delivery.outbox import Claim, Mark, Shown, now_ms
from bot.store.delivery.outcomes import (
    News,
    NoticeLease,
    NoticeTurn,
    outcome_key,
    recorded_for,
    told_to,
    untold_in,
)
from bot.store.delivery.pacing import KEEP_AFTER, Prepaid, SharedPacer, Take, Urgency
from bot.store.grants import GrantStore
from bot.store.records import CallContext, CallRecord, RunRecord, RunStatus
from bot.store.runs import Projection, RunStore
from bot.store.scripts import Batch, Together, text

log = logging.getLogger(__name__)

EVENT_TYPE = "approval_bot_message"
# A follow-up turn's message is posted once the turn has gone this long without an answer.
PROGRESS_AFTER = 0.5
NOT_STREAMED = -1.0  # `_stream`: the workspace offers no chat streaming
ORDER = {"run": 0, "card": 1, "review": 2, "note": 3, "remind": 3, "result": 4, "notice": 5}
MAX_BACKOFF = 60.0
POLL = 0.05  # seconds between looks at the outbox index when nothing woke the projector
# ... while its looks find what another process made due; else they grow apart up to this
# (see `_idle_wait`)
IDLE_POLL = 0.5
GATHER = 0.25  # seconds a decided card waits for the resume it started (see `_deliver`)
DM_CHANNELS = 10_000  # people whose direct-message channel id is remembered
NOTICE_RUNS = 50  # runs one requester's notice tells of at most (the rest: the next one)
HELD_AGAIN = 1.0  # seconds until a person's pass that found their notice held looks again

Undeliverable = Callable[[str, str, str], Awaitable[None]]
# The App Home publisher's hook: a run changed (the run, and what its `ReadWith` read in the
# pass's read of the run: the App Home viewers' version).
RunChanged = Callable[[RunRecord, Any], Awaitable[None]]
ReadWith = Callable[[Any], None]
# Writes to send with the record of a run message's first post (a pipeline, the run as read):
# the run's start job, which waits for its message (`Runs.start_in`).
RunPosted = Callable[[Any, RunRecord], None]
# A run whose message Slack has not taken for this long starts without it (its tools get no
# thread); a message Slack refuses for good stops the run instead.
START_WITHOUT_MESSAGE = 30.0
# What is posted in the run's thread (a post there clears the thread's status line).
IN_THREAD = frozenset({"result", "note", "review"})
# A call's card was posted: (run, the call, its characters, its arguments folded).
CardPosted = Callable[[RunRecord, CallRecord, int, bool], None]


# The message a task of a pass delivers (`_FirstTakes`), and the output an update waits behind.
_PARTY: contextvars.ContextVar[object | None] = contextvars.ContextVar("party", default=None)
_BEHIND: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "behind", default=None
)
TAKES_WAIT = 0.5  # seconds the first takes of a pass wait at most for a slow message's


class _FirstTakes:
    """The first Slack tokens of the messages a pass delivers side by side, taken in one round
    trip (each `SharedPacer.take_in` one command of a pipeline): a message's first take waits
    until every other message of the pass has asked for its own or needs none (at most
    `TAKES_WAIT`: a message that looks Slack up first does not hold the others). Later takes
    go on their own."""

    def __init__(self, together: Together, parties: int) -> None:
        self.together = together  # (with other passes' batches of the same loop iteration)
        self.left = parties  # parties that have neither asked nor finished
        self.seen: set[object] = set()
        self.asked: list[tuple[SharedPacer, str, Urgency, str, asyncio.Future[Take]]] = []
        self.riders: list[Callable[[Any], None]] = []  # writes sent with the takes
        self.sent = False
        self._sending: asyncio.Task[None] | None = None

    def leave(self, party: object) -> None:
        """`party` is done: it asks for nothing more in this round trip."""
        if party not in self.seen:
            self.seen.add(party)
            self.left -= 1
            self._maybe_send()

    async def take(
        self, party: object, pacer: SharedPacer, scope: str, urgency: Urgency, message: str,
        rider: Callable[[Any], None] | None = None,
    ) -> Take | None:  # fmt: skip
        """The take, in the round trip of the pass's first takes, with the writes of `rider`
        (a pipeline); None: that round trip has gone (the caller takes on its own)."""
        if self.sent or party in self.seen:
            return None
        future: asyncio.Future[Take] = asyncio.get_running_loop().create_future()
        self.asked.append((pacer, scope, urgency, message, future))
        if rider is not None:
            self.riders.append(rider)
        if len(self.asked) == 1:
            asyncio.get_running_loop().call_later(TAKES_WAIT, self._send_now)
        self.leave(party)
        return await future

    def _maybe_send(self) -> None:
        if self.left <= 0:
            self._send_now()

    def _send_now(self) -> None:
        if self.sent:
            return
        self.sent = True
        if self.asked:
            self._sending = asyncio.create_task(self._send(self.asked))

    async def _send(
        self, asked: list[tuple[SharedPacer, str, Urgency, str, asyncio.Future[Take]]]
    ) -> None:
        def queue(batch: Batch) -> list[Callable[[list[Any]], Take]]:
            decoders = [p.take_in(batch, s, u, m) for p, s, u, m, _ in asked]
            for ride in self.riders:
                ride(batch.pipe)
            return decoders

        try:
            decoders, replies = await self.together.run(queue)
            for (*_, future), decoded in zip(asked, decoders, strict=True):
                if not future.done():
                    future.set_result(decoded(replies))
        except Exception as exc:
            for *_, future in asked:
                if not future.done():
                    future.set_exception(exc)


@dataclasses.dataclass(frozen=True)
class _Told:
    """A person's notice a pass sent (`_tell_on`): its step told with the pass's end (or in a
    round trip of its own after it), the `notice` marks of the runs it told all of dropped
    with it (`ticks`: run id -> the tick as read)."""

    person: str
    token: str
    listed: dict[str, str]
    told: dict[str, dict[str, str]]
    window: float
    ticks: dict[str, str]


# A person's notice as their pass's first step read it (`Outcomes.open_person_in`): the token
# it holds the notice with, the step's turn, the Slack token, the news read, the calls read.
_Opened = tuple[str, NoticeTurn, Take, dict[str, News], list[CallRecord]]


def _digest(text: str, body: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps([text, body], sort_keys=True).encode()).hexdigest()[:24]


def card_reading(body: list[dict[str, Any]]) -> tuple[int, bool]:
    """What a card asks of its reader: the characters of its text (buttons' labels aside), and
    whether its arguments are folded (it offers Show all). Kept with what Slack holds
    (`Shown.reading`) and told to the service (`card_posted`), for the review figures
    (`bot.service.oversight.attention`)."""
    chars, folded = 0, False

    def visit(value: Any, button: bool) -> None:
        nonlocal chars, folded
        if isinstance(value, dict):
            folded = folded or value.get("action_id") == SHOW_ALL
            button = button or value.get("type") == "button"
            if value.get("type") in ("mrkdwn", "plain_text") and not button:
                chars += len(str(value.get("text", "")))
            for item in value.values():
                visit(item, button)
        elif isinstance(value, list):
            for item in value:
                visit(item, button)

    visit(body, False)
    return chars, folded


def _urgency(kind: str, *, posted: bool) -> Urgency:
    """Who goes first when Slack's tokens are short: approval cards (and the run message
    they link to, until it is posted), then outputs, reviews and reminders, then the run
    message's status and the thread's notes."""
    if kind == "card" or (kind == "run" and not posted):
        return Urgency.CARD
    if kind in ("result", "review", "remind"):
        return Urgency.OUTPUT
    return Urgency.STATUS


def _order(target: str, positions: dict[str, int], run_posted: bool) -> tuple[int, int, str]:
    """Run message first (cards link to it, and the rest is threaded under it) until it is
    posted, last after that (its updates are the least urgent); cards in the order the SDK
    listed their calls, reviews, notes in order, the result."""
    parsed = keys.Target.parse(target)
    kind, rest = parsed.kind, parsed.id
    position = int(rest) if kind == "note" and rest.isdigit() else positions.get(rest, 0)
    if kind == "result":  # a long answer's parts in order
        position = int(rest.partition("#")[2] or 1)
    if kind == "run" and run_posted:
        return len(ORDER), 0, rest
    return ORDER[kind], position, rest


class Projector:
    """Delivers the outbox; run one per process (any number of processes share the work)."""

    def __init__(
        self,
        store: RunStore,
        client: AsyncWebClient,
        undeliverable: Undeliverable,
        *,
        lease: float = 30.0,
        coalesce: float = 1.0,
        busy_coalesce: float = 60.0,
        gather: float = GATHER,
        poll: float = POLL,
        idle_poll: float = IDLE_POLL,
        concurrency: int = 16,
        posts: SharedPacer | None = None,
        updates: SharedPacer | None = None,
        notice: str = "dm",
        notice_window: float = 3.0,
        run_changed: RunChanged | None = None,
        run_changed_reads: ReadWith | None = None,
        card_posted: CardPosted | None = None,
        foreground: Foreground | None = None,
        streams: bool = True,
        statuses: SharedPacer | None = None,
        run_posted: RunPosted | None = None,
    ) -> None:
        self.store = store
        self.grants = GrantStore(store.redis)
        self.outbox = store.outbox
        self.client = client
        self.undeliverable = undeliverable
        self.lease = lease
        self.coalesce = coalesce
        self.busy_coalesce = busy_coalesce
        self.gather = gather  # settings (`projector_*_seconds`): tests make them short
        self.poll = poll
        self.idle_poll = max(idle_poll, poll)
        # When (monotonic) a look nothing of this process asked for last found work (another
        # process's, or one whose process died): its looks are frequent for a while then.
        self._active = 0.0
        self.concurrency = concurrency
        # Slack: about one post a second per channel, ~50 updates a minute per workspace.
        self.posts = posts or SharedPacer(store.redis, "post", rate=1.0, burst=5)
        self.updates = updates or SharedPacer(store.redis, "update", rate=50 / 60, burst=10)
        self._running: set[asyncio.Task[None]] = set()
        self._failures: dict[str, int] = {}
        # Message -> the earliest next attempt (monotonic) after a failure: kept whatever else
        # wakes the run (a 429's Retry-After, or the backoff), so no change retries it sooner.
        self._not_before: dict[str, float] = {}
        self._stopping = asyncio.Event()
        self._fences: dict[str, Callable[[], Awaitable[None]]] = {}
        # The requester's message: "dm", "ephemeral" (in the run's channel) or "off"; sent
        # `notice_window` seconds after the first outcome not yet told, so a burst is one.
        self.notice = notice
        self.notice_window = notice_window
        self.run_changed = run_changed  # the App Home publisher's hook
        self.run_changed_reads = run_changed_reads  # what it needs, read with the pass's read
        self._changed_read: dict[str, Any] = {}  # run id -> what that read gave, this pass
        # run id -> its marked cards' calls, read with the pass's read (taken when shown)
        self._cards: dict[str, dict[str, tuple[CallRecord | None, CallContext | None]]] = {}
        # run id -> the notes its pass's read found marked (by number; None: gone)
        self._notes: dict[str, dict[int, str | None]] = {}
        self.run_posted = run_posted  # the service's: a run starts once its message is shown
        self.card_posted = card_posted  # the service's (review figures, the advisor)
        # Slack's chat streaming for answers, and the thread's status line, where the
        # workspace offers them (a setting).
        self.streams = AnswerStreams(client, enabled=streams)
        self.thread_status = ThreadStatus(
            client, statuses or SharedPacer(store.redis, "status", rate=1.0, burst=10),
            enabled=streams,
        )  # fmt: skip
        self._status_due: dict[str, str] = {}  # run id -> its thread's line, from this pass
        # run id -> its outcomes hash as this pass read it (with what the pass recorded)
        self._outcomes: dict[str, dict[Any, Any]] = {}
        # run id -> what its pass delivered (target, mark, what Slack holds or None), written
        # with the claim's release at the pass's end (`Outbox.end_pass`): one round trip
        self._written: dict[str, list[tuple[str, Mark, Shown | None]]] = {}
        # run id -> the people its pass recorded news for: its run is listed among theirs at
        # the pass's end (with `_written`); and its progress lines as the pass read them
        self._listed: dict[str, list[str]] = {}
        # run id -> the outcomes its pass records with its end (`_note_outcomes`)
        self._recording: dict[str, dict[str, str]] = {}
        self._progress: dict[str, list[str]] = {}
        self._dm_channels: dict[tuple[str, str], str] = {}
        self._takes: dict[str, _FirstTakes] = {}  # run id -> its pass's first takes
        # run id -> its output's post token, taken in the round trip of the run's end that
        # started its pass (`_pass_in`), until its post uses it (`_turn`) or the pass gives
        # it back (`_handle`)
        self._prepaid: dict[str, Prepaid] = {}
        # The requester's notice, a pass per person (#32; its outbox entry `@<person>`,
        # `keys.notice_entry`): entry -> (when it is due, Unix s; run id -> the calls its news
        # names) of a notice this process indexed (its pass's first step goes with the claim
        # that takes it, with these runs' news: `_open_ahead`); entry -> what that step read
        # (`_Opened`); entry -> the notices its pass sent (told with its end) and those that
        # found more runs listed (told after it); run id -> the notices its pass indexes with
        # its end (entry -> when due, Unix s).
        self._expect_notice: dict[str, tuple[float, dict[str, list[str]]]] = {}
        self._opened: dict[str, _Opened] = {}
        self._told_later: dict[str, list[_Told]] = {}
        self._after: dict[str, list[tuple[_Told, NoticeTurn]]] = {}
        self._notify: dict[str, dict[str, float]] = {}
        self._in_hand: set[str] = set()  # runs whose pass is going on here
        # run id -> writes to send with its pass's end (a run message's ts, its run's start)
        self._riders: dict[str, list[Callable[[Any], None]]] = {}
        # Acks first: a claim waits for a lull in this process's Slack requests.
        self.foreground = foreground or Foreground(max_wait=0)
        self.outbox.dues.gap = poll  # (a burst's moments: a look every poll at most)
        self.outbox.passes = self._pass_in  # a run's end starts its pass (`_pass_in`)

    @property
    def busy(self) -> int:
        return len(self._running)

    async def run(self) -> None:
        """Take due runs until `stop()`; then finish the ones in hand."""
        woken = self.outbox.woken
        asked = True  # this look was asked for (a change of this process's, one it indexed due)
        while not self._stopping.is_set():
            try:
                woken.clear()  # a change from now on wakes the wait below
                free = self.concurrency - len(self._running)
                if free > 0:
                    await self.foreground.lull()
                claimed_at = time.monotonic()
                claims, reads = await self._claim(free) if free > 0 else ([], {})
                found = bool(claims) and not asked  # what another process made due
                for claim in claims:
                    read = reads.pop(claim.run_id, None)
                    task = asyncio.create_task(
                        self._handle(claim, claimed_at, read), name=f"project-{claim.run_id}"
                    )
                    self._running.add(task)
                    task.add_done_callback(self._running.discard)
                for run_id in reads:  # read ahead, and not claimed here (rare)
                    await self._not_claimed(run_id)
                if free <= 0:  # busy: look again when a delivery ends
                    await asyncio.wait(
                        set(self._running), timeout=self.poll, return_when=asyncio.FIRST_COMPLETED
                    )
                elif len(claims) < free:  # nothing more due now: no second look at once
                    # This process's changes wake it at once; other processes' within a poll.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), self._idle_wait(found))
                    asked = woken.is_set()
            except asyncio.CancelledError:
                raise
            except Exception:
                log_failure(log, "the projector could not read the outbox; retrying", level=WARNING)
                await asyncio.sleep(1.0)

    async def _claim(self, free: int) -> tuple[list[Claim], dict[str, Projection | None]]:
        """Up to `free` due runs claimed; with the claim, in the same round trip, the read of
        each run this process expects it to take (it made the run due now, `Outbox.expect`),
        and the first step of each person's notice it indexed that is due (`_expect_notice`,
        `_open_ahead`; its read: None): their passes start read. Not on Redis
        Cluster, whose nodes may run the read before the claim, nor with replicas to confirm
        the claim (`Replicated`)."""
        now = now_ms()  # (what is due: the same moment for what it expects and for the claim)
        ahead, skip = self._ahead(free, now), self.outbox.in_flight()
        if not ahead:
            claims = await self.outbox.claim(free, self.lease, now, skip)
            self.outbox.dues.looked(now)
            return claims, {}
        async with self.store.redis.pipeline(transaction=False) as pipe:
            batch = Batch(pipe)
            claimed = self.outbox.claim_in(
                batch, free, self.lease, now, skip
            )  # first: read after it
            reading = {
                entry: self._open_ahead(batch, entry)
                if keys.notice_person(entry) is not None
                else self._read_in(batch, entry)
                for entry in ahead
            }
            replies = await batch.execute()
        self.outbox.dues.looked(now)
        return claimed(replies), {entry: read(replies) for entry, read in reading.items()}

    def _pass_in(
        self, batch: Batch, run_id: str, channel: str = ""
    ) -> Callable[[list[Any], bool], None] | None:
        """A pass of `run_id` claimed and read in `batch`, the round trip of the write that
        makes the run due now (its end: `RunStore.finish`): it starts as that round trip is
        answered, with no wake-up, lull or claim of its own between the end and the output
        (#32). Only while no Slack request is in flight here or in another serving process
        (acks first: in a burst the run waits for a claim at a lull, as any due run does) and
        this projector has room. When it is the projector's only pass (one at a time: the
        output is posted at once), the output's post token is taken there too, behind the
        claim and the read, with its posting record (`SharedPacer.take_output_in`: only while
        the claim holds the run and the output was never posted or tried; #32: no round trip
        of its own before the post). What starts it from the replies (`fresh`: the read came
        after the write); None: not started so."""
        if (
            self._stopping.is_set()
            or self.foreground.busy()
            or len(self._running) >= self.concurrency
            or run_id in self._in_hand
        ):
            return None
        claimed_at, at = time.monotonic(), now_ms()
        score = self.outbox.claim_score(self.lease, at)
        claim = self.outbox.claim_one_in(batch, run_id, self.lease, at, score)
        read = self._read_in(batch, run_id)
        prepay = None
        if channel and not self._running:  # (after the read: it reads `shown` as it was)
            prepay = self.posts.take_output_in(batch, channel, run_id, score, self.outbox.retention)

        def start(replies: list[Any], fresh: bool) -> None:
            # What the round trip took for the pass first, each decoded on its own: a claim
            # and a token held go to the pass, which uses them and lets them go (`_handle`:
            # the claim released with its end, a token it did not use given back), even when
            # its read failed (it then reads by itself). Not decoded, nothing was taken.
            claimed: Claim | None = None
            unknown = False  # the claim's reply did not say (an error)
            try:
                claimed = claim(replies)
            except Exception:
                unknown = True
                log_failure(log, "could not claim run %s with its end", run_id, level=WARNING)
            prepaid = None
            if prepay is not None and (claimed is not None or unknown):
                # (taken only under this claim: none when another pass has the run)
                try:
                    prepaid = prepay(replies)
                except Exception:
                    log_failure(log, "could not take the output token of run %s", run_id,
                                level=WARNING)  # fmt: skip
            if unknown and prepaid is not None and prepaid.take.taken:
                claimed = Claim(run_id, score)  # (the take found the claim holding the run)
            elif unknown:  # nothing taken that we know of: due now, for a claim of its own
                self._background(self.outbox.schedule(run_id))
                return
            if prepaid is not None:
                self._prepaid[run_id] = prepaid
            found = None
            if fresh and claimed is not None:
                try:
                    found = read(replies)
                except Exception:
                    self._changed_read.pop(run_id, None)
                    log_failure(log, "could not read run %s with its end; its pass reads it",
                                run_id, level=WARNING)  # fmt: skip
            if claimed is None:  # another pass has it: due again once that one ends
                self._background(self._not_claimed(run_id))
                return
            self.outbox.expected.pop(run_id, None)  # (no read ahead for it: claimed here)
            task = asyncio.create_task(
                self._handle(claimed, claimed_at, found), name=f"project-{run_id}"
            )
            self._running.add(task)
            task.add_done_callback(self._running.discard)

        return start

    def _background(self, work: Awaitable[None]) -> None:
        """`work` done in the background, counted among the projector's tasks (`stop` waits
        for it); a failure logged."""

        async def done() -> None:
            try:
                await work
            except Exception:
                log_failure(log, "a projector task failed", level=WARNING)

        task = asyncio.create_task(done())
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def _ahead(self, free: int, now: float) -> list[str]:
        """The runs a claim at `now` (ms) should take that this process expects: read with
        it. (Its writes that made them due have been answered; notices' due times are those
        their releases wrote: the claim takes them.)"""
        if not self.outbox.reads_ahead:
            return []
        ahead = []
        for run_id, at in list(self.outbox.expected.items()):
            if at is not None and at <= now and run_id not in self._in_hand:
                del self.outbox.expected[run_id]
                ahead.append(run_id)
        for entry, (due, _) in self._expect_notice.items():
            if due * 1000 <= now and entry not in self._in_hand and entry not in ahead:
                ahead.append(entry)
        return ahead[:free]

    async def _not_claimed(self, run_id: str) -> None:
        """A run (or a person's notice) read ahead that the claim did not take (another
        process has it): what the read took for its pass given back (a notice)."""
        self._changed_read.pop(run_id, None)
        person, opened = keys.notice_person(run_id), self._opened.pop(run_id, None)
        if person is not None and opened is not None and opened[1].held:
            with contextlib.suppress(Exception):
                await self.store.outcomes.told_notice(
                    self._leased(person, opened[0]), {}, window=0, stop=True
                )

    def _idle_wait(self, found: bool) -> float:
        """Seconds until the next look at the index when nothing wakes the projector. This
        process's changes wake it at once (`Outbox.woken`), and it looks when a run it indexed
        for later falls due (`Outbox.dues`): the looks between are for what other
        processes made due without waking it (each process's projector takes its own at once;
        another's is left when that one is at its `concurrency`, stopping, or died), `poll`
        apart while they find such work (`found`: a look asked for by nothing here claimed
        some), growing with the quiet since then to `idle_poll` (each look costs CPU, about
        0.3 ms with its wake-up). A Slack request no longer makes them frequent (#32: a
        decision one at a time cost some 40 ms of CPU in such looks)."""
        now = time.monotonic()
        if found:
            self._active = now
        return min(self.idle_poll, max(self.poll, (now - self._active) / 4))

    async def stop(self, timeout: float) -> None:
        self._stopping.set()
        self.outbox.woken.set()
        if self._running:
            await asyncio.wait(set(self._running), timeout=timeout)

    async def _handle(
        self, claim: Claim, claimed_at: float, read: Projection | None = None
    ) -> None:
        held = {"claim": claim}
        confirmed = [claimed_at]  # when the lease was last known to be ours (monotonic)

        renewing_lock = asyncio.Lock()  # one renewal at a time: each needs the last's score

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.lease / 3)
                with contextlib.suppress(Exception):
                    async with renewing_lock:
                        started = time.monotonic()
                        renewed = await self.outbox.renew(held["claim"], self.lease)
                        if renewed is None:
                            return  # a newer change re-indexed the run: released when done
                        held["claim"] = renewed
                        confirmed[0] = started

        async def fence() -> None:
            """Right before a Web API call: still ours? (a stalled process may have lost the
            run to another one, which may be posting the same message). A lease taken or
            renewed a moment ago (a tenth of its length; the clock runs on while a process is
            stopped) is ours without asking Redis again."""
            async with renewing_lock:  # (a pass delivers several messages at once)
                if time.monotonic() - confirmed[0] < self.lease / 10:
                    return
                started = time.monotonic()
                renewed = await self.outbox.renew(held["claim"], self.lease)
                if renewed is None:
                    raise Later(0.1, ambiguous=False, why="lease lost")
                held["claim"] = renewed
                confirmed[0] = started

        renewing = asyncio.create_task(renew())
        self._fences[claim.run_id] = fence
        next_due: float | None = 1.0
        written = self._written[claim.run_id] = []
        listed = self._listed[claim.run_id] = []
        recording = self._recording[claim.run_id] = {}
        told = self._told_later[claim.run_id] = []
        riders = self._riders[claim.run_id] = []
        notify = self._notify[claim.run_id] = {}
        person = keys.notice_person(claim.run_id)
        self._in_hand.add(claim.run_id)
        try:
            if person is not None:  # a person's notice: all their runs with news
                next_due = await self._notice_pass(claim.run_id, person)
            else:
                next_due = await self.project(claim.run_id, read)
        except Exception:
            log_failure(log, "could not project %s; retrying", claim.run_id)
        finally:
            self._fences.pop(claim.run_id, None)
            self._written.pop(claim.run_id, None)
            self._listed.pop(claim.run_id, None)
            self._recording.pop(claim.run_id, None)
            self._told_later.pop(claim.run_id, None)
            self._riders.pop(claim.run_id, None)
            self._notify.pop(claim.run_id, None)
            self._in_hand.discard(claim.run_id)
            self._changed_read.pop(claim.run_id, None)
            unused = self._opened.pop(claim.run_id, None)
            await cancel_and_wait(renewing)
            await self._give_back(claim.run_id)
        dropped = [(person, unused[0])] if person and unused and unused[1].held else []
        due: float | None = None
        try:
            first = [self.store.outcomes.recording(claim.run_id, recording)] if recording else []
            due = await self.outbox.end_pass(
                claim.run_id, written, held["claim"], next_due, listed, first=first,
                then=self._telling(claim.run_id, told, dropped, riders), notify=notify,
            )  # fmt: skip
        except Exception:
            log_failure(log, "could not end the pass of %s", claim.run_id, level=WARNING)
        if person is not None and due is not None:  # (its first step read with that claim)
            at, runs = self._expect_notice.get(claim.run_id, (due / 1000, {}))
            self._expect_notice[claim.run_id] = (min(at, due / 1000), runs)
        self.outbox.woken.set()  # a change that came during delivery left the run due now
        if claim.run_id in self._after:
            await self._tell_after(claim.run_id)

    async def _give_back(self, run_id: str) -> None:
        """The output's token taken with the run's end (`_pass_in`) that its pass did not use
        (it did not get to post it): its posting record dropped (no post was tried) and the
        token back to the channel's bucket, once, only while that record is still this pass's
        and giving it back cannot let more through than the burst (`SharedPacer.give_back`)."""
        prepaid = self._prepaid.pop(run_id, None)
        if prepaid is None or prepaid.used or not prepaid.take.taken:
            return
        try:
            await self.posts.give_back(prepaid, self.outbox.retention)
        except Exception:  # (the token is spent: pacing only stricter; a post looked up first)
            log_failure(log, "could not give back the token of run %s", run_id, level=WARNING)

    def _read_in(self, batch: Batch, run_id: str) -> Callable[[list[Any]], Projection]:
        """A pass's read of the run (`RunStore.projection_in`) queued on `batch`, with what the
        pass needs of other slots: the App Home viewers' version (`run_changed_reads`). What
        decodes it."""
        home: list[int] = []
        read = self.store.projection_in(batch, run_id)
        if self.run_changed is not None and self.run_changed_reads is not None:
            home.append(len(batch.pipe))
            self.run_changed_reads(batch.pipe)

        def decoded(replies: list[Any]) -> Projection:
            found = read(replies)
            if home:
                self._changed_read[run_id] = replies[home[0]]
            return found

        return decoded

    def _leased(self, person: str, token: str) -> NoticeLease:
        """`person`'s notice as this process's passes hold it (`token`)."""
        return NoticeLease(person, token, self.lease, NOTICE_RUNS)

    def _open_in(
        self, batch: Batch, person: str, run_ids: list[str], call_ids: list[str]
    ) -> Callable[[list[Any]], _Opened]:
        """The first step of `person`'s notice pass (`Outcomes.open_person_in`) queued on
        `batch`, with the news of `run_ids` and the calls `call_ids`: what decodes it."""
        token = secrets.token_hex(8)
        pace = functools.partial(
            self.posts.take_in, scope=f"notice:{person}", urgency=Urgency.OUTPUT
        )
        opened = self.store.outcomes.open_person_in(
            batch, self._leased(person, token), pace, run_ids, call_ids
        )

        def decoded(replies: list[Any]) -> _Opened:
            return (token, *opened(replies))

        return decoded

    def _open_ahead(self, batch: Batch, entry: str) -> Callable[[list[Any]], None]:
        """A person's notice this process indexed, due now (`_expect_notice`): its pass's first
        step queued on `batch` with the claim, with the news of the runs this process listed
        (the first `NOTICE_RUNS`: what its first message most often tells) and the calls it
        names (taken for the pass, `_opened`)."""
        person = keys.notice_person(entry)
        assert person is not None
        _, runs = self._expect_notice.pop(entry, (0.0, {}))
        run_ids = list(runs)[:NOTICE_RUNS]
        opened = self._open_in(batch, person, run_ids, [c for r in run_ids for c in runs[r]])

        def decoded(replies: list[Any]) -> None:
            self._opened[entry] = opened(replies)

        return decoded

    async def project(self, run_id: str, read: Projection | None = None) -> float | None:
        """Bring every marked message of the run up to date; seconds until it must be tried
        again, or None when nothing is left. `read`: the pass's read, made with its claim."""
        if read is None:  # read at once (one pipelined round trip, with other passes' reads)
            decoded, replies = await self.outbox.together.run(
                lambda batch: self._read_in(batch, run_id)
            )
            read = decoded(replies)
        marks, run, shown, outcomes, progress = (
            read.marks, read.run, read.shown, read.outcomes, read.progress)  # fmt: skip
        if not marks:
            return None
        if run is None:  # expired: nothing left to show
            for target, mark in marks.items():
                await self.outbox.done(run_id, target, mark)
            return None
        live = keys.result_target(run.turn)
        extra = []
        if run.turn > 1 and "run" in marks and live not in marks and not run.ended:
            # A follow-up turn's message in the thread shows what the run message shows now.
            marks = {**marks, live: marks["run"]}
            extra = [live]
        self._outcomes[run_id] = outcomes  # (`_note_outcomes` adds what it records)
        self._progress[run_id] = progress
        self._cards[run_id] = read.cards
        self._notes[run_id] = read.notes
        try:
            with serving(run.team_id, run.enterprise_id):  # its workspace's token
                again, waits = await self._project(run, marks, shown)
        finally:
            self._outcomes.pop(run_id, None)
            self._progress.pop(run_id, None)
            self._changed_read.pop(run_id, None)
            self._cards.pop(run_id, None)
            self._notes.pop(run_id, None)
        with serving(run.team_id, run.enterprise_id):
            # The run message said something: the thread's line too (unless it is to be
            # cleared while a post in the thread, which clears it, is still to go).
            posting = any(
                wait is not None
                and keys.target_kind(target) in IN_THREAD
                and not shown.get(target, Shown()).ts
                for target, wait in waits.items()
            )
            await self._show_status(run, posting=posting)
        left = [t for t in extra if waits.get(t) is not None]
        if left:  # not delivered in this pass: its own mark, for the next
            await self.outbox.mark_now(run.run_id, left)
        return again

    async def _show_status(self, run: RunRecord, *, posting: bool = False) -> None:
        """The thread's status line, if this pass's run message gave it one to say; not a
        call to clear it when a post in the thread (`posting`) will."""
        status = self._status_due.pop(run.run_id, None)
        if status is not None and (status or not posting):
            await self.thread_status.show(run, status)

    async def _posting_in_thread(self, run: RunRecord, thread: str) -> None:
        """Before a post in the run's thread, which clears its status line (as Slack does):
        the line this pass has to say goes first, not after what the post says."""
        if thread and thread == run.message_ts:
            await self._show_status(run, posting=True)

    def _posted_in_thread(self, run: RunRecord, thread: str) -> None:
        if thread and thread == run.message_ts:
            self.thread_status.posted(run)

    async def _project(
        self, run: RunRecord, marks: dict[str, Mark], shown: dict[str, Shown]
    ) -> tuple[float | None, dict[str, float | None]]:
        run_id = run.run_id
        again: float | None = None
        positions = {}
        if sum(t.startswith("card:") for t in marks) > 1:
            positions = {c.approval_id: c.index for c in await self.store.pause_calls(run_id)}
        posted = bool(shown.get("run", Shown()).ts)
        ordered = sorted(marks, key=lambda t: _order(t, positions, posted))
        # New messages go in order (cards link to the run message, a thread reads in order);
        # updates of messages already in Slack depend on nothing and go alongside.
        updates = [t for t in ordered if shown.get(t, Shown()).ts]
        waits: dict[str, float | None] = {}
        read: dict[str, CallRecord] = {}  # the cards' calls as this pass read them

        async def in_order(targets: list[str]) -> None:
            for target in targets:
                waits[target] = await self._attempt(run, target, marks[target], shown, read)

        async def alone(target: str) -> None:
            waits[target] = await self._attempt(run, target, marks[target], shown, read)

        posts = [t for t in ordered if t not in updates]
        # The run message (and a follow-up turn's message) links its pending cards: an update
        # of it waits for this pass's new cards (their ts), or it would go out without links.
        if any(keys.target_kind(t) == "card" for t in posts):
            # A follow-up turn's message links them too (turn 1's result never does).
            linking = ("run", keys.result_target(run.turn)) if run.turn > 1 else ("run",)
            later = [t for t in updates if t in linking]
            updates = [t for t in updates if t not in later]
        else:
            later = []

        output: asyncio.Event | None = None
        if posts and not later and all(keys.target_kind(t) == "result" for t in posts):
            # The run's output is its only new message: it goes out before the updates of the
            # messages already shown (they follow by a moment), for it is what the requester
            # waits for.
            output = asyncio.Event()

        async def first() -> None:
            try:
                await in_order(posts)
            finally:
                if output is not None:
                    output.set()
            await in_order(later)

        # While this is the process's only pass and no Slack request is in flight (a decision
        # at a time), the output is drawn, takes its token and goes before the updates are
        # even drawn (#32: it is what the requester waits for), in a round trip of its own.
        # Otherwise (a burst) the first tokens of all go in one round trip, the updates sent
        # once the output is posted.
        solo = output is not None and len(self._running) <= 1 and not self.foreground.busy()

        async def behind(target: str) -> None:
            if solo and output is not None:
                await output.wait()
            _BEHIND.set(output)
            await alone(target)

        # Their first Slack tokens in one round trip (`_FirstTakes`).
        parties = [first(), *(behind(t) for t in updates)]
        takes = self._takes[run_id] = _FirstTakes(self.outbox.together, len(parties) - solo)

        async def party(work: Awaitable[None], joins: bool = True) -> None:
            token = object()
            if joins:
                _PARTY.set(token)
            try:
                await work
            finally:
                if joins:
                    takes.leave(token)

        try:
            outcomes = await asyncio.gather(
                party(parties[0], joins=not solo), *(party(p) for p in parties[1:]),
                return_exceptions=True,
            )  # fmt: skip
        finally:
            self._takes.pop(run_id, None)
        failed = [r for r in outcomes if isinstance(r, BaseException)]
        if failed:
            raise failed[0]
        settled = False  # a run message or card is up to date (or given up on)
        for target, wait in waits.items():
            if wait is not None:
                again = wait if again is None else min(again, wait)
            elif keys.target_kind(target) in ("run", "card"):
                settled = True
        # What Slack shows came first; then what follows from it, which no one is waiting on
        # (and not while everything it would follow from is still gathering changes).
        if settled:
            await self._note_outcomes(run, marks, read)
            if self.run_changed is not None:
                try:
                    await self.run_changed(run, self._changed_read.get(run_id, ...))
                except Exception:
                    log_failure(
                        log, "could not mark App Homes of run %s due", run_id, level=WARNING
                    )
        return again, waits

    async def _attempt(
        self,
        run: RunRecord,
        target: str,
        mark: Mark,
        shown: dict[str, Shown],
        read: dict[str, CallRecord] | None = None,
    ) -> float | None:
        """Deliver one marked message; seconds until it must be tried again, or None."""
        run_id = run.run_id
        key = f"{run_id}/{target}"
        held = self._not_before.get(key, 0.0) - time.monotonic()
        if held > 0:
            return held
        try:
            wait = await self._deliver(run, target, mark, shown, read)
            self._failures.pop(key, None)
            self._not_before.pop(key, None)
        except Refused as refused:
            self._failures.pop(key, None)
            self._not_before.pop(key, None)
            log.error("Slack refused %s of run %s: %s", target, run_id, refused.code)
            await self.outbox.done(run_id, target, mark)
            kind = keys.target_kind(target)
            if kind in ("run", "card"):
                what = "the run's message" if kind == "run" else "an approval request"
                await self.undeliverable(run_id, what, refused.cause)
            wait = None
        except Later as later:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            # A 429 says when (its Retry-After, which holds every replica's calls behind that
            # limit); anything else backs off.
            backoff = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
            wait = max(later.after, 0.5) if later.rate_limited else max(later.after, backoff)
            self._not_before[key] = time.monotonic() + wait
            log.warning("delivering %s of run %s failed (%s, attempt %d); again in %.1fs",
                        target, run_id, later, failures, wait)  # fmt: skip
            if target == "run" and not shown.get(target, Shown()).ts:
                await self._start_without_message(run)
        return wait

    async def _start_without_message(self, run: RunRecord) -> None:
        """Slack has not taken the run's message for `START_WITHOUT_MESSAGE`: the run starts
        without it (its messages follow when Slack is back)."""
        if self.run_posted is None or time.time() < run.created_at + START_WITHOUT_MESSAGE:
            return
        with contextlib.suppress(Exception):  # (Redis away: the sweeper starts it)
            async with self.store.redis.pipeline(transaction=False) as pipe:
                self.run_posted(pipe, run)
                await pipe.execute()

    async def _note_outcomes(
        self, run: RunRecord, marks: dict[str, Mark], read: dict[str, CallRecord]
    ) -> None:
        """Record, from the records, the outcomes people must be told: calls decided by
        someone other than who asked for them (or that expired: any status but pending), told
        to who asked (the run's starter, or a later turn's requester), and the run's end, told
        to who asked for its last turn. Not what they did themselves, not a policy rule's
        automatic decision, and not the end of a turn that finished without a call of theirs
        waiting for someone else. What is new is recorded with the pass's end (which marks
        the run's `notice`), the run listed among each person's runs with news, and their
        notice indexed for when its window has passed (`_notice_later`). `read`: the calls
        this pass read to show them (not read again; a decision since marked its card again,
        and the next pass notes it)."""
        if self.notice == "off":
            return
        outcomes: dict[str, str] = {}
        people: set[str] = set()
        for target in marks:
            if keys.target_kind(target) != "card":
                continue
            approval_id = keys.Target.parse(target).id
            call = read.get(approval_id) or await self.store.get_call(approval_id)
            if call is None or not call.decided:
                continue
            asked = call.asked_by(run)
            if call.decided_by in (asked, "policy"):
                continue
            outcomes[outcome_key(call.approval_id, asked, run.user_id)] = call.status
            people.add(asked)
        asked = run.asked_by
        by_them = run.status == "cancelled" and run.cancelled_by == asked
        if run.ended and not by_them:
            read_outcomes = self._outcomes.get(run.run_id)
            waited = asked in people or (
                recorded_for(read_outcomes, asked, run.user_id)
                if read_outcomes is not None
                else await self.store.has_outcomes(run.run_id, asked, run.user_id)
            )
            if waited or run.status != "finished":
                outcomes[outcome_key("run", asked, run.user_id)] = run.status
                people.add(asked)
        if not outcomes:
            return
        since = marks[keys.NOTICE].since if keys.NOTICE in marks else time.time()
        read_outcomes = self._outcomes.get(run.run_id)
        recording = self._recording.get(run.run_id)
        if read_outcomes is None or recording is None:  # (not in a pass: recorded now)
            persons = [self._person(run, p) for p in sorted(people)]
            await self.store.record_outcomes(run.run_id, outcomes, persons, self.notice_window)
            return
        # This pass alone records the run's outcomes (it holds the run): what is new is known
        # from what it read; recorded with the pass's end, in its round trip.
        stored = {text(k): text(v) for k, v in read_outcomes.items()}
        new = {k: v for k, v in outcomes.items() if stored.get(k) != v}
        if not new:
            return
        recording.update(new)
        self._outcomes[run.run_id] = {**read_outcomes, **new}
        untold = {told_to(k, run.user_id) for k in untold_in(self._outcomes[run.run_id])}
        for user in sorted(people):
            ids = sorted(i for i, whom in untold if whom == user and i != "run")
            await self._notice_later(run, user, since, ids)

    async def _notice_later(self, run: RunRecord, user: str, since: float, ids: list[str]) -> None:
        """`user`'s news of this run (since `since`; the calls `ids` it names) told by their
        notice's pass (#32: one pass a person, not one a run): with this pass's end the run
        is listed among their runs with news, then their notice (`@<person>`) indexed for
        when its window has passed, unless it is due sooner; this process reads the notice's
        first step with the claim that takes it (`_expect_notice`). Outside a pass, now."""
        person = self._person(run, user)
        entry = keys.notice_entry(person)
        due = max(since + self.notice_window, time.time())
        listed, notify = self._listed.get(run.run_id), self._notify.get(run.run_id)
        if listed is None or notify is None:
            await self.outbox.end_pass(run.run_id, [], None, None, [person], notify={entry: due})
            self.outbox.woken.set()
            return
        if person not in listed:
            listed.append(person)
        notify[entry] = min(notify.get(entry, due), due)
        expected = self._expect_notice.get(entry)
        if expected is None:
            if len(self._expect_notice) >= DM_CHANNELS:
                self._expect_notice.clear()
            expected = self._expect_notice[entry] = (due, {})
        elif due < expected[0]:
            expected = self._expect_notice[entry] = (due, expected[1])
        expected[1][run.run_id] = ids  # (in place: a burst lists hundreds of runs)

    def _person(self, run: RunRecord, user: str) -> str:
        """Whose notice a run's outcomes for `user` go into (in the run's channel, for
        ephemeral notices, which are shown in one channel)."""
        person = f"{run.team_id}:{user}"
        return f"{person}:{run.channel_id}" if self.notice == "ephemeral" else person

    async def _tell(self, run: RunRecord, target: str, mark: Mark) -> float | None:
        """A run pass that finds the run's `notice` marked: its news is told by each person's
        notice pass (`_notice_pass`), which drops the mark once it told all of it; here the
        run is listed for them again and their notice indexed (its listing may have been lost
        with a failover, a pass that found the notice held, ...: the mark is what keeps the
        news). Dropped here when nothing is left untold."""
        if self.notice == "off":
            await self._done(run.run_id, target, mark)
            return None
        read = self._outcomes.get(run.run_id)
        if read is not None:
            untold = untold_in(read)
        else:
            untold = await self.store.untold_outcomes(run.run_id)
        if not untold:
            await self._done(run.run_id, target, mark)
            return None
        named = {told_to(k, run.user_id) for k in untold}
        for user in sorted({whom for _, whom in named}):
            ids = sorted(i for i, whom in named if whom == user and i != "run")
            await self._notice_later(run, user, mark.since, ids)
        return None

    async def _notice_pass(self, entry: str, person: str) -> float | None:
        """A pass of `person`'s notice (their outbox entry `entry`): one message for what they
        were not told yet, of all their runs listed with news (a burst of decisions over many
        runs is a few messages, and one pass, not one per run). Seconds until it must come
        again, or None.

        The protocol (no news lost; each step one round trip of `notice.lua`): a run's pass
        that records news lists the run among the person's runs with news and indexes their
        notice, with its end. The notice's pass takes the notice (a lease) and tells every
        listed run's news (in messages of `NOTICE_RUNS` runs) until the list is empty, and
        lets go in the same step that finds it empty: a run listed later indexes the notice
        again. (The first step goes with the claim when this process indexed the notice,
        `_open_ahead`; the step after its first message with the pass's end, and what that
        finds left is told after it, `_tell_after`.)"""
        opened = self._opened.pop(entry, None)
        if opened is None:
            async with self.store.redis.pipeline(transaction=False) as pipe:
                batch = Batch(pipe)
                decoded = self._open_in(batch, person, [], [])
                opened = decoded(await batch.execute())
        token, turn, taken, news, calls = opened
        if turn.paced_until:
            # One notice per window per person: news that comes meanwhile gathers (listed).
            return max(turn.paced_until - time.time(), 0.01)
        if not turn.held:  # another pass holds it (a lapsing lease: its holder stopped)
            return HELD_AGAIN
        try:
            wait = await self._tell_on(entry, person, token, turn, taken, news, calls)
        except Later as later:  # (the notice given back: told again after the backoff)
            failures = self._failures.get(entry, 0) + 1
            self._failures[entry] = failures
            backoff = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
            wait = max(later.after, 0.5) if later.rate_limited else max(later.after, backoff)
            log.warning("telling %s failed (%s, attempt %d); again in %.1fs",
                        entry, later, failures, wait)  # fmt: skip
            return wait
        self._failures.pop(entry, None)
        return wait

    async def _tell_on(
        self,
        entry: str,
        person: str,
        token: str,
        turn: NoticeTurn,
        taken: Take,
        news: dict[str, News],
        calls: list[CallRecord],
    ) -> float | None:
        """`_notice_pass` from the notice held (`token`): each message's news told, until
        none is left. In a pass, the step after its first message goes with the pass's end
        (`_told_later`; what it finds left is told after that, `_tell_after`)."""
        outcomes = self.store.outcomes
        scope = f"notice:{person}"
        while turn.held and turn.listed:
            if not taken.taken:  # never hold the notice for a token
                await outcomes.told_notice(self._leased(person, token), {}, window=0, stop=True)
                return max(taken.wait, 0.01)
            try:
                missing = [r for r in turn.listed if r not in news]
                if missing:
                    news = {**news, **await outcomes.news_of(missing)}
                told = await self._tell_listed(entry, person, turn, news, calls)
            except BaseException:
                with contextlib.suppress(Exception):
                    await outcomes.told_notice(self._leased(person, token), {}, window=0, stop=True)
                raise
            # The runs whose news is all told now (to this person, or nothing left untold):
            # their `notice` marks dropped with the step, unless an outcome came since.
            ticks = {
                run_id: found.tick
                for run_id in turn.listed
                if (found := news.get(run_id)) is not None
                and found.tick is not None
                and set(found.untold) <= set(told.get(run_id, {}))
            }
            step = _Told(person, token, dict(turn.listed), told, self.notice_window if told
                         else 0.0, ticks)  # fmt: skip
            later = self._told_later.get(entry)
            if later is not None:  # in a pass: told with its end
                later.append(step)
                return None
            turn = await self._told_now(step)
            if turn.held and turn.listed:  # more than one message's runs: the next
                taken = await self.posts.take(scope, Urgency.OUTPUT)
                news, calls = {}, []
        return None

    async def _told_now(self, told: _Told) -> NoticeTurn:
        """A notice's step after a message (`_Told`) in a round trip of its own."""
        async with self.store.redis.pipeline(transaction=False) as pipe:
            batch = Batch(pipe)
            decoded = self._told_in(batch, told)
            return decoded(await batch.execute())

    def _told_in(self, batch: Batch, t: _Told) -> Callable[[list[Any]], NoticeTurn]:
        """`told`'s step queued on `batch`: the outcomes it told recorded, the runs it told
        unlisted (unless listed again since), the notice kept for the next runs or given back;
        then the `notice` marks of the runs it told all of dropped (unless marked since)."""
        step = self.store.outcomes.told_in(
            batch, self._leased(t.person, t.token), t.listed,
            window=t.window, outcomes=t.told,
        )  # fmt: skip
        for run_id, tick in t.ticks.items():
            self.outbox.done_in(batch, run_id, keys.NOTICE, tick)
        return step

    def _telling(
        self,
        entry: str,
        told: list[_Told],
        dropped: list[tuple[str, str]],
        riders: list[Callable[[Any], None]] | None = None,
    ) -> Callable[[Batch], Callable[[list[Any]], None]] | None:
        """What to send with the pass's end: first its `riders` (a run message's ts and its
        run's start, `_posted`); then the steps of a person's notice: what its notices told
        (`told`), and the notices its first step took and did not use (`dropped`: person,
        token), given back. Those told that find more runs listed since are told after the
        pass (`_tell_after`)."""
        if not told and not dropped and not riders:
            return None
        outcomes = self.store.outcomes

        def queue(batch: Batch) -> Callable[[list[Any]], None]:
            for ride in riders or []:
                ride(batch.pipe)
            steps = [self._told_in(batch, t) for t in told]
            for person, token in dropped:
                outcomes.told_in(batch, self._leased(person, token), {}, window=0, stop=True)

            def done(replies: list[Any]) -> None:
                for t, step in zip(told, steps, strict=True):
                    turn = step(replies)
                    if turn.held and turn.listed:
                        self._after.setdefault(entry, []).append((t, turn))

            return done

        return queue

    async def _tell_after(self, entry: str) -> None:
        """The runs listed with a person's news while their pass told them (it still holds
        their notice): told now, after the pass (`_tell_on`)."""
        for told, turn in self._after.pop(entry, []):
            wait: float | None = 1.0
            try:
                taken = await self.posts.take(f"notice:{told.person}", Urgency.OUTPUT)
                wait = await self._tell_on(entry, told.person, told.token, turn, taken, {}, [])
            except Exception:
                log_failure(log, "could not tell the news of %s", entry, level=WARNING)
            if wait is not None:  # the notice given back, news left listed: its pass again
                with contextlib.suppress(Exception):
                    await self.outbox.schedule(entry, wait)

    async def _tell_listed(
        self,
        entry: str,
        person: str,
        turn: NoticeTurn,
        news: dict[str, News],
        calls: list[CallRecord],
    ) -> dict[str, dict[str, str]]:
        """Tell `person` the news of their runs listed in `turn` in one message (its Slack
        token taken; `calls`: those of the calls it names already read); the outcomes told
        (none: nothing to tell, no message)."""
        user = person.split(":")[1]
        untold = [
            (found.run, found.untold)
            for run_id in turn.listed
            if (found := news.get(run_id)) is not None and found.run is not None and found.untold
        ]
        sections, told = await self._notice_sections(untold, user, calls)
        if not sections:
            return {}
        first = next(run for run, _ in untold if run.run_id in told)
        try:
            with serving(first.team_id, first.enterprise_id):
                await self._post_notice(entry, first, user, "\n\n".join(sections))
        except Refused as refused:  # for good (the person is gone, ...): not told again
            log.error("Slack refused the notice to %s: %s", person, refused.code)
        return told

    async def _notice_sections(
        self, untold: list[tuple[RunRecord, dict[str, str]]], user: str, read: list[CallRecord]
    ) -> tuple[list[str], dict[str, dict[str, str]]]:
        """One section per run with news for `user`, in the order the news came, and the
        outcomes (as stored) they tell (the calls they name, unless all are in `read`: one
        round trip)."""
        theirs: list[tuple[RunRecord, dict[str, str]]] = []
        for record, outcomes in untold:
            mine = {k: v for k, v in outcomes.items() if told_to(k, record.user_id)[1] == user}
            if mine:
                theirs.append((record, mine))
        items = [{told_to(k, "")[0] for k in mine} for _, mine in theirs]
        ids = [a for found in items for a in found if a != "run"]
        calls: dict[str, list[CallRecord]] = {}
        known = {c.approval_id: c for c in read}
        if all(i in known for i in ids):
            records = [known[i] for i in ids]
        else:
            records = await self.store.calls(ids)
        for call in records:
            calls.setdefault(call.run_id, []).append(call)
        sections = []
        for (record, _), found in zip(theirs, items, strict=True):
            told = sorted(calls.get(record.run_id, []), key=lambda c: (c.pause, c.index))
            sections.append(notice_message(record, told, "run" in found, user))
        return sections, {record.run_id: mine for record, mine in theirs}

    async def _post_notice(self, entry: str, run: RunRecord, user: str, text: str) -> None:
        """The notice (its Slack token already taken; `run`: one it tells, whose workspace and,
        for an ephemeral notice, channel it goes in)."""
        try:
            await self._fence(entry)
            if self.notice == "ephemeral":
                await self.client.chat_postEphemeral(channel=run.channel_id, user=user, text=text)
            else:
                await self.client.chat_postMessage(
                    channel=await self._dm_channel(run.team_id, user),
                    text=text,
                    unfurl_links=False,
                    unfurl_media=False,
                )
        except Exception as exc:
            raise classify(exc) from exc

    async def _dm_channel(self, team_id: str, user_id: str) -> str:
        """The id of the bot's direct-message channel with a person: asked of Slack once (it
        does not change), then remembered (a bounded number of people)."""
        known = self._dm_channels.get((team_id, user_id))
        if known is None:
            opened = await self.client.conversations_open(users=user_id)
            known = str(opened["channel"]["id"])
            if len(self._dm_channels) >= DM_CHANNELS:
                self._dm_channels.clear()
            self._dm_channels[(team_id, user_id)] = known
        return known

    # One message ----------------------------------------------------------------------------

    async def _deliver(
        self,
        run: RunRecord,
        target: str,
        mark: Mark,
        shown: dict[str, Shown],
        read: dict[str, CallRecord] | None = None,
    ) -> float | None:
        kind = keys.target_kind(target)
        if kind == "notice":
            return await self._tell(run, target, mark)
        current = shown.get(target, Shown())
        prepaid = self._prepaid.get(run.run_id)
        if prepaid is not None and prepaid.target != target:
            prepaid = None
        if prepaid is not None and prepaid.take.taken and current == prepaid.posting:
            current = Shown()  # the record its own token wrote (a pass that read after it)
        thread = ""
        urgency: Urgency | None = None  # as its kind says, unless it shows only a status
        card_call: CallRecord | None = None  # a card's call
        if kind == "run":
            ended = run.status in ("finished", "failed")  # nothing more to gather
            wait = self._run_wait(run, mark.since) if current.ts and not ended else 0.0
            if wait > 0:
                return wait  # let changes gather (a change, or a worker's take, wakes it)
            waiting = await self.store.pause_calls(run.run_id) if run.status == "paused" else []
            progress = await self._progress_of(run.run_id)
            text, body = run_message.run_message(run, progress, waiting)
            self._status_due[run.run_id] = run_message.thread_status(run, progress, waiting)
        elif kind == "card":
            approval_id = keys.Target.parse(target).id
            known = self._cards.get(run.run_id, {}).pop(approval_id, None)
            call, context = known or await self.store.call_with_context(approval_id)
            if call is None:
                await self._done(run.run_id, target, mark)
                return None
            if read is not None:
                read[call.approval_id] = call
            if (call.by_earlier_always or call.by_edit) and not current.ts:
                await self._done(run.run_id, target, mark)  # no card: a note says why
                return None
            if not call.decided and call.edit_grant:
                return 0.5  # an edit's one-shot approval is being applied to it: wait
            if not call.decided and call.sticky in await self.store.sticky_decisions(run.run_id):
                return 0.5  # an earlier Always decision is being re-judged for it: wait
            if not call.decided and not current.ts and await self._granted(run, call):
                return 0.5  # a channel grant is being judged for it (#19): wait
            resuming = run.status in ("resuming", "running")
            if current.ts and call.decided and resuming and time.time() < mark.since + self.gather:
                # The decision resumed the run: what the resume does (a result, the run's new
                # status) arrives in a moment, and goes to Slack in the same pass as the card.
                return mark.since + self.gather - time.time()
            text, body = card.approval_message(run, call, when(call.decided_at), context)
            card_call = call
        elif kind == "remind":  # a reminder or an escalation, in the card's thread
            approval_id, which = keys.Target.parse(target).reminder
            call = await self.store.get_call(approval_id)
            if call is None or (call.decided and not current.ts):
                await self._done(run.run_id, target, mark)  # decided first: not sent
                return None
            thread = shown.get(str(keys.Target("card", approval_id)), Shown()).ts or call.message_ts
            if not thread:
                return 1.0  # its card is not in Slack yet
            text, body = notices.reminder_message(call, which), []
        else:
            if not run.message_ts:
                # nothing to thread it under yet (or ever, if the run message was refused)
                if run.ended and "run" not in shown:
                    await self._done(run.run_id, target, mark)
                    return None
                return 1.0
            thread = run.message_ts
            if kind == "note":
                number = keys.Target.parse(target).number
                noted = self._notes.get(run.run_id, {})
                note = (
                    noted.pop(number)
                    if number in noted
                    else await self.store.note(run.run_id, number)
                )
                if note is None:
                    await self._done(run.run_id, target, mark)
                    return None
                text, body = notices.note_text(from_stored(note)), []
            elif kind == "result":  # `result[:<turn>][#<part>]`: a long answer's parts
                turn, _, part = keys.Target.parse(target).id.partition("#")
                number = int(part or 1)
                answered = await self._answer(run, turn)
                if answered is not None:
                    parts = output.result_parts(answered)
                    if number > len(parts):
                        await self._done(run.run_id, target, mark)
                        return None
                    text, body = parts[number - 1], []
                    more = [keys.result_target(int(turn or 1), n) for n in range(2, len(parts) + 1)]
                    if number == 1 and streamed(current) and not current.ts:
                        # A stream start whose outcome is unknown: the stream, or a post.
                        ts = await self._found_stream(run, current)
                        current = Shown(ts, current.hash, 0.0) if ts else Shown()
                        if ts:
                            await self._posted(run, target, ts, current.hash)  # still a stream
                    if number == 1 and streamed(current):  # Slack's own stream: ended here
                        closed = await self._end_stream(run, target, mark, current, answered, text)
                        if closed is True:
                            return None  # the stream holds the whole answer
                        if not isinstance(closed, bool):
                            return closed  # its turn comes later
                    if number == 1 and more and more[0] not in shown:
                        await self.outbox.mark_now(run.run_id, more)  # posted after it
                else:  # the answer being written: its words so far, said to be unfinished
                    partial = await self.store.turns.partial(run.run_id)
                    writing = partial is not None and partial[0] == int(turn or 1)
                    if (
                        number == 1
                        and turn
                        and int(turn) == run.turn
                        and not run.ended
                        and not (writing and partial is not None and partial[1])
                    ):  # a follow-up turn's message, before its answer: what it does now
                        if current.ts and (wait := self._run_wait(run, mark.since)) > 0:
                            return wait  # its changes gather, as the run message's do
                        if (
                            not current.ts
                            and (wait := mark.since + PROGRESS_AFTER - time.time()) > 0
                        ):
                            return wait  # a quick answer is posted as it is, with no call more
                        waiting = []
                        if run.status == RunStatus.PAUSED:
                            waiting = await self.store.pause_calls(run.run_id)
                        progress = await self._progress_of(run.run_id)
                        text, body = run_message.turn_progress(run, progress, waiting), []
                        urgency = Urgency.STATUS
                    elif number > 1 or not writing or not (partial and (partial[1] or current.ts)):
                        await self._done(run.run_id, target, mark)
                        return None
                    else:
                        assert partial is not None
                        if (
                            number == 1
                            and self.streams.usable(run)
                            and (streamed(current) or not current.ts)
                        ):
                            sent = await self._stream(run, target, mark, current, partial[1])
                            if sent != NOT_STREAMED:
                                return sent
                        text, body = output.partial_answer(partial[1]), []
            else:
                review_id = keys.Target.parse(target).id
                voters = await self.store.review_voters(run.run_id, review_id)
                text, body = notices.review_message(run, review_id, voters)
        payload = as_dicts(body)
        digest = _digest(text, payload)
        channel = run.channel_id
        if current.ts and current.hash == digest:
            await self._done(run.run_id, target, mark)
            return None
        stage = "find"
        try:
            if not current.ts and current.posting:
                current.ts = await self._find(run, target, thread, current.posting)
                if current.ts:
                    log.info("found %s of run %s already posted; not posting it again",
                             target, run.run_id)  # fmt: skip
                    self._posted_in_thread(run, thread)
                    await self._posted(run, target, current.ts)
            if current.ts:
                stage = "update"
                left = await self._turn(
                    self.updates, run.team_id, run.run_id, target, True, urgency
                )
                if left > 0:
                    return left  # its turn comes later: more urgent messages go first
                await self._fence(run.run_id)
                if (ahead := _BEHIND.get()) is not None:
                    await ahead.wait()  # the output first (it is what the requester waits for)
                await self.client.chat_update(
                    channel=channel, ts=current.ts, text=text, blocks=payload or None
                )
            else:
                # An output's post (it takes a token only when one is free: refused, seldom)
                # is recorded as attempted with its token's take, in one round trip (#32),
                # its lease checked first; a refused take writes back what was there. Other
                # posts (cards, which may queue) are recorded once their token is taken. A
                # post whose answer is lost is then looked up, not posted twice.
                # An output whose token the run's end took (`_pass_in`) has its posting
                # record written with it: that token is used, not a second one.
                rides = (urgency or _urgency(kind, posted=False)) == Urgency.OUTPUT
                if not rides or current.ts or current.posting:
                    prepaid = None
                posting = (
                    prepaid.posting
                    if prepaid is not None
                    else dataclasses.replace(current, posting=time.time())
                )
                if rides:
                    await self._fence(run.run_id)
                left = await self._turn(
                    self.posts, channel, run.run_id, target, False, urgency,
                    posting if rides else None, prepaid,
                )  # fmt: skip
                if left > 0:
                    if rides and prepaid is None:
                        await self.outbox.set_shown(run.run_id, target, current)
                    return left
                if not rides:
                    await self._fence(run.run_id)
                await self._posting_in_thread(run, thread)
                stage = "post"
                current.posting = posting.posting if rides else time.time()
                if not rides:
                    await self.outbox.set_shown(run.run_id, target, current)
                response = await self.client.chat_postMessage(
                    channel=channel,
                    text=text,
                    blocks=payload or None,
                    thread_ts=thread or None,
                    unfurl_links=False,
                    unfurl_media=False,
                    metadata={
                        "event_type": EVENT_TYPE,
                        "event_payload": {"run_id": run.run_id, "target": target},
                    },
                )
                current.ts = str(response["ts"])
                self._posted_in_thread(run, thread)
                await self._posted(run, target, current.ts, digest, mark, payload)
                if kind == "card" and self.card_posted is not None and card_call is not None:
                    self.card_posted(run, card_call, *card_reading(payload))
                return None
        except Exception as exc:
            # Slack's limit is per method and channel (posts) or workspace (updates): every
            # message behind the same limit waits a 429 out too, not only this one.
            pacer, scope = (self.updates, run.team_id) if stage == "update" else (
                self.posts, channel)  # fmt: skip
            failure = await self._failure(exc, pacer, scope)
            gone = (stage, str(failure)) == ("update", "message_not_found")
            if isinstance(failure, Later) and not failure.ambiguous and (gone or stage == "post"):
                # not posted (or deleted in Slack since): the next attempt posts afresh
                await self.outbox.set_shown(run.run_id, target, Shown())
            raise failure from exc
        delivered = Shown(current.ts, digest, 0.0, current.reading)  # (what the card asked)
        await self._done(run.run_id, target, mark, delivered)
        return None

    async def _stream(
        self, run: RunRecord, target: str, mark: Mark, current: Shown, text: str
    ) -> float | None:
        """The answer so far, with Slack's chat streaming (bot/slack/delivery/streams.py): the
        stream opened, or extended (None: delivered; a float: the seconds until its turn comes);
        NOT_STREAMED when the workspace has none (the caller posts instead)."""
        if not current.ts and current.posting and streamed(current):
            # An earlier start's outcome is unknown: the stream it may have opened, if any.
            ts = await self._found_stream(run, current)
            if ts:
                log.info("found the answer stream of run %s already open", run.run_id)
                current = Shown(ts, current.hash, 0.0)
                await self._posted(run, target, ts, current.hash)  # still a stream
        opening = not current.ts
        if opening and not streamable(text):
            return 0.5  # not a whole word yet: the stream opens with the first one
        pacer, scope = (self.posts, run.channel_id) if opening else (self.updates, run.team_id)
        left = await self._ready(pacer, scope, run, target, posted=not opening)
        if left > 0:
            return left
        try:
            if opening:
                await self._posting_in_thread(run, run.message_ts)
                await self.outbox.set_shown(run.run_id, target, opening_state(text, time.time()))
                started = await self.streams.start(run, run.message_ts, text)
                if started is None:
                    await self.outbox.set_shown(run.run_id, target, Shown())
                    return NOT_STREAMED
                current = started
                self._posted_in_thread(run, run.message_ts)
            else:
                current = await self.streams.append(run, current, text)
        except Exception as exc:
            failure = await self._failure(exc, pacer, scope)
            if opening and not (isinstance(failure, Later) and failure.ambiguous):
                await self.outbox.set_shown(run.run_id, target, Shown())  # it did not open
            if not opening:
                await self.outbox.set_shown(run.run_id, target, current)  # `~x` if unknown
            raise failure from exc
        # The ts with the stream's state, in one write: a ts recorded alone (a process killed
        # before the next write) reads as a posted message, whose updates never end the stream.
        await self._posted(run, target, current.ts, current.hash, mark)
        return None

    async def _found_stream(self, run: RunRecord, tried: Shown) -> str:
        """The ts of the stream an unconfirmed start opened in the run's thread ('': none)."""
        response = await self.client.conversations_replies(
            channel=run.channel_id, ts=run.message_ts, oldest=f"{tried.posting - 60:.6f}",
            include_all_metadata=True, limit=200,
        )  # fmt: skip
        return found_stream(tried, list(response.get("messages") or []))

    async def _end_stream(
        self,
        run: RunRecord,
        target: str,
        mark: Mark,
        current: Shown,
        answered: RunRecord,
        first: str,
    ) -> float | bool:
        """End the answer's stream; True when it holds the whole answer (delivered), False
        when it now shows `first`, the first of the answer's messages (the rest follow); a
        float: the seconds until its turn comes."""
        left = await self._ready(self.updates, run.team_id, run, target, posted=True)
        if left > 0:
            return left
        answer = answered.output if answered.status == RunStatus.FINISHED else None
        metadata: dict[str, object] = {
            "event_type": EVENT_TYPE,
            "event_payload": {"run_id": run.run_id, "target": target},
        }
        try:
            whole = await self.streams.finish(run, current, answer, first, metadata)
        except Exception as exc:
            raise await self._failure(exc, self.updates, run.team_id) from exc
        shown = Shown(current.ts, _digest(first, []) if not whole else "streamed", 0.0)
        await self.outbox.delivered(run.run_id, target, shown, mark)
        return whole

    async def _ready(
        self, pacer: SharedPacer, scope: str, run: RunRecord, target: str, *, posted: bool
    ) -> float:
        """0 when the message may go now (its turn at Slack come, and the lease still this
        process's); else the seconds until its turn."""
        left = await self._turn(pacer, scope, run.run_id, target, posted)
        if left <= 0:
            await self._fence(run.run_id)
        return left

    async def _failure(self, exc: Exception, pacer: SharedPacer, scope: str) -> Refused | Later:
        """What a failed call means; a 429 holds every replica's calls behind that limit."""
        failure = classify(exc)
        if isinstance(failure, Later) and failure.rate_limited:
            with contextlib.suppress(Exception):  # (Redis away: the backoff still holds)
                await pacer.hold(scope, failure.after)
        return failure

    async def _turn(
        self,
        pacer: SharedPacer,
        scope: str,
        run_id: str,
        target: str,
        posted: bool,
        urgency: Urgency | None = None,
        posting: Shown | None = None,
        prepaid: Prepaid | None = None,
    ) -> float:
        """0 when this message may go to Slack now (after a short wait for its token, if
        need be); else the seconds until its turn. A card's turn (its token, reserved in the
        shared queue) more than a moment away is kept in Redis for the message, and the pass
        ends meanwhile: what else the run has to show (an output that came since) goes in
        another pass, rather than wait behind the card's place in the workspace's queue; the
        pass that comes at its turn, in any process, is given the same turn, not a second.
        `prepaid`: the output's token taken with the run's end (its posting record written
        with it): used as it is, no take of its own."""
        urgency = urgency or _urgency(keys.target_kind(target), posted=posted)
        takes, party = self._takes.get(run_id), _PARTY.get()
        message = f"{run_id}/{target}"
        rider = None
        if posting is not None:  # `posting`: what Slack may hold once it is posted, sent along

            def rider(pipe: Any) -> None:
                self.outbox.set_shown_in(pipe, run_id, target, posting)

        taken = None
        if prepaid is not None and self._prepaid.get(run_id) is prepaid:
            del self._prepaid[run_id]
            prepaid.used = True  # (never given back: its post may be tried from now on)
            taken = prepaid.take
            if takes is not None and party is not None:
                takes.leave(party)  # (asks for nothing in the pass's first takes)
        elif takes is not None and party is not None:  # with the pass's other first takes
            taken = await takes.take(party, pacer, scope, urgency, message, rider)
        if taken is None and rider is None:
            taken = await pacer.take(scope, urgency, message=message)
        elif taken is None:
            async with self.store.redis.pipeline(transaction=False) as pipe:
                batch = Batch(pipe)
                decoded = pacer.take_in(batch, scope, urgency, message)
                rider(pipe)
                taken = decoded(await batch.execute())
        if not taken.taken or taken.wait > KEEP_AFTER:
            return taken.wait  # an output or a status update does not queue: asked again then
        if taken.wait > 0:
            await asyncio.sleep(taken.wait)
        return 0.0

    def _run_wait(self, run: RunRecord, since: float) -> float:
        """Seconds a run message's changes (the first at `since`) gather still, 0: now.

        A resuming or running run's changes gather `coalesce` from when a worker took its job
        (a quick resume's status and result are one update), and not at all while the job
        waits for a worker, up to `busy_coalesce` after `since`: in a burst of decisions the
        resumes queue up, and a message updated meanwhile would show "resuming", then
        "finished" (two updates). Quiet, a worker takes the job at once: no later than before.
        """
        now = time.time()
        gathered = since + self.coalesce - now
        if run.status not in ("resuming", "running") or self.busy_coalesce <= self.coalesce:
            return max(gathered, 0.0)
        if "/" not in run.owner:  # queued: no worker has it yet
            if self.store.run_records.takes_index:  # its take makes it due (`take_run`)
                return max(since + self.busy_coalesce - now, 0.0)
            # Look again after as long as it has waited (a few looks, not one a window, for
            # each of a burst's runs); its end makes it due at once.
            again = gathered if gathered > 0 else max(self.coalesce, now - since, POLL)
            return max(min(since + self.busy_coalesce - now, again), 0.0)
        taken = max(since, run.updated_at)  # a worker's take sets `updated_at`
        return max(min(taken + self.coalesce, since + self.busy_coalesce) - now, 0.0)

    async def _progress_of(self, run_id: str) -> list[str]:
        """The run's progress lines: as its pass read them with the run (a line added since
        marks the run message again: the next pass shows it)."""
        read = self._progress.get(run_id)
        return read if read is not None else await self.store.progress(run_id)

    async def _done(self, run_id: str, target: str, mark: Mark, shown: Shown | None = None) -> None:
        """`target` is delivered (Slack holds `shown`; None: as it was): its mark dropped,
        with what Slack holds, at the end of the pass (with the claim's release, one round
        trip), or at once outside a pass. Until then a crash delivers it again (an update is
        repeated; a post is looked up first, its attempt recorded before it went)."""
        written = self._written.get(run_id)
        if written is not None:
            written.append((target, mark, shown))
        elif shown is not None:
            await self.outbox.delivered(run_id, target, shown, mark)
        else:
            await self.outbox.done(run_id, target, mark)

    async def _fence(self, run_id: str) -> None:
        fence = self._fences.get(run_id)
        if fence is not None:
            await fence()

    async def _answer(self, run: RunRecord, turn: str) -> RunRecord | None:
        """The run as turn `turn` ended (`result` is turn 1's, `result:<n>` turn n's), or None
        while it has not. Turn 1 is the run's own fields until a follow-up starts turn 2."""
        if not turn and run.turn <= 1:
            return run if run.status in ("finished", "failed") else None
        ended = await self.store.turns.answer(run.run_id, int(turn or 1))
        if ended is None:
            return None
        status, said = ended
        failed = status == RunStatus.FAILED
        return dataclasses.replace(
            run,
            status=RunStatus(status),
            output="" if failed else said,
            error=said if failed else "",
        )

    async def _posted(
        self,
        run: RunRecord,
        target: str,
        ts: str,
        digest: str = "",
        mark: Mark | None = None,
        body: list[dict[str, Any]] | None = None,
    ) -> None:
        """Record a new message's ts where the rest of the bot looks for it; with the hash of
        what it shows and its `mark`, the message is delivered. (Until its ts is in `shown`, a
        new attempt looks the message up before posting: these writes are safe to repeat.)"""
        shown = Shown(ts, digest, 0.0)
        kind = keys.target_kind(target)
        if kind == "run":
            run.message_ts = ts
            posted = self.run_posted
            then = (lambda pipe: posted(pipe, run)) if posted is not None else None
            riders = self._riders.get(run.run_id)
            if riders is not None and mark is not None:  # with the pass's end (and its shown)
                riders.append(
                    lambda pipe: self.store.set_run_message_in(pipe, run.run_id, ts, then)
                )
            else:
                await self.store.set_run_message(run.run_id, ts, then)
        elif kind == "card":  # indexed for thread replies (idempotent)
            await self.store.set_call_message(keys.Target.parse(target).id, run.channel_id, ts)
            if body is not None:
                chars, folded = card_reading(body)
                shown.reading = f"{chars}{'f' if folded else ''}"
        elif kind == "review":
            await self.store.set_run_fields(run.run_id, review_ts=ts)
        if mark is None:
            await self.outbox.set_shown(run.run_id, target, shown)
        else:
            await self._done(run.run_id, target, mark, shown)

    async def _find(self, run: RunRecord, target: str, thread: str, since: float) -> str:
        """The ts of this target's message if an earlier, unconfirmed post made it."""
        params: dict[str, Any] = {
            "channel": run.channel_id,
            "oldest": f"{since - 60:.6f}",
            "include_all_metadata": True,
            "limit": 200,
        }
        if thread:
            response = await self.client.conversations_replies(ts=thread, **params)
        else:
            response = await self.client.conversations_history(**params)
        for message in response.get("messages") or []:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            if (
                metadata.get("event_type") == EVENT_TYPE
                and payload.get("run_id") == run.run_id
                and payload.get("target") == target
            ):
                return str(message["ts"])
        return ""

    async def _granted(self, run: RunRecord, call: CallRecord) -> bool:
        """A channel grant covers this call (its agent's tool, and the narrowed arguments'
        values if any): it is settled, or the grant dropped, at once."""
        grants = await self.grants.for_tool(run.team_id, run.channel_id, call.sticky)
        if not grants:
            return False
        subject = subject_of_call(call)
        return any(g.covers(subject) for g in grants)

    async def idle(self) -> bool:
        """Nothing marked is waiting on the index and nothing is being delivered."""
        return not self._running and await self.outbox.backlog() == 0
