"""A Web API call formats no debug text the bot's log would drop (#32: slack_sdk wrote each
call's request and response into text whenever its own logger's level was unset, some 26 µs a
call); at DEBUG the log still has it. The real client against the Slack stand-in."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from bot.slack.api.webapi import build_client
from bot.testing.slack_api import FakeSlackAPI


class Shown(str):
    """A text that counts the times it was written out as a value (`repr`)."""

    times = 0

    def __repr__(self) -> str:
        Shown.times += 1
        return str.__repr__(self)


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
async def test_a_web_api_call_formats_debug_text_only_when_logged(
    level: int, caplog: pytest.LogCaptureFixture
) -> None:
    slack = FakeSlackAPI()
    await slack.start()
    try:
        async with aiohttp.ClientSession() as session:
            client = build_client("xoxb-test-token", slack.url, session)
            with caplog.at_level(level, logger="slack_sdk"):
                Shown.times = 0
                await client.chat_postMessage(channel="C1", text=Shown("deployed"))
        sent = [r for r in caplog.records if r.getMessage().startswith("Sending a request")]
        if level == logging.DEBUG:
            assert Shown.times > 0 and sent  # logged at DEBUG, as before
        else:
            assert Shown.times == 0 and not sent  # nothing formatted for a log that drops it
        assert [m.text for m in slack.messages.values()] == ["deployed"]
    finally:
        await slack.stop()
