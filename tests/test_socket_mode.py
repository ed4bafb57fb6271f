"""Socket Mode end to end: the bot connects to the stand-in's websocket (the URL comes from
`apps.connections.open`), receives a slash command and a click as envelopes, acknowledges
them, and runs the approval loop exactly as over HTTP."""

from __future__ import annotations

import asyncio

from pydantic import SecretStr

from bot.config import Settings
from bot.engine.registry import AgentRegistry
from bot.runtime import BotRuntime, serve_socket
from bot.service.policy.source import PolicySource
from bot.slack.blocks import APPROVE
from bot.testing.harness import BOT_TOKEN, wait_until
from bot.testing.requests import SlackRequests
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import POLICY, Ledger, delete_then_say, ops_agent


async def test_socket_mode_runs_the_approval_loop(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say(), ledger)
    async with FakeSlackAPI() as slack:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            slack_bot_token=SecretStr(BOT_TOKEN),
            slack_app_token=SecretStr("xapp-test"),
            slack_api_url=slack.url,
            redis_url=redis_url,
        )
        runtime = BotRuntime(
            settings,
            registry=AgentRegistry.from_value(agent),
            policies=PolicySource.from_text(POLICY),
            socket_mode=True,
        )
        stop = asyncio.Event()
        serving = asyncio.create_task(serve_socket(runtime, stop))
        try:
            await wait_until(lambda: slack.sockets, what="a Socket Mode connection")
            payloads = SlackRequests("unused", "unused")  # builds the same payloads as HTTP
            ack = await slack.socket_send(
                "slash_commands", payloads.command_fields("clean up", user="U1", channel="C1")
            )
            assert "envelope_id" in ack and "text" not in (ack.get("payload") or {})
            [approval] = await wait_until(
                lambda: [m for m in slack.approval_messages() if m.action_ids()],
                what="the approval message",
            )
            click = payloads.click_payload(
                APPROVE, approval.button_value(APPROVE), user="U2", channel="C1"
            )
            await slack.socket_send("interactive", click)
            await wait_until(
                lambda: any(m.text == "ok" for m in slack.messages.values()),
                what="the run's output",
            )
            refused = await slack.socket_send(
                "slash_commands", payloads.command_fields("hi", user="U1", channel="C9")
            )
            assert "not enabled in this channel" in refused["payload"]["text"]
        finally:
            stop.set()
            await serving
    assert ledger.executed == [("delete_logs", {"path": "/a"})]
