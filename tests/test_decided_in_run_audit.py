"""Every decision made inside a run has its audit entry (#32, the hostile review's finding 3):
a call a rule approves by itself does not run while its `decided` entry cannot be stored (the
attempt stops as when its journal write fails, and the retry decides it again). Real
redis-server (and a real cluster), the real bot over signed requests; the failure is Redis's
own: a key of the wrong type where the audit stream lives."""

from __future__ import annotations

from typing import Any

import pytest
from agents import AgentHooks
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.store.trail.audit import AUDIT_STREAM
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import Ledger, ops_agent
from tests.test_decided_in_run import AUTO, finished


class BreakTheAuditTrail(AgentHooks[Any]):
    """As the approved tool is about to run (its `decided` entry not sent yet: it rides with
    the tool's journal write), the audit stream's key becomes a string: every XADD to it is
    refused (WRONGTYPE), as a key clobbered by another program's SET would make it."""

    def __init__(self) -> None:
        self.bot: BotHarness | None = None

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.bot is not None:
            bot, self.bot = self.bot, None
            await bot.runtime.service.store.redis.set(AUDIT_STREAM, "not a stream")


def restart_web_until_done(call: Any) -> list[Any]:
    """The model, from its input alone (a retried attempt asks it again): restart web (call
    c1), and once the tool's output is in, say it is done."""
    items = call.input if isinstance(call.input, list) else []
    if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items):
        return [assistant_message("restarted web")]
    return [function_call("restart_service", {"service": "web"}, call_id="c1")]


@pytest.mark.cluster_too
async def test_an_approval_whose_audit_entry_cannot_be_stored_does_not_run_its_tool(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent([], ledger)
    model = ScriptedModel([ModelStep.respond(restart_web_until_done) for _ in range(20)])
    agent.model = model
    hooks = BreakTheAuditTrail()
    agent.hooks = hooks
    async with BotHarness(redis_url, agent, AUTO, settings={"job_lease_seconds": 1}) as bot:
        store = bot.runtime.service.store
        hooks.bot = bot
        await bot.slack.command("restart web", user="U1", channel="C1")
        # The first attempt stopped without a verdict and its job was taken again: the retry
        # asked the model once more. The tool never ran meanwhile, and the run did not fail.
        await wait_until(lambda: len(model.calls) >= 2, what="the job retried")
        assert ledger.executed == []
        [run] = await store.recent_runs(bot.slack_api.team_id, "U1")
        assert run.status == "running", run
        run_id = run.run_id
        journal = await bot.runtime.service.journal.entries(run_id)
        assert all(e.get("status") != "executed" for e in journal.values()), journal
        # The trail is whole again: the next attempt decides the call again, audits it, runs it.
        await store.redis.delete(AUDIT_STREAM)
        seen = await finished(bot)
    assert ledger.executed == [("restart_service", {"service": "web"})]
    [decided] = seen.decided()
    assert decided["decision"] == "auto_approve" and decided["tool"] == "restart_service"
    assert decided["run_id"] == run_id and decided["rule"] == "routine-restarts"
