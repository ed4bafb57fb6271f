"""OAuth distribution (#21): two workspaces install the app through Bolt's flow against the
stand-in (`/slack/install`, Slack's authorize page, `/slack/oauth_redirect`, `oauth.v2.access`);
each gets its own token, kept encrypted in Redis, and its own policy; one uninstalls and its
data is gone while the other's is untouched; its requests are refused after. Real Redis, the
real Bolt app over HTTP, signed requests."""

from __future__ import annotations

import asyncio
import html
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.service.authorize import NOT_SERVED, Authorizer
from bot.service.policy.rules import PolicyError, parse_policy
from bot.service.ports import Actor
from bot.slack.api.serving import Team
from bot.slack.blocks import APPROVE
from bot.slack.directory.groups import SlackGroups
from bot.store.installs.installations import TokenCipher, bot_key, workspace_of
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent
from tests.test_config import check

TEAM_A, TEAM_B = "T0AAA", "T0BBB"
POLICY = """
workspaces:
  T0AAA:
    channels:
      C0AAA: {starters: ["*"], approvers: [UA2]}
  T0BBB:
    defaults: {allow_self_approval: true}
    channels:
      C0BBB: {starters: ["*"], approvers: [UB1]}
"""
KEY = TokenCipher.new_key()


def distributed() -> dict[str, Any]:
    return {
        "slack_bot_token": None,
        "slack_client_id": "111.222",
        "slack_client_secret": "client-secret",
        "token_keys": KEY,
        "user_start_burst": 0, "channel_start_burst": 0, "user_open_runs": 0,
    }  # fmt: skip


async def install(bot: BotHarness, team: str) -> str:
    """An installer of `team` opens /slack/install, approves on Slack's page, comes back with
    the state cookie the install page set (Secure: a browser sends it over https; sent here by
    hand over the loopback's http); the page they end on."""
    bot.slack_api.install_as(team)
    async with aiohttp.ClientSession() as browser:
        async with browser.get(f"{bot.url}/slack/install") as page:
            assert page.status == 200
            link = re.search(r'href="([^"]*oauth/v2/authorize[^"]*)"', await page.text())
            cookie = page.headers["Set-Cookie"].split(";")[0]
        assert link is not None and cookie.startswith("slack-app-oauth-state=")
        authorize = html.unescape(link.group(1))
        assert authorize.startswith(bot.slack_api.url.removesuffix("api/"))  # Slack's host in use
        redirect = f"&redirect_uri={bot.url}/slack/oauth_redirect"
        async with browser.get(authorize + redirect, allow_redirects=False) as approved:
            assert approved.status == 302
            back = approved.headers["Location"]
        assert back.startswith(f"{bot.url}/slack/oauth_redirect?code=")
        async with browser.get(back, headers={"Cookie": cookie}) as landed:
            assert landed.status == 200, await landed.text()
            return await landed.text()


async def installed(bot: BotHarness) -> float:
    """`approval_bot_workspaces_installed` as `/metrics` shows it."""
    async with aiohttp.ClientSession() as http, http.get(f"{bot.url}/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith("approval_bot_workspaces_installed "):
                return float(line.split()[1])
    raise AssertionError("no approval_bot_workspaces_installed in /metrics")


def posted_in(slack: FakeSlackAPI, channel: str) -> list[Any]:
    return [
        c
        for c in slack.calls
        if c.method == "chat.postMessage" and c.params.get("channel") == channel
    ]


async def test_two_workspaces_install_and_one_uninstalls(redis_url: str) -> None:
    ledger = Ledger()
    agents = {
        name: ops_agent(
            [
                [function_call("restart_service", {"service": name}, call_id=f"c{name}")],
                [assistant_message(f"restarted {name}")],
            ],
            ledger,
            name=name,
        )[0]
        for name in ("a", "b")
    }
    async with BotHarness(redis_url, agents, POLICY, settings=distributed()) as bot:
        slack = bot.slack_api
        # Before any installation, a workspace's request is refused by Bolt: no token for it.
        refused = await bot.slack.command("run a restart", user="UA1", channel="C0AAA", team=TEAM_A)
        assert refused.status == 200
        assert "reinstall" in slack.responses[-1]["text"]
        assert "Thank you!" in await install(bot, TEAM_A)
        await install(bot, TEAM_B)
        tokens = {
            team: [t for t, owner in slack.issued.items() if owner == team]
            for team in (TEAM_A, TEAM_B)
        }
        assert all(len(found) == 1 for found in tokens.values()), tokens
        # Kept encrypted: no token in Redis in the clear.
        raw = aioredis.from_url(redis_url)
        stored = await raw.get(bot_key(workspace_of(None, TEAM_A)))
        assert stored is not None and tokens[TEAM_A][0].encode() not in stored
        await raw.aclose()

        assert await installed(bot) == 2.0
        # Each workspace's run: its card posted with its own token, under its own policy.
        sent = await bot.slack.command("run a restart", user="UA1", channel="C0AAA", team=TEAM_A)
        assert sent.status == 200
        [card_a] = await bot.wait_for_approvals(1)
        sent = await bot.slack.command("run b restart", user="UB1", channel="C0BBB", team=TEAM_B)
        assert sent.status == 200
        await bot.wait_for_approvals(2)
        assert {c.team for c in posted_in(slack, "C0AAA")} == {TEAM_A}
        assert {c.token for c in posted_in(slack, "C0AAA")} == set(tokens[TEAM_A])
        assert {c.team for c in posted_in(slack, "C0BBB")} == {TEAM_B}
        # B's policy has no C0AAA (A's channel): a start there by B's people is refused.
        other = await bot.slack.command("run b restart", user="UB1", channel="C0AAA", team=TEAM_B)
        assert "not" in other.text.lower() and ledger.executed == []

        raw = aioredis.from_url(redis_url)

        async def teams() -> list[str]:
            runs = [await raw.hget(k, "team_id") async for k in _run_keys(raw)]
            return sorted({r.decode() for r in runs if r is not None})

        assert await teams() == [TEAM_A, TEAM_B]
        # Workspace B removes the app: Slack revokes its token and tells the bot.
        slack.uninstall(TEAM_B)
        mark = len(slack.calls)
        assert (await bot.slack.uninstalled(team=TEAM_B)).status == 200

        async def b_forgotten() -> bool:
            return await teams() == [TEAM_A]  # B's runs gone, A's kept

        await wait_until(b_forgotten, what="workspace B's runs deleted")
        assert await raw.get(bot_key(workspace_of(None, TEAM_B))) is None
        assert await raw.get(bot_key(workspace_of(None, TEAM_A))) is not None
        await wait_until(lambda: _none_named(raw, TEAM_B), what="every key of B deleted")
        assert await installed(bot) == 1.0  # what /metrics says
        await raw.aclose()
        # B's next request is refused; A goes on: its card approved, its tool run, once.
        told = len(slack.responses)
        again = await bot.slack.command("run b restart", user="UB1", channel="C0BBB", team=TEAM_B)
        assert again.status == 200 and len(slack.responses) == told + 1
        assert "reinstall" in slack.responses[-1]["text"]
        approved = await bot.slack.click(
            APPROVE, card_a.button_value(APPROVE), user="UA2", channel="C0AAA", team=TEAM_A
        )
        assert approved.status == 200
        await wait_until(lambda: ledger.executed != [], what="A's tool")
        assert ledger.executed == [("restart_service", {"service": "a"})]
        await wait_until(lambda: _shows(slack, "C0AAA", "restarted a"), what="A's answer")
        # Nothing was sent for B after it left (no call with its revoked token, none refused).
        assert [c for c in slack.calls[mark:] if c.token in tokens[TEAM_B]] == []


async def _none_named(client: aioredis.Redis, team: str) -> bool:
    return [k async for k in client.scan_iter(match=f"*{team}*")] == []


async def _run_keys(client: aioredis.Redis) -> Any:
    async for key in client.scan_iter(match="ab:{*}:run"):
        yield key


def _shows(slack: FakeSlackAPI, channel: str, text: str) -> bool:
    return any(
        m.channel == channel and text in m.text + str(m.blocks) for m in slack.messages.values()
    )


async def test_a_token_near_expiry_is_refreshed_once_and_kept(redis_url: str) -> None:
    """Token rotation on: the installation's token expires within the rotation window, so the
    first request's authorization refreshes it (`oauth.v2.access`, grant_type=refresh_token);
    the card goes out with the new token, which is what Redis keeps. Then the bot's own
    lookup (the projector's, the App Home's) of a token about to expire refreshes it once
    however many calls ask at the same moment."""
    agent, _ = ops_agent(
        [[function_call("restart_service", {"service": "a"}, call_id="ca")]], Ledger()
    )
    slack = FakeSlackAPI()
    slack.rotation_seconds = 60  # within the 120 minutes before expiry a token is refreshed
    async with BotHarness(redis_url, agent, POLICY, slack=slack, settings=distributed()) as bot:
        await install(bot, TEAM_A)
        [first] = slack.issued
        # Tokens issued from now on last a day: once refreshed, a token is not refreshed again
        # by whatever else the bot looks up meanwhile (its projector, its App Home), however
        # the machine's load times those lookups.
        slack.rotation_seconds = 86400
        sent = await bot.slack.command("restart a", user="UA1", channel="C0AAA", team=TEAM_A)
        assert sent.status == 200
        await bot.wait_for_approvals(1)
        assert slack.refreshes == 1
        [token] = {call.token for call in posted_in(slack, "C0AAA")}  # run message and card
        assert token != first and slack.issued[token] == TEAM_A
        distribution = bot.runtime.distribution
        assert distribution is not None
        stored = await distribution.installations.async_find_bot(enterprise_id=None, team_id=TEAM_A)
        assert stored is not None and stored.bot_token == token

        # The bot's own lookups, for a token about to expire: one refresh for all of them.
        stored.bot_token_expires_at = int(time.time()) + 30
        await distribution.installations.async_save_bot(stored)
        distribution.tokens.forget(TEAM_A)
        found = await asyncio.gather(
            *(distribution.tokens.bot_token(Team(TEAM_A)) for _ in range(5))
        )
        assert slack.refreshes == 2
        assert all(slack.issued.get(token) == TEAM_A for token in found)
        again = await distribution.installations.async_find_bot(enterprise_id=None, team_id=TEAM_A)
        assert again is not None and again.bot_token in found and again.bot_token != token


async def test_a_revoked_bot_token_forgets_the_workspace(redis_url: str) -> None:
    agent, _ = ops_agent(
        [[function_call("restart_service", {"service": "a"}, call_id="ca")]], Ledger()
    )
    async with BotHarness(redis_url, agent, POLICY, settings=distributed()) as bot:
        await install(bot, TEAM_A)
        sent = await bot.slack.command("restart a", user="UA1", channel="C0AAA", team=TEAM_A)
        assert sent.status == 200
        await bot.wait_for_approvals(1)
        raw = aioredis.from_url(redis_url)
        assert [k async for k in _run_keys(raw)] != []
        bot.slack_api.uninstall(TEAM_A)
        assert (await bot.slack.bot_token_revoked(team=TEAM_A)).status == 200
        await wait_until(lambda: _none_named(raw, TEAM_A), what="every key of A deleted")
        await wait_until(lambda: _no_runs(raw), what="A's runs deleted")
        assert await raw.get(bot_key(workspace_of(None, TEAM_A))) is None
        await raw.aclose()


async def _no_runs(client: aioredis.Redis) -> bool:
    return [k async for k in _run_keys(client)] == []


def test_a_policy_per_workspace_and_what_it_refuses() -> None:
    """`workspaces:` gives each team its own policy (defaults inherited unless set); a team
    not listed is not served; channels belong in the sections, not at the top as well."""
    policy = parse_policy(POLICY)
    a, b = policy.for_team(TEAM_A), policy.for_team(TEAM_B)
    assert list(a.channels) == ["C0AAA"] and list(b.channels) == ["C0BBB"]
    assert a.defaults.allow_self_approval is False and b.defaults.allow_self_approval is True
    assert policy.for_team("T0ZZZ").channels == {}
    authorizer = Authorizer(SlackGroups(AsyncWebClient(token="x")), installed=True)
    assert authorizer.served(policy, Actor(TEAM_A, "UA1")).allowed
    assert authorizer.served(policy, Actor("T0ZZZ", "UZ1")).reason == NOT_SERVED
    # A team's own policy serves only that team.
    assert authorizer.served(a, Actor(TEAM_B, "UB1")).reason == NOT_SERVED
    with pytest.raises(PolicyError) as both:
        parse_policy(
            "channels:\n  C1: {approvers: [U1]}\n"
            "workspaces:\n  T0AAA:\n    channels:\n      C2: {approvers: [U2]}\n"
        )
    assert "channels go in each workspace's section" in str(both.value)
    with pytest.raises(PolicyError) as empty:
        parse_policy("workspaces:\n  T0AAA:\n    defaults: {}\n")
    assert "workspaces.T0AAA" in str(empty.value) and "at least one channel" in str(empty.value)
    with pytest.raises(PolicyError) as bad_id:
        parse_policy("workspaces:\n  acme:\n    channels:\n      C2: {approvers: [U2]}\n")
    assert "is not a team id" in str(bad_id.value)


def test_check_says_what_distribution_needs(tmp_path: Path) -> None:
    """OAuth distribution's settings, checked at once: both credentials, a key that is a key,
    no fixed token beside them, HTTP mode."""
    good = check(
        tmp_path, POLICY, SLACK_CLIENT_ID="111.222", SLACK_CLIENT_SECRET="s3cret-value",
        SLACK_SIGNING_SECRET="shh", APPROVAL_BOT_TOKEN_KEYS=KEY, OPENAI_API_KEY="sk-test",
    )  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert "s3cret-value" not in good.stdout + good.stderr and KEY not in good.stdout
    bad = check(
        tmp_path, POLICY, SLACK_CLIENT_ID="111.222", SLACK_BOT_TOKEN="xoxb-1",
        SLACK_SIGNING_SECRET="shh", APPROVAL_BOT_TOKEN_KEYS="not-a-key", OPENAI_API_KEY="sk-t",
    )  # fmt: skip
    assert bad.returncode == 1
    assert "needs both SLACK_CLIENT_ID and SLACK_CLIENT_SECRET" in bad.stderr
    assert "SLACK_BOT_TOKEN and SLACK_CLIENT_ID are both set" in bad.stderr
    assert "APPROVAL_BOT_TOKEN_KEYS holds something that is not a key" in bad.stderr
