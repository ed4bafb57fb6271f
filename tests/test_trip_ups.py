"""The README's own steps, followed literally: what used to trip a new user up."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bot.config import ENV_FILE_VARIABLE
from bot.slack.render.base import permalink, use_slack_api
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import POLICY, Ledger, delete_then_say, ops_agent
from tests.forkserver import run_bot, run_python

ROOT = Path(__file__).resolve().parents[1]


def test_permalinks_follow_the_slack_host_in_use() -> None:
    try:
        use_slack_api("https://slack-gov.com/api/")
        assert permalink("C1", "1700000000.000100") == (
            "https://slack-gov.com/archives/C1/p1700000000000100"
        )
        use_slack_api("http://127.0.0.1:8080/api/")
        assert permalink("C1", "1.2").startswith("http://127.0.0.1:8080/archives/C1/p12")
    finally:
        use_slack_api("https://slack.com/api/")
    assert permalink("C1", "1.2") == "https://slack.com/archives/C1/p12"


async def test_approval_cards_link_to_the_run_on_the_slack_in_use(redis_url: str) -> None:
    agent, _ = ops_agent(delete_then_say("/tmp/x", "done"), Ledger())
    try:
        async with BotHarness(redis_url, agent, POLICY) as bot:
            approval = await bot.start_and_wait("clean /tmp/x", user="U1")
            host = bot.slack_api.url.removesuffix("/").removesuffix("/api")
            run = bot.run_message()
            link = f"{host}/archives/C1/p{run.ts.replace('.', '')}"
            assert f"<{link}|run thread>" in approval.all_text()
            # The run message links the cards it waits for (updated once the card's ts is known).
            card_link = f"{host}/archives/C1/p{approval.ts.replace('.', '')}"
            waiting = await wait_until(
                lambda: (text := bot.run_message().all_text()) and card_link in text and text,
                what="the run message to link the card",
            )
            assert "https://slack.com" not in approval.all_text() + waiting
    finally:
        use_slack_api("https://slack.com/api/")


def run_cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m bot ...` in `cwd`, with only the bot settings given here (and the test
    session's own environment: the plugin's APPROVAL_BOT_ENV_FILE among them)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "REDIS"))}
    base = {k: v for k, v in base.items() if k == ENV_FILE_VARIABLE or "APPROVAL_BOT_" not in k}
    base.update(PYTHONPATH=str(ROOT), **env)
    return run_bot(list(args), env=base, cwd=cwd)


def test_tests_never_read_a_dotenv_file(tmp_path: Path) -> None:
    """After `cp .env.example .env` the suite must behave exactly as before."""
    (tmp_path / ".env").write_text((ROOT / ".env.example").read_text())
    (tmp_path / "policy.yml").write_text(POLICY)
    assert os.environ.get(ENV_FILE_VARIABLE) == ""  # set for the whole session by the plugin
    ignored = run_cli(tmp_path, "check")
    assert ignored.returncode == 1
    assert "SLACK_BOT_TOKEN is not set" in ignored.stderr
    assert "SLACK_SIGNING_SECRET is not set" in ignored.stderr
    # Outside tests the bot still reads .env from its working directory.
    read = run_cli(tmp_path, "check", **{ENV_FILE_VARIABLE: ".env"})
    assert "SLACK_BOT_TOKEN is not set" not in read.stderr
    assert "SLACK_SIGNING_SECRET is not set" not in read.stderr


def console_script(tmp_path: Path) -> Path:
    """Like the installed `approval-bot`: a script elsewhere, so `sys.path[0]` is not the cwd."""
    script = tmp_path / "bin" / "approval-bot"
    script.parent.mkdir()
    script.write_text("import sys\nfrom bot.cli import main\nsys.exit(main())\n")
    return script


def test_agents_in_the_working_directory_are_importable(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "myteam").mkdir(parents=True)
    (project / "myteam" / "__init__.py").write_text("")
    (project / "myteam" / "agents.py").write_text(
        "from agents import Agent\nfrom agents.testing import ScriptedModel\n"
        "agents = {'dba': Agent(name='dba', model=ScriptedModel([]))}\n"
    )
    (project / "policy.yml").write_text(POLICY)
    script = console_script(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVAL_BOT_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        SLACK_BOT_TOKEN="xoxb-1",
        SLACK_SIGNING_SECRET="s",
        APPROVAL_BOT_AGENTS="myteam.agents:agents",
    )
    # `python <script>`, as the console script runs, forked (its `sys.path` starts with the
    # script's directory, not the working directory, as an interpreter's does).
    run = [str(script), "check"]
    result = run_python(run, cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    assert "OK: agents dba (default dba)" in result.stdout

    # From elsewhere, the error says which module, from where, and what to do.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env["APPROVAL_BOT_POLICY"] = str(project / "policy.yml")
    failed = run_python(run, cwd=elsewhere, env=env)
    assert failed.returncode == 1
    assert "cannot import 'myteam.agents'" in failed.stderr
    assert f"looked in the working directory {elsewhere}" in failed.stderr
    assert "Run the bot from the directory that contains 'myteam'" in failed.stderr


def test_a_missing_dependency_of_the_agents_module_is_named(tmp_path: Path) -> None:
    (tmp_path / "team_with_a_gap.py").write_text("import not_installed_anywhere\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVAL_BOT_"))}
    env.update(PYTHONPATH=str(ROOT), APPROVAL_BOT_AGENTS="team_with_a_gap:agents")
    result = run_python([str(console_script(tmp_path)), "check"], cwd=tmp_path, env=env)
    assert "'team_with_a_gap' imports 'not_installed_anywhere', which is not installed" in (
        result.stderr
    )
