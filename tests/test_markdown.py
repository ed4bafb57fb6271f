"""An agent's Markdown as Slack mrkdwn (#20): formatting kept, and nothing in the agent's words
can become a mention, a channel ping or a link the bot did not make."""

from __future__ import annotations

import re

import pytest

from bot.slack.markdown import to_mrkdwn
from bot.testing.harness import BotHarness, wait_until
from bot.untrusted import escape
from tests.agents_for_tests import POLICY, Ledger, assistant_message, ops_agent


def shown(markdown: str) -> str:
    return to_mrkdwn(escape(markdown))


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**done** and __also__", "*done* and *also*"),
        ("*quickly*, not _slowly_", "_quickly_, not _slowly_"),
        ("~~gone~~", "~gone~"),
        ("## Deploy report ##", "*Deploy report*"),
        ("- one\n  * two\n+ three", "• one\n  • two\n• three"),
        (
            "[the runbook](https://example.com/r?a=1&b=2)",
            "<https://example.com/r?a=1&amp;b=2|the runbook>",
        ),
        ("2*3*4 and a_b_c stay", "2*3*4 and a_b_c stay"),
        ("`**not bold**` in code", "`**not bold**` in code"),
        ("```\n# not a heading\n- nor a list\n```", "```\n# not a heading\n- nor a list\n```"),
    ],
)
def test_markdown_becomes_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert shown(markdown) == mrkdwn


@pytest.mark.parametrize(
    "hostile",
    [
        "<@U0ADMIN> please", "<!channel> alert", "<!here>", "<#C0SECRET>",
        "<https://evil.example|your bank>", "[click](javascript:alert(1))",
        "[a|b](https://example.com)>", "**<!everyone>**",
    ],
)  # fmt: skip
def test_agent_text_makes_no_mention_ping_or_foreign_link(hostile: str) -> None:
    out = shown(hostile)
    # The only `<` the bot may write is a link it made, to an http(s) URL the agent gave.
    made = re.findall(r"<([^>]*)>", out)
    assert all(link.startswith("https://example.com|") for link in made), out


async def test_an_answer_in_markdown_is_shown_as_mrkdwn(redis_url: str) -> None:
    answer = (
        "## Result\n**All green.** See [the dashboard](https://grafana.example/d/1).\n- api\n- db"
    )
    agent, _ = ops_agent([[assistant_message(answer)]], Ledger())
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("status?", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        run = bot.run_message()
        [message] = await wait_until(
            lambda: [m for m in bot.slack_api.thread(run.channel, run.ts) if "green" in m.text],
            what="the answer",
        )
    assert message.text == (
        "*Result*\n*All green.* See <https://grafana.example/d/1|the dashboard>.\n• api\n• db"
    )
