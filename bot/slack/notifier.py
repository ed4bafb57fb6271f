"""The service's `Notifier`, over Slack's Web API."""

from __future__ import annotations

import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.service.approvals import when
from bot.slack import blocks
from bot.slack.text import quote
from bot.store.records import CallRecord, RunRecord

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 3900


class SlackNotifier:
    """Posts and updates the bot's messages. Untrusted text is escaped in `blocks`/`text`."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def post_run(self, run: RunRecord) -> str:
        text, body = blocks.run_message(run)
        response = await self.client.chat_postMessage(
            channel=run.channel_id, text=text, blocks=blocks.as_dicts(body), unfurl_links=False
        )
        return str(response["ts"])

    async def update_run(self, run: RunRecord) -> None:
        text, body = blocks.run_message(run)
        await self.client.chat_update(
            channel=run.channel_id, ts=run.message_ts, text=text, blocks=blocks.as_dicts(body)
        )

    async def post_in_run_thread(self, run: RunRecord, text: str) -> None:
        await self.client.chat_postMessage(
            channel=run.channel_id,
            thread_ts=run.message_ts,
            text=quote(text, OUTPUT_LIMIT),
            unfurl_links=False,
            unfurl_media=False,
        )

    async def post_run_output(self, run: RunRecord, output: str) -> None:
        await self.post_in_run_thread(run, output or "(the agent finished without output)")

    async def post_approval(self, run: RunRecord, call: CallRecord) -> str:
        text, body = blocks.approval_message(run, call, when(call.decided_at))
        response = await self.client.chat_postMessage(
            channel=run.channel_id, text=text, blocks=blocks.as_dicts(body), unfurl_links=False
        )
        ts = str(response["ts"])
        try:  # the link from the run thread is a convenience: its failure loses nothing
            await self.client.chat_postMessage(
                channel=run.channel_id,
                thread_ts=run.message_ts,
                text=f"Waiting for approval: <{blocks.permalink(run.channel_id, ts)}|{text}>",
                unfurl_links=False,
            )
        except Exception:
            log.warning("could not link approval %s from its run thread", call.approval_id)
        return ts

    async def update_approval(self, run: RunRecord, call: CallRecord) -> None:
        text, body = blocks.approval_message(run, call, when(call.decided_at))
        await self.client.chat_update(
            channel=call.channel_id or run.channel_id,
            ts=call.message_ts,
            text=text,
            blocks=blocks.as_dicts(body),
        )

    async def post_review(self, run: RunRecord, review_id: str, text: str) -> str:
        fallback, body = blocks.review_message(review_id, text)
        response = await self.client.chat_postMessage(
            channel=run.channel_id,
            thread_ts=run.message_ts,
            text=fallback,
            blocks=blocks.as_dicts(body),
        )
        return str(response["ts"])

    async def tell(self, channel: str, user: str, text: str, thread_ts: str = "") -> None:
        await self.client.chat_postEphemeral(
            channel=channel, user=user, text=text, thread_ts=thread_ts or None
        )
