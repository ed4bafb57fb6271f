"""Decision webhooks: every audit entry POSTed as signed JSON to `APPROVAL_BOT_WEBHOOK_URL`.

At least once, in the audit trail's order (so in order per run), each with its idempotency key
(the entry's stream id). The audit stream is the outbox (`bot.store.trail.webhooks`): a decision
writes its audit entry as before and never waits for a receiver. One process at a time
delivers (a lease in Redis); a receiver that fails or is down holds the head of the queue,
retried with exponential backoff, and everything after it waits in order. An entry left
undelivered for longer than `APPROVAL_BOT_WEBHOOK_MAX_AGE_HOURS` is skipped, with an audit entry
(`webhook_skipped`, itself delivered) that names the skipped range: the backlog is bounded
by age, and what was skipped stays in the audit trail (`approval-bot audit --since`).

The signature is Slack's scheme with our headers: `X-Approval-Bot-Signature: v0=<hex>`, the
HMAC-SHA256 with the webhook secret of `v0:<X-Approval-Bot-Timestamp>:<raw body>`.

What free text leaves the bot (one rule, applied here only: `outgoing`). An audit entry keeps
its free text (what a person or the agent wrote, or a call's argument values: a task, a
follow-up, a question and its answer, a rejection reason, edited arguments, a grant's narrowed
values, a run's output or error) in its `text` field, never elsewhere. An event carries
`text_chars` (its length) and `text_hmac` (the HMAC-SHA256 of its UTF-8 bytes with the webhook
secret: whoever holds the secret can match a text they already have, or two events of the same
text; a reader of the events alone cannot guess a short answer), and `text` itself only when
the operator sets `APPROVAL_BOT_WEBHOOK_FREE_TEXT=true`, with credentials masked as in the
logs (`bot.untrusted.redact`). A call's arguments are never sent: its digest binds them (nor
the `subject` a settled call's entry keeps for backtests).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import random
import secrets
import time
from typing import Literal

import aiohttp

from bot import metrics
from bot.clock import SYSTEM_CLOCK, Clock
from bot.outage import log_failure
from bot.service.audit import AuditKind
from bot.service.foreground import Foreground
from bot.store.trail.audit import AuditLog
from bot.store.trail.webhooks import Event, WebhookOutbox, entry_time
from bot.untrusted import redact

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Approval-Bot-Signature"
TIMESTAMP_HEADER = "X-Approval-Bot-Timestamp"
EVENT_ID_HEADER = "X-Approval-Bot-Event-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"
SCHEME = "v0"
BATCH = 100  # entries read per round trip
WAIT_SECONDS = 1.0  # the longest blocking read for new entries (well below Redis's timeout)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """`v0=` and the hex HMAC-SHA256 of `v0:<timestamp>:<body>` (what a receiver recomputes)."""
    signed = f"{SCHEME}:{timestamp}:".encode() + body
    return f"{SCHEME}=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def outgoing(fields: dict[str, str], secret: str, *, free_text: bool) -> dict[str, str | int]:
    """An audit entry's fields as they may leave the bot (the rule in the module docstring):
    its free text (`text`) as its length and keyed digest, and as it is (credentials masked)
    only with `free_text`."""
    out: dict[str, str | int] = dict(fields)
    out.pop("subject", None)  # a call's arguments as judged, kept for backtests: never sent
    said = fields.get("text", "")
    out.pop("text", None)
    if said:
        out["text_chars"] = len(said)
        out["text_hmac"] = hmac.new(
            secret.encode(), said.encode("utf-8", "surrogatepass"), hashlib.sha256
        ).hexdigest()
        if free_text:
            out["text"] = redact(said)
    return out


def payload(event: Event, secret: str = "", *, free_text: bool = False) -> bytes:
    """The JSON body of one event: its id (the idempotency key), kind, time, then the audit
    entry's other fields as stored (strings; absent when empty), free text as `outgoing`
    lets it leave."""
    fields = dict(event.fields)
    kind = fields.pop("kind", "")
    try:
        when = float(fields.pop("time", "") or entry_time(event.id))
    except ValueError:
        when = entry_time(event.id)
    shown = outgoing(fields, secret, free_text=free_text)
    body = {"id": event.id, "kind": kind, "time": when, **shown}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def backoff(attempt: int, first: float, cap: float) -> float:
    """The wait after the `attempt`-th failure in a row (0-based): doubling from `first` up to
    `cap`, with jitter (half to all of it) so that replicas and receivers do not beat together."""
    return float(min(cap, first * 2 ** min(attempt, 32))) * (0.5 + random.random() / 2)


class WebhookSender:
    """The delivery loop of one process; only the holder of the lease sends."""

    def __init__(
        self,
        outbox: WebhookOutbox,
        audit: AuditLog,
        *,
        url: str,
        secret: str,
        timeout: float,
        retry: float,
        retry_max: float,
        max_age: float,
        lease: float,
        free_text: bool = False,
        idle: float = WAIT_SECONDS,
        clock: Clock = SYSTEM_CLOCK,
        foreground: Foreground | None = None,
    ) -> None:
        self.outbox = outbox
        self.audit = audit
        self.url = url
        self._secret = secret  # never logged
        self.timeout = timeout
        self.retry, self.retry_max = retry, retry_max
        self.max_age = max_age  # seconds an entry may wait before it is skipped
        self.free_text = free_text  # free text leaves as it is (masked), not only its digest
        self.lease = lease
        self.idle = min(idle, WAIT_SECONDS)
        self.clock = clock
        self.foreground = foreground
        self.token = secrets.token_hex(8)
        self._confirmed = 0.0  # monotonic time the lease was last known to be ours
        self._stopping = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None

    async def run(self) -> None:
        """Deliver until cancelled or stopped."""
        # A session of its own: a hung receiver never holds a connection Slack calls need.
        async with aiohttp.ClientSession() as session:
            self._session = session
            with contextlib.suppress(Exception):
                await self.outbox.begin()
            while not self._stopping.is_set():
                try:
                    if self.foreground is not None:
                        await self.foreground.lull()
                    if not await self._held():
                        await self._sleep(self.lease / 3)  # another process delivers
                        continue
                    await self._round()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log_failure(log, "webhook delivery could not read the audit trail; retrying",
                                level=logging.WARNING)  # fmt: skip
                    await self._sleep(1.0)

    async def stop(self) -> None:
        """Stop sending and give the lease back, so another process takes over at once."""
        self._stopping.set()
        with contextlib.suppress(Exception):
            await self.outbox.release(self.token)

    async def _held(self, *, fresh: bool = False) -> bool:
        """The lease is ours (renewed when last confirmed a third of a lease ago, or `fresh`)."""
        if not fresh and time.monotonic() - self._confirmed < self.lease / 3:
            return True
        if await self.outbox.hold(self.token, self.lease):
            self._confirmed = time.monotonic()
            return True
        self._confirmed = 0.0
        return False

    async def _round(self) -> None:
        """Deliver what waits after the cursor, in order; wait a moment for more when none."""
        cursor = await self.outbox.begin()
        events = await self.outbox.pending(cursor, BATCH, wait=self.idle)
        for event in events:
            if self._stopping.is_set():
                return
            outcome = await self._deliver(event)
            if outcome == "stale":
                await self._skip_stale(event)
                return
            if outcome == "lost" or not await self.outbox.advance(self.token, event.id):
                self._confirmed = 0.0
                return  # the lease moved on: the new holder sends from the cursor
            metrics.WEBHOOK_DELIVERED.inc()

    async def _deliver(self, event: Event) -> Literal["sent", "lost", "stale"]:
        """POST one event until the receiver accepts it, the lease is lost (or the process
        stops), or it has waited longer than the bound."""
        body = payload(event, self._secret, free_text=self.free_text)
        attempt = 0
        while not self._stopping.is_set():
            if self._stale(event):
                return "stale"
            if not await self._held():
                return "lost"
            failure = await self._post(event.id, body)
            if failure is None:
                return "sent"
            metrics.WEBHOOK_FAILURES.labels(reason=failure).inc()
            wait = backoff(attempt, self.retry, self.retry_max)
            log.warning("webhook: audit entry %s not accepted (%s, attempt %d); next try in %.1fs",
                        event.id, failure, attempt + 1, wait)  # fmt: skip
            attempt += 1
            await self._sleep(wait)
        return "lost"

    async def _post(self, event_id: str, body: bytes) -> str | None:
        """One attempt: None when accepted (2xx), else why not (status, timeout, connection)."""
        assert self._session is not None
        timestamp = int(time.time())  # the receiver compares it with its own clock
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "slack-approval-bot",
            SIGNATURE_HEADER: signature(self._secret, timestamp, body),
            TIMESTAMP_HEADER: str(timestamp),
            EVENT_ID_HEADER: event_id,
            IDEMPOTENCY_HEADER: event_id,
        }
        try:
            async with self._session.post(
                self.url,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as response:
                if 200 <= response.status < 300:
                    return None
                return str(response.status)
        except TimeoutError:
            return "timeout"
        except aiohttp.ClientError:
            return "connection"

    def _stale(self, event: Event) -> bool:
        """Waited longer than the bound (a skip's own notice never is: it says what was lost)."""
        if event.fields.get("kind") == AuditKind.WEBHOOK_SKIPPED:
            return False
        return entry_time(event.id) < self.clock.time() - self.max_age

    async def _skip_stale(self, oldest: Event) -> None:
        """Move the cursor past every entry older than the bound, from `oldest` on, and audit
        the skipped range (an entry that is itself delivered, after the newer ones)."""
        last, count = await self.outbox.stale_range(oldest.id, self.clock.time() - self.max_age)
        if not await self._held(fresh=True) or not await self.outbox.advance(self.token, last):
            return
        metrics.WEBHOOK_SKIPPED.inc(count)
        log.error(
            "webhook: %d audit entries (%s to %s) waited longer than the bound and were "
            "skipped; `approval-bot audit` still has them",
            count, oldest.id, last,
        )  # fmt: skip
        await self.audit.append(
            AuditKind.WEBHOOK_SKIPPED, decision=f"{count}", detail=f"{oldest.id}..{last}"
        )

    async def _sleep(self, seconds: float) -> None:
        """Sleep (on the clock tests skip), renewing the lease meanwhile; ends on stop."""
        until = self.clock.monotonic() + seconds
        while not self._stopping.is_set() and (left := until - self.clock.monotonic()) > 0:
            chunk = min(left, self.lease / 3)
            sleeper = asyncio.ensure_future(self.clock.sleep(chunk))
            stopped = asyncio.ensure_future(self._stopping.wait())
            try:
                await asyncio.wait({sleeper, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                stopped.cancel()
            if self._confirmed and not self._stopping.is_set():
                await self._held(fresh=True)
