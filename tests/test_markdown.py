"""An agent's Markdown as Slack mrkdwn (#20): formatting kept, and nothing in the agent's words
can become a mention, a channel ping or a link the bot did not make."""

from __future__ import annotations

import json
import re

import pytest
from agents import Agent

from bot.slack.delivery.streams import streamable
from bot.slack.markdown import safe_markdown, to_mrkdwn
from bot.testing.harness import BotHarness, wait_until
from bot.testing.models import SlowWriter
from bot.testing.slack_api import FakeSlackAPI
from bot.untrusted import escape
from tests.agents_for_tests import POLICY, Ledger, assistant_message, ops_agent
from tests.test_follow_ups import in_thread


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


# A link whose text reads as one address and opens another (#29, item 10) -----------------------

DECEPTIVE = "[https://bank.example/login](https://evil.example/phish)"
HONEST_MRKDWN = "<https://evil.example/phish>"  # Slack shows the address it opens
HONEST_MARKDOWN = "[https://evil.example/phish](https://evil.example/phish)"


@pytest.mark.parametrize(
    "label",
    [
        "https://bank.example/login", "bank.example", "log in at bank.example", "www.bank",
        "it@bank.example", "10.0.0.1", "bank\u200b.example", "bank\u3002example",
        "BANK.EXAMPLE/login",
    ],
)  # fmt: skip
def test_a_link_whose_text_looks_like_an_address_shows_the_address_it_opens(label: str) -> None:
    markdown = f"See [{label}](https://evil.example/phish) now."
    assert shown(markdown) == f"See {HONEST_MRKDWN} now."
    assert safe_markdown(markdown) == f"See {HONEST_MARKDOWN} now."


@pytest.mark.parametrize(
    "markdown",
    [
        '[https://bank.example](https://evil.example/phish "Your bank")',
        "[https://bank.example](<https://evil.example/phish>)",
    ],
)
def test_a_titled_or_bracketed_link_in_slacks_markdown_shows_its_address(markdown: str) -> None:
    assert safe_markdown(markdown) == HONEST_MARKDOWN


def test_a_link_whose_text_is_words_keeps_its_text() -> None:
    assert shown("[the dashboard](https://grafana.example/d/1)") == (
        "<https://grafana.example/d/1|the dashboard>"
    )
    assert safe_markdown("[v1.2 notes](https://x.example)") == "[v1.2 notes](https://x.example)"


def test_what_a_stream_sends_is_always_the_start_of_the_whole_answer() -> None:
    """A link is sent whole or not at all: what was streamed is never rewritten by the end."""
    answer = f"Log in: [log in at bank.example now](https://evil.example/x) then {DECEPTIVE} ok."
    whole = safe_markdown(answer)
    for end in range(len(answer) + 1):
        sent = streamable(answer[:end])
        assert whole.startswith(sent), (answer[:end], sent)
        assert "bank.example/login](" not in sent and "bank.example now](" not in sent


def links_of(text: str) -> list[tuple[str, str]]:
    """Slack mrkdwn links (url, text) and Markdown links (url, text) in `text`."""
    mrkdwn = [(u, t) for u, t in re.findall(r"<(https?://[^|>]+)\|([^>]*)>", text)]
    markdown = [(u, t) for t, u in re.findall(r"\[([^\]]*)\]\(([^)\s]*)\)", text)]
    return mrkdwn + markdown


def honest(text: str) -> bool:
    """No link in `text` reads as one address and opens another."""
    return all(t == u or "bank.example" not in t for u, t in links_of(text))


ANSWER = f"Done. Sign in again at {DECEPTIVE} and check {DECEPTIVE} once more, then rest."


@pytest.mark.parametrize("streams", [False, True], ids=["posted-then-updated", "slack-streaming"])
async def test_a_deceptive_link_never_reaches_slack_while_written(
    redis_url: str, streams: bool
) -> None:
    """The answer as it is written: Slack's own stream (start, appends, stop), or, where the
    workspace has none, the message posted with the words so far and updated in place."""
    model = SlowWriter([[assistant_message(ANSWER)]], pieces=0, gap=0.15)  # word by word
    agent = Agent(name="ops", instructions="You operate servers.", model=model)
    slack = FakeSlackAPI()
    slack.streams = streams
    async with BotHarness(
        redis_url, agent, POLICY, slack=slack, settings={"stream_answers": True}
    ) as bot:
        await bot.slack.command("status?", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        [final] = in_thread(bot, "Sign in again")
        answer = [  # the answer's calls: Slack's stream, or its message's posts and updates
            str(c.params.get("markdown_text") or c.params.get("text") or "")
            + json.dumps(c.params.get("blocks") or "")
            for c in slack.calls
            if c.method.endswith("Stream")
            or (c.method in ("chat.postMessage", "chat.update") and "Done." in str(c.params))
        ]
    sent = [s for s in answer if s != '""']
    assert len(sent) >= 2  # written in several calls (each link whole in one of them)
    assert all(honest(s) for s in sent), [s for s in sent if not honest(s)]
    assert honest(final.all_text())
    expected = HONEST_MARKDOWN if streams else HONEST_MRKDWN
    assert final.all_text().count(expected) >= 2


async def test_a_deceptive_link_in_a_posted_answer_shows_its_address(redis_url: str) -> None:
    agent, _ = ops_agent([[assistant_message(ANSWER)]], Ledger())
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("status?", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        [message] = await wait_until(lambda: in_thread(bot, "Sign in again"), what="the answer")
    assert message.text.count(HONEST_MRKDWN) == 2 and honest(message.all_text())
