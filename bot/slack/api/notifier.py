"""The service's `Notifier`: private answers to the person who acted, over Slack's Web API.

Everything else (run messages, cards, results, reviews) is posted by the projector."""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.api.serving import serving


class SlackNotifier:
    """Says something only one person can see: an ephemeral message in the channel where they
    acted, or a direct message when they acted where there is no channel (the App Home)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def tell(
        self, channel: str, user: str, text: str, thread_ts: str = "", *, team: str = ""
    ) -> None:
        if team:
            with serving(team):  # that workspace's token
                await self._tell(channel, user, text, thread_ts)
        else:  # answering a request: its workspace is being served
            await self._tell(channel, user, text, thread_ts)

    async def _tell(self, channel: str, user: str, text: str, thread_ts: str) -> None:
        if not channel:
            opened = await self.client.conversations_open(users=user)
            await self.client.chat_postMessage(channel=str(opened["channel"]["id"]), text=text)
            return
        await self.client.chat_postEphemeral(
            channel=channel, user=user, text=text, thread_ts=thread_ts or None
        )
