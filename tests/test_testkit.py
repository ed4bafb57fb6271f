"""The test kit we ship: docs/testing-your-agents.md's first example, used exactly as printed."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from bot import ask_human
from bot.slack.blocks import ANSWER
from bot.testing.harness import BotHarness
from tests.forkserver import run_python

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "test_my_agent.py"


def test_the_docs_show_the_example_that_runs() -> None:
    page = (ROOT / "docs" / "testing-your-agents.md").read_text()
    assert EXAMPLE.read_text() in re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)


def test_the_example_runs_as_is_in_a_project_of_its_own(tmp_path: Path) -> None:
    """A user's project: no conftest, no pytest settings, no pytest-asyncio; only the plugin."""
    (tmp_path / "test_my_agent.py").write_text(EXAMPLE.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVAL_BOT_"))}
    env["PYTHONPATH"] = str(ROOT)
    result = run_python(
        [
            "-m", "pytest", "-q", "-p", "bot.testing.pytest_plugin",
            "-p", "no:asyncio", "-p", "no:cacheprovider", "test_my_agent.py",
        ],
        cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


LEAKY_TEST = """
import subprocess
import sys


def test_leaks_a_process(tmp_path):
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], cwd=tmp_path,
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    print("LEAKED", sleeper.pid)
"""


def test_a_process_left_running_by_a_test_is_named(tmp_path: Path) -> None:
    (tmp_path / "test_leaky.py").write_text(LEAKY_TEST)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = run_python(
        [
            "-m", "pytest", "-s", "-p", "bot.testing.pytest_plugin",
            "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"), "test_leaky.py",
        ],
        cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    [pid] = [int(found) for found in re.findall(r"LEAKED (\d+)", result.stdout)]
    try:
        assert "processes left running by tests" in result.stdout
        assert re.search(rf"pid {pid} python\S* in {tmp_path / 'base'}/", result.stdout)
    finally:
        os.kill(pid, signal.SIGTERM)


# The kit does what its documentation shows (#30 part 3) ----------------------------------------

POLICY = "channels: {C1: {approvers: [U2]}}"


def careful_ops(*steps: list[Any]) -> Agent[Any]:
    """An ops agent with one gated tool and `ask_human`, on a scripted model."""

    @function_tool(needs_approval=True)
    def restart_service(service: str) -> str:
        """Restart a service."""
        return f"restarted {service}"

    model = ScriptedModel(list(steps))
    return Agent(name="ops", instructions="x", model=model, tools=[restart_service, ask_human])


ASKS_FIRST = (
    [function_call("ask_human", {"question": "Which service?"}, call_id="q1")],
    [function_call("restart_service", {"service": "web"}, call_id="c1")],
    [assistant_message("Restarted web.")],
)


async def test_start_and_wait_returns_the_question_a_run_asks_first(redis_url: str) -> None:
    async with BotHarness(redis_url, careful_ops(*ASKS_FIRST), POLICY) as bot:
        card = await bot.start_and_wait("restart the broken one", user="U1", channel="C1")
        assert "Which service?" in card.all_text()
        assert ANSWER in card.action_ids()
        await bot.answer(card, user="U1", text="web")
        [approval] = await bot.wait_for_approvals(1)
        await bot.click(approval, "approval_approve", user="U2")
        await bot.wait_for_status("finished")
    assert "Restarted web." in [m.text for m in bot.run_thread()]


async def test_a_timeout_says_what_the_run_waits_on(redis_url: str) -> None:
    async with BotHarness(redis_url, careful_ops(*ASKS_FIRST), POLICY) as bot:
        await bot.slack.command("restart the broken one", user="U1", channel="C1")
        [question] = await bot.wait_for_questions(1)
        with pytest.raises(TimeoutError) as waited:
            await bot.wait_for_approvals(1, timeout=0.5)
    said = str(waited.value)
    assert "waiting for 1 pending approval message(s)" in said
    assert "is paused, waiting on a question ask_human" in said
    assert question.button_value(ANSWER) in said  # the call's id
    assert "0 approval card(s) and 1 question card(s)" in said


async def test_start_and_wait_fails_at_once_when_the_run_ends_or_is_refused(
    redis_url: str,
) -> None:
    agent = careful_ops([assistant_message("Nothing to do.")])
    async with BotHarness(redis_url, agent, POLICY) as bot:
        with pytest.raises(AssertionError, match=r"the run ended\. Run \w+ .* is finished"):
            await bot.start_and_wait("anything?", user="U1", channel="C1")
        with pytest.raises(AssertionError, match="the start was refused") as refused:
            await bot.start_and_wait("anything?", user="U1", channel="C9")  # not in the policy
    assert "A start was refused: " in str(refused.value)
    assert "where the bot is set up. Slack shows 0 approval card(s)" in str(refused.value)


async def test_reply_and_edit_act_as_a_person_would(redis_url: str) -> None:
    steps = (
        [function_call("restart_service", {"service": "db"}, call_id="c1")],
        [function_call("restart_service", {"service": "web"}, call_id="c2")],
        [assistant_message("Restarted web.")],
    )
    async with BotHarness(redis_url, careful_ops(*steps), POLICY) as bot:
        card = await bot.start_and_wait("restart", user="U1", channel="C1")
        await bot.reply(card, "looks wrong to me", user="U2")  # a comment, kept for Reject
        sent = await bot.edit(card, user="U2", service="web")
        assert sent.status == 200 and sent.text == "", sent
        await bot.wait_for_status("finished")
    assert "Restarted web." in [m.text for m in bot.run_thread()]
