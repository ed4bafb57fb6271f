"""A turn's answer streamed with Slack's own chat streaming (`chat.startStream`, then
`chat.appendStream` with each new piece, `chat.stopStream` at the end), where the workspace
offers it; elsewhere the projector posts the answer so far and updates it (the fallback).

What Slack holds of a live stream is kept in the message's `Shown.hash`: `~<n>:<digest>` (the
first n characters of the answer's Markdown were sent, and their digest), or `~x` (unknown:
an append whose outcome was lost, or a retry of the turn that wrote something else). Only
text that extends what was sent is appended; otherwise the stream's end rewrites the message
with the whole answer (`chat.stopStream`, then `chat.update`), so what the reader is left with
is always the answer as the run recorded it. The agent's words go as Slack markdown made safe
(`safe_markdown`: no mention, ping or Slack link can come from them).

A workspace that answers `chat.startStream` with an error saying it does not offer it
(`unknown_method`, `missing_scope`, ...) is remembered by this process, and its answers take the
fallback from then on. A start whose outcome is unknown (a timeout: Slack may have opened the
stream) is recorded before the call (`opening`: what it sends, and when), and the next attempt
looks the thread up for a message holding exactly that (`found`) and carries on with it, rather
than open a second one (a stream takes no metadata to find it by, as posts do).
"""

from __future__ import annotations

import hashlib
import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.markdown import OPEN_LINK, safe_markdown
from bot.store.delivery.outbox import Shown
from bot.store.records import RunRecord

log = logging.getLogger(__name__)

STREAM_LIMIT = 12_000  # characters of markdown_text per call, and what one stream holds here
UNSUPPORTED = frozenset(
    {
        "unknown_method", "method_not_supported", "not_allowed_token_type", "missing_scope",
        "feature_not_enabled", "not_supported", "invalid_arguments", "channel_type_not_supported",
    }
)  # fmt: skip
UNKNOWN = "~x"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def streamed(shown: Shown) -> bool:
    """Whether the message is a stream still open (see the module docstring)."""
    return shown.hash.startswith("~")


def sent_of(shown: Shown) -> tuple[int, str] | None:
    """How much of the answer a live stream holds, and its digest (None: unknown)."""
    if shown.hash == UNKNOWN:
        return None
    count, _, digest = shown.hash[1:].partition(":")
    return int(count), digest


def _whole_words(text: str) -> str:
    return text[: max(text.rfind(" "), text.rfind("\n"), text.rfind("\t")) + 1]


def streamable(text: str) -> str:
    """The part of an answer being written that is sent now: up to its last whitespace, and
    before a link not yet finished. What `safe_markdown` makes of a character depends on the
    rest of its word (`<@U...`, `@here`) and of its link (a text that looks like an address
    becomes the address the link opens), so only whole words and whole links go out, and what
    was sent is always the start of what the whole answer becomes: appending stays exact."""
    head = _whole_words(text)
    unfinished = OPEN_LINK.search(head)
    if unfinished is not None:
        head = _whole_words(head[: unfinished.start()])
    return safe_markdown(head)[:STREAM_LIMIT]


def state(markdown: str, ts: str) -> Shown:
    return Shown(ts, f"~{len(markdown)}:{_digest(markdown)}", 0.0)


def opening(text: str, at: float) -> Shown:
    """A stream start about to be tried at `at`: what it sends, no ts yet (see the module
    docstring)."""
    shown = state(streamable(text), "")
    shown.posting = at
    return shown


def found(shown: Shown, messages: list[dict[str, object]]) -> str:
    """The ts of the message an unconfirmed start opened, among a thread's messages since it
    was tried: the one without metadata holding exactly what the start sent; '' if none."""
    sent = sent_of(shown)
    if sent is None:
        return ""
    for message in messages:
        text = str(message.get("text") or "")
        if not message.get("metadata") and (len(text), _digest(text)) == sent:
            return str(message.get("ts") or "")
    return ""


class AnswerStreams:
    """Starts, extends and ends answer streams; knows which workspaces have none."""

    def __init__(self, client: AsyncWebClient, *, enabled: bool = True) -> None:
        self.client = client
        self.enabled = enabled
        self._without: set[str] = set()  # workspaces (team ids) that answered "not offered"

    def usable(self, run: RunRecord) -> bool:
        return self.enabled and run.team_id not in self._without

    async def start(self, run: RunRecord, thread: str, text: str) -> Shown | None:
        """Open the stream with the answer so far; None when the workspace does not offer
        streaming (the caller posts the message instead)."""
        markdown = streamable(text)
        try:
            response = await self.client.chat_startStream(
                channel=run.channel_id,
                thread_ts=thread,
                markdown_text=markdown,
                recipient_user_id=run.user_id,
                recipient_team_id=run.team_id,
            )
        except SlackApiError as exc:
            code = str(exc.response.get("error", ""))
            if code not in UNSUPPORTED:
                raise
            self._without.add(run.team_id)
            log.info(
                "workspace %s does not offer chat streaming (%s): answers are posted and "
                "updated instead", run.team_id, code,
            )  # fmt: skip
            return None
        return state(markdown, str(response["ts"]))

    async def append(self, run: RunRecord, shown: Shown, text: str) -> Shown:
        """Send what the answer gained since; the stream's new state."""
        markdown = streamable(text)
        sent = sent_of(shown)
        if sent is None or len(markdown) <= sent[0]:
            return shown  # nothing new, or not known what Slack holds: the end rewrites it
        if _digest(markdown[: sent[0]]) != sent[1]:
            return Shown(shown.ts, UNKNOWN, 0.0)  # the words changed (a retried turn)
        try:
            await self.client.chat_appendStream(
                channel=run.channel_id, ts=shown.ts, markdown_text=markdown[sent[0] :]
            )
        except SlackApiError:
            raise  # Slack said no: nothing was appended
        except Exception:
            shown.hash = UNKNOWN  # maybe appended: the end rewrites the message
            raise
        return state(markdown, shown.ts)

    async def finish(
        self,
        run: RunRecord,
        shown: Shown,
        answer: str | None,
        rewrite: str,
        metadata: dict[str, object],
    ) -> bool:
        """End the stream with the whole `answer` (its Markdown); True when the message now
        holds it. False: it was stopped as it stood, and it is rewritten (`chat.update` with
        `rewrite`, the answer's first message as posted answers are): so is a run that failed
        (`answer` None: its error is shown as posted)."""
        markdown = safe_markdown(answer or "")
        sent = sent_of(shown)
        whole = (
            answer is not None
            and sent is not None
            and len(markdown) <= STREAM_LIMIT
            and _digest(markdown[: sent[0]]) == sent[1]
        )
        rest = markdown[sent[0] :] if whole and sent is not None else ""
        try:
            await self.client.chat_stopStream(
                channel=run.channel_id, ts=shown.ts, markdown_text=rest or None, metadata=metadata
            )
        except SlackApiError as exc:
            if str(exc.response.get("error", "")) != "message_not_in_streaming_state":
                raise
            whole = False  # stopped already (a pass that died after it): rewrite to be sure
        if not whole:
            await self.client.chat_update(channel=run.channel_id, ts=shown.ts, text=rewrite)
        return whole
