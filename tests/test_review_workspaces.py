"""The multi-workspace review (#32, helper `review2`): installed through OAuth, the bot serves
only the workspaces its policy names. Anyone can install a distributed app (its install page is
public), so a Slack Connect partner that installed it was served, by the host's own channel
rules, in the channels the two share: its people started the host's agents there and ran their
ungated tools (and, with approvers "*", approved the gated ones). Real Redis, the real Bolt app
over HTTP, signed requests, the OAuth flow against the Slack stand-in."""

from __future__ import annotations

from pathlib import Path

from bot.service.authorize import NOT_NAMED, Authorizer
from bot.service.policy.rules import parse_policy
from bot.service.ports import Actor
from bot.slack.blocks import APPROVE
from bot.testing.harness import BotHarness
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent
from tests.test_config import check
from tests.test_oauth import KEY, TEAM_A, TEAM_B, distributed, install

SHARED = "C0SHARED"  # a Slack Connect channel: the same id in both organizations
# The host's policy: its own people and channel, no `workspaces:` section, no `workspace:`.
HOST_POLICY = f"""
channels:
  {SHARED}: {{starters: ["*"], approvers: ["*"]}}
"""


async def test_a_partner_that_installs_the_app_is_not_served_in_a_shared_channel(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [function_call("read_logs", {"path": "/secrets"}, call_id="r1")],
            [function_call("delete_logs", {"path": "/a"}, call_id="c1")],
            [assistant_message("ok")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, HOST_POLICY, settings=distributed()) as bot:
        slack = bot.slack_api
        slack.channel_members[SHARED] = ["UA1", "UA2", "UB1", "UB2"]  # both organizations
        await install(bot, TEAM_A)  # the host
        await install(bot, TEAM_B)  # the partner, through the same public install page
        sent = await bot.slack.command("read the secrets", user="UB1", channel=SHARED, team=TEAM_B)
        assert sent.status == 200
        await bot.idle()
        cards = [m for m in slack.messages.values() if APPROVE in str(m.blocks)]
        for card in cards:  # (the old code: the partner's colleague approves the delete)
            value = next(
                e["value"]
                for b in card.blocks
                for e in b.get("elements", [])
                if e.get("action_id") == APPROVE
            )
            await bot.slack.click(APPROVE, value, user="UB2", channel=SHARED, team=TEAM_B)
        await bot.idle()
        assert NOT_NAMED in sent.text
        assert slack.top_level() == []
        entries = await bot.audit()
    assert ledger.executed == []
    assert [e["team"] for e in entries if e["kind"] == "start_refused"] == [TEAM_B]


def test_installed_the_bot_serves_the_workspaces_its_policy_names() -> None:
    """A section per team, or a top-level `workspace:` (a team, or a Grid org); a policy that
    names none serves nobody, with a sentence that says why."""
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.slack.directory.groups import SlackGroups

    authorizer = Authorizer(SlackGroups(AsyncWebClient(token="x")), installed=True)
    host, partner = Actor(TEAM_A, "UA1"), Actor(TEAM_B, "UB1")
    unnamed = parse_policy(HOST_POLICY)
    assert authorizer.served(unnamed, host).reason == NOT_NAMED
    assert authorizer.served(unnamed, partner).reason == NOT_NAMED
    team = parse_policy(f"workspace: {{team_id: {TEAM_A}}}\n{HOST_POLICY}")
    assert authorizer.served(team, host).allowed and not authorizer.served(team, partner).allowed
    org = parse_policy(f"workspace: {{enterprise_id: E0ORG}}\n{HOST_POLICY}")
    assert authorizer.served(org, Actor(TEAM_A, "UA1", "E0ORG")).allowed
    assert not authorizer.served(org, partner).allowed


def test_check_says_an_installed_bot_s_policy_must_name_its_workspaces(tmp_path: Path) -> None:
    result = check(
        tmp_path, HOST_POLICY, SLACK_CLIENT_ID="111.222", SLACK_CLIENT_SECRET="s3cret-value",
        SLACK_SIGNING_SECRET="shh", APPROVAL_BOT_TOKEN_KEYS=KEY, OPENAI_API_KEY="sk-test",
    )  # fmt: skip
    assert result.returncode == 1
    assert "names no workspace" in result.stderr
