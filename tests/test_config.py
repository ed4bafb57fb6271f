"""`approval-bot check`, the policy file and the agents setting: every problem, said plainly."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.clock import SYSTEM_CLOCK
from bot.config import Settings
from bot.engine.registry import AgentLoadError, AgentRegistry
from bot.service.authorize import Authorizer, Installation
from bot.service.judgement import Judgement
from bot.service.policy.rules import PolicyError, load_policy, parse_policy
from bot.service.policy.source import PolicySource
from bot.service.ports import Actor
from bot.slack.directory.groups import SlackGroups
from bot.store.records import RunRecord
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import POLICY
from tests.forkserver import run_bot

ROOT = Path(__file__).resolve().parents[1]


def base_env(tmp_path: Path, policy: str | None, **env: str) -> dict[str, str]:
    prefixes = ("SLACK_", "APPROVAL_BOT_", "REDIS", "OPENAI_API_KEY")
    base = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    policy_path = tmp_path / "policy.yml"
    if policy is not None:
        policy_path.write_text(policy)
    base.update({"APPROVAL_BOT_POLICY": str(policy_path), "PYTHONPATH": str(ROOT), **env})
    return base


def check(tmp_path: Path, policy: str | None, **env: str) -> subprocess.CompletedProcess[str]:
    base = base_env(tmp_path, policy, **env)
    return run_bot(["check"], env=base, cwd=tmp_path)


def test_check_passes_a_good_configuration(tmp_path: Path) -> None:
    result = check(
        tmp_path,
        POLICY,
        SLACK_BOT_TOKEN="xoxb-secret-value",
        SLACK_SIGNING_SECRET="shh",
        OPENAI_API_KEY="sk-test-key",
    )
    assert result.returncode == 0, result.stderr
    assert "OK: agents ops, janitor (default ops)" in result.stdout
    assert "xoxb-secret-value" not in result.stdout + result.stderr


def test_check_lists_every_problem(tmp_path: Path) -> None:
    policy = "defaults:\n  allow_self_approval: maybe\nchannels:\n  C1:\n    approvers: [bob]\n"
    result = check(
        tmp_path, policy, APPROVAL_BOT_AGENTS="no_such_module:agents", OPENAI_API_KEY="sk-test"
    )
    assert result.returncode == 1
    err = result.stderr
    assert "5 problem(s) found" in err
    assert "SLACK_BOT_TOKEN is not set" in err
    assert "SLACK_SIGNING_SECRET is not set" in err
    assert "defaults.allow_self_approval" in err
    assert "'bob' is not a user id" in err
    assert "cannot import 'no_such_module'" in err


def test_check_explains_a_missing_policy_file(tmp_path: Path) -> None:
    result = check(tmp_path, None, SLACK_BOT_TOKEN="x", SLACK_APP_TOKEN="y")
    assert result.returncode == 1
    assert "not found" in result.stderr and "approvers: [U111, U222]" in result.stderr


def test_policy_rejects_typos_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as typo:
        parse_policy("channels:\n  C1:\n    aprovers: [U1]\n")
    assert any("aprovers" in p for p in typo.value.problems)
    with pytest.raises(PolicyError):
        parse_policy("")
    with pytest.raises(PolicyError):
        parse_policy("channels: {}\n")
    with pytest.raises(PolicyError):
        load_policy(tmp_path / "absent.yml")


async def test_policy_rules() -> None:
    policy = parse_policy(
        POLICY + "  C2:\n    starters: [U5]\n    approvers: ['*']\n    allow_self_approval: true\n"
    )
    async with FakeSlackAPI() as slack:
        groups = SlackGroups(AsyncWebClient(token="xoxb-t", base_url=slack.url))
        authorizer = Authorizer(groups, Installation(team_id="T1"))

        async def start(user: str, channel: str) -> bool:
            actor = Actor(team_id="T1", user_id=user)
            return (await authorizer.may_start(policy, actor, channel, "ops")).allowed

        assert await start("U9", "C1")
        assert not await start("U9", "C2")
        assert not await start("U5", "C3")

        judgement = Judgement(PolicySource.from_text(POLICY), authorizer, SYSTEM_CLOCK)

        async def decide(user: str, channel: str, starter: str = "U1", team: str = "T1") -> bool:
            rule = policy.rule_for(channel=channel, agent="ops", tool="t")
            run = RunRecord("r", team_id="T1", user_id=starter, channel_id=channel,
                            agent_name="ops", task="t")  # fmt: skip
            verdict = await judgement.person(
                policy, rule, Actor(team_id=team, user_id=user), run, "t", asked_by=starter
            )
            return verdict.allowed

        assert await decide("U2", "C1") and not await decide("U9", "C1")
        assert not await decide("U2", "C1", starter="U2")  # self-approval off by default
        assert await decide("U5", "C2", starter="U5")  # ... but allowed in C2
        assert await decide("U9", "C2") and not await decide("U9", "C2", team="T2")


def test_agents_setting_errors_are_plain() -> None:
    with pytest.raises(AgentLoadError, match=r"package\.module:attribute"):
        AgentRegistry.load("bot.examples.agents")
    with pytest.raises(AgentLoadError, match="has no attribute 'nope'"):
        AgentRegistry.load("bot.examples.agents:nope")
    with pytest.raises(AgentLoadError, match=r"not an agents\.Agent"):
        AgentRegistry.from_value({"x": 42})
    with pytest.raises(AgentLoadError, match="without spaces"):
        AgentRegistry.from_value({"two words": AgentRegistry.load("bot.examples.agents:ops")})
    registry = AgentRegistry.load("bot.examples.agents:agents")
    assert registry.default_name == "ops"
    assert AgentRegistry.from_value(lambda: registry.agents).fingerprints == registry.fingerprints


def test_check_catches_what_matters_and_lists_it_all_at_once(tmp_path: Path) -> None:
    """`cp .env.example .env` and `cp policy.example.yml policy.yml`, nothing filled in, plus
    the typical slips: a badly typed number, a made-up Redis URL, a file URL for Slack."""
    (tmp_path / ".env").write_text((ROOT / ".env.example").read_text())
    result = check(
        tmp_path,
        (ROOT / "policy.example.yml").read_text(),
        APPROVAL_BOT_ENV_FILE=".env",
        APPROVAL_BOT_POLICY="policy.yml",
        APPROVAL_BOT_MAX_TURNS="many",
        APPROVAL_BOT_WORKER_CONCURRENCY="0",
        REDIS_URL="foo://bar",
        SLACK_API_URL="file:///etc/passwd",
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    problems = "\n".join(lines)
    assert "APPROVAL_BOT_MAX_TURNS: Input should be a valid integer" in problems
    assert "APPROVAL_BOT_WORKER_CONCURRENCY: Input should be greater than or equal to 1" in problems
    assert "SLACK_BOT_TOKEN still holds a placeholder" in problems
    assert "SLACK_SIGNING_SECRET still holds a placeholder" in problems
    assert "REDIS_URL='foo://bar' is not a Redis URL" in problems
    assert "SLACK_API_URL='file:///etc/passwd/' must be an http(s) URL" in problems
    assert "example ids C0123ABC, U111, U222" in problems
    assert "OPENAI_API_KEY is not set, and agent(s) ops, janitor use an OpenAI model" in problems
    assert f"{len(lines)} problem(s) found" in result.stderr
    assert len(lines) == 8
    assert "Traceback" not in result.stderr


def test_check_pings_redis_and_hides_its_password(tmp_path: Path, redis_url: str) -> None:
    good = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "OPENAI_API_KEY": "sk-1"}
    assert check(tmp_path, POLICY, REDIS_URL=redis_url, **good).returncode == 0
    down = check(tmp_path, POLICY, REDIS_URL="redis://:hunter2@127.0.0.1:1/0", **good)
    assert down.returncode == 1
    assert "REDIS_URL='redis://:***@127.0.0.1:1/0': Redis does not answer" in down.stderr
    assert "hunter2" not in down.stdout + down.stderr
    placeholder = check(tmp_path, POLICY, **{**good, "OPENAI_API_KEY": "sk-..."})
    assert "OPENAI_API_KEY still holds a placeholder" in placeholder.stderr
    wrong_kind = check(tmp_path, POLICY, **{**good, "SLACK_BOT_TOKEN": "xapp-1-A"})
    assert "SLACK_BOT_TOKEN should start with xoxb-" in wrong_kind.stderr
    assert "xapp-1-A" not in wrong_kind.stderr


def test_agents_with_their_own_models_need_no_openai_key(tmp_path: Path) -> None:
    result = check(
        tmp_path,
        POLICY,
        SLACK_BOT_TOKEN="xoxb-1",
        SLACK_SIGNING_SECRET="s",
        APPROVAL_BOT_AGENTS="tests.stateless_agents:agents",
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("command", [["serve", "--http", "--port", "1"], ["worker"]])
def test_serve_and_worker_answer_with_the_same_list(tmp_path: Path, command: list[str]) -> None:
    env = base_env(tmp_path, POLICY, SLACK_BOT_TOKEN="xoxb-your-bot-token",
                   REDIS_URL="redis://127.0.0.1:1/0", APPROVAL_BOT_MAX_TURNS="x")  # fmt: skip
    result = run_bot(command, env=env, cwd=tmp_path)
    assert result.returncode == 1
    err = result.stderr
    assert "cannot start" in err and "Traceback" not in err
    assert "SLACK_BOT_TOKEN still holds a placeholder" in err
    assert "Redis does not answer" in err
    assert "APPROVAL_BOT_MAX_TURNS" in err
    assert "OPENAI_API_KEY is not set" in err
    # The one thing that works at once is offered where Slack settings are what is missing.
    assert ("`make sandbox`" in err) == (command[0] == "serve")


def test_the_lull_maximum_stays_below_the_ack_budget() -> None:
    """Acks first: a click's deferred decision must not outwait its "still working" note."""
    assert Settings(_env_file=None).lull_max_seconds == 0.5  # type: ignore[call-arg]
    small = Settings(_env_file=None, ack_budget_seconds=0.3)  # type: ignore[call-arg]
    assert small.lull_max_seconds == pytest.approx(0.1)  # the default fits the budget
    assert not any("LULL" in p for p in small.problems(socket_mode=True))
    wrong = Settings(_env_file=None, ack_budget_seconds=0.3, lull_max_seconds=0.5)  # type: ignore[call-arg]
    [problem] = [p for p in wrong.problems(socket_mode=True) if "LULL" in p]
    assert (
        "APPROVAL_BOT_LULL_MAX_SECONDS=0.5 must be below APPROVAL_BOT_ACK_BUDGET_SECONDS" in problem
    )


def test_uvloop_is_chosen_by_a_setting_and_checked_installed() -> None:
    """APPROVAL_BOT_EVENT_LOOP: asyncio's loop unless set; uvloop only when installed (else a
    listed configuration problem, not a traceback at start)."""
    import importlib.util

    assert Settings(_env_file=None).event_loop == "asyncio"  # type: ignore[call-arg]
    chosen = Settings(_env_file=None, event_loop="uvloop")  # type: ignore[call-arg]
    problems = [p for p in chosen.problems(socket_mode=True) if "EVENT_LOOP" in p]
    if importlib.util.find_spec("uvloop") is None:
        [problem] = problems
        assert "uvloop is not installed" in problem and "[uvloop]" in problem
    else:
        assert problems == []


def test_windows_and_polls_are_settings_with_production_defaults() -> None:
    """Each window the tests shorten is an APPROVAL_BOT_* setting; unset, it is production's."""
    from bot.testing.harness import FAST_WINDOWS, PRODUCTION_WINDOWS, fast_environment

    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    assert PRODUCTION_WINDOWS == {
        "projector_coalesce_seconds": 1.0,
        "progress_due_seconds": 1.0,
        "policy_check_seconds": 1.0,
        "home_poll_seconds": 0.1,
        "timers_poll_seconds": 1.0,
        "slack_posts_per_second": 1.0,
        "slack_updates_per_minute": 50.0,
    }
    assert (defaults.projector_gather_seconds, defaults.projector_poll_seconds) == (0.25, 0.05)
    assert defaults.projector_idle_poll_seconds == 0.5
    for name, value in PRODUCTION_WINDOWS.items():
        assert getattr(defaults, name) == value, name
    environment = fast_environment()
    assert all(key.startswith("APPROVAL_BOT_") for key in environment)
    from_environment = Settings.model_validate(environment)
    for name, value in FAST_WINDOWS.items():
        assert getattr(from_environment, name) == value, name
        assert value <= PRODUCTION_WINDOWS[name] or name.startswith("slack_"), name


def test_check_validates_allow_edit(tmp_path: Path) -> None:
    """`allow_edit` is a yes/no per tool rule, and `true` only means something for a tool an
    Edit can be offered for (here the agents have no shell tool)."""
    policy = POLICY + (
        "tools:\n  - match: restart_service\n    allow_edit: sometimes\n"
        "  - match: shell\n    allow_edit: true\n"
    )
    env = dict(SLACK_BOT_TOKEN="xoxb-secret-value", SLACK_SIGNING_SECRET="shh",
               OPENAI_API_KEY="sk-test-key")  # fmt: skip
    result = check(tmp_path, policy, **env)
    assert result.returncode == 1
    assert "tools.0.allow_edit: Input should be a valid boolean" in result.stderr
    result = check(tmp_path, policy.replace("allow_edit: sometimes", "allow_edit: false"), **env)
    assert result.returncode == 1
    assert (
        "tools[1] (shell): allow_edit: true, but it matches no function, shell, apply_patch or "
        "hosted MCP tool of the agents" in result.stderr
    )
    assert "1 problem(s) found" in result.stderr
    fine = policy.replace("sometimes", "true").replace("match: shell", "match: delete_*")
    assert check(tmp_path, fine, **env).returncode == 0


def test_check_says_a_rule_on_advice_needs_an_advisor(tmp_path: Path) -> None:
    """A rule on the advisor's advice (#33 part 2) with no advisor named: its advice never
    comes; an advisor that cannot be loaded is said too."""
    policy = POLICY + "tools:\n  - match: delete_*\n    when: {advice.risk: high}\n"
    env = dict(SLACK_BOT_TOKEN="xoxb-secret-value", SLACK_SIGNING_SECRET="shh",
               OPENAI_API_KEY="sk-test-key")  # fmt: skip
    result = check(tmp_path, policy, **env)
    assert result.returncode == 1
    assert "tools[0] (delete_*): when: advice.risk, but APPROVAL_BOT_ADVISOR is not set" in (
        result.stderr
    )
    missing = check(tmp_path, policy, **env, APPROVAL_BOT_ADVISOR="nowhere.advisor:advisor")
    assert missing.returncode == 1
    assert "APPROVAL_BOT_ADVISOR: cannot import 'nowhere.advisor'" in missing.stderr
    demo = "bot.testing.advisors:demo_advisor"
    assert check(tmp_path, policy, **env, APPROVAL_BOT_ADVISOR=demo).returncode == 0


def test_allow_edit_defaults_by_kind_of_call() -> None:
    policy = parse_policy(POLICY + "tools:\n  - match: sh\n    allow_edit: true\n")
    rule = policy.rule_for(channel="C1", agent="ops", tool="delete_logs")
    assert rule is not None and rule.editable("function")
    for kind in ("shell", "apply_patch", "hosted_mcp", "mcp"):
        assert not rule.editable(kind)
    set_rule = policy.rule_for(channel="C1", agent="ops", tool="sh")
    assert set_rule is not None and set_rule.editable("shell")


def test_openai_settings_in_dotenv_are_honoured(tmp_path: Path) -> None:
    """compose.yml says to put OPENAI_API_KEY in `.env`: `make run` reads it there too."""
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv-1234\n")
    slack = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}
    result = check(tmp_path, POLICY, APPROVAL_BOT_ENV_FILE=".env", **slack)
    assert result.returncode == 0, result.stderr
    assert "sk-from-dotenv" not in result.stdout + result.stderr
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-...\n")  # the placeholder is judged too
    placeholder = check(tmp_path, POLICY, APPROVAL_BOT_ENV_FILE=".env", **slack)
    assert "OPENAI_API_KEY still holds a placeholder" in placeholder.stderr
    # Without it, in `.env` or the environment, the check says so (as before).
    (tmp_path / ".env").write_text("APPROVAL_BOT_LOG_LEVEL=INFO\n")
    missing = check(tmp_path, POLICY, APPROVAL_BOT_ENV_FILE=".env", **slack)
    assert "OPENAI_API_KEY is not set" in missing.stderr


TYPOS = """\
tools:
  - match: delete_*
    requierd_approvals: 2
channels:
  C0AAAAAAA:
    aprovers: [U0AAAAAAA]
    starters: [bob]
defaults:
  allow_self_approval: maybe
  timerz: 3
"""


def test_check_policy_alone_for_ci(tmp_path: Path) -> None:
    """`check --policy FILE` needs no Slack secrets, Redis or agents; its findings come in the
    file's order, and a misspelled key is told the key it was meant to be."""
    policy = tmp_path / "candidate.yml"
    policy.write_text(TYPOS)
    env = base_env(tmp_path, None, APPROVAL_BOT_AGENTS="no_such_module:agents",
                   REDIS_URL="redis://127.0.0.1:1/0")  # fmt: skip
    bad = run_bot(["check", "--policy", str(policy)], env=env, cwd=tmp_path)
    assert bad.returncode == 1
    found = [line for line in bad.stderr.splitlines() if line.startswith("  - ")]
    lines = [int(line.split(":")[1]) for line in found]
    assert lines == sorted(lines) and len(found) == 6, bad.stderr
    assert f"6 problem(s) found in {policy}" in bad.stderr
    text = bad.stderr
    assert "'requierd_approvals' (did you mean `required_approvals`?)" in text
    assert f"{policy}:6: channels.C0AAAAAAA.aprovers: unknown key 'aprovers' (did you mean " \
        "`approvers`?)" in text  # fmt: skip
    assert "'timerz' (see the policy reference)" in text  # nothing close enough to guess
    assert "SLACK_" not in text and "Redis" not in text and "no_such_module" not in text

    policy.write_text("channels:\n  C0AAAAAAA:\n    approvers: [U0AAAAAAA]\n")
    good = run_bot(["check", "--policy", str(policy)], env=env, cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith(f"OK: policy {policy} with 1 channel(s)")

    policy.write_text((ROOT / "policy.example.yml").read_text())
    example = run_bot(["check", "--policy", str(policy)], env=env, cwd=tmp_path)
    assert example.returncode == 1 and "example ids" in example.stderr


def test_help_names_each_option_value_plainly() -> None:
    """`--log-level LEVEL`, not the `TOP_LOG_LEVEL` of its destination: every option that takes
    a value shows a short word for it, in every command."""
    import argparse

    from bot.cli import build_parser

    def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        found = [parser]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    found += parsers(child)
        return found

    shown = {}
    for parser in parsers(build_parser()):
        for action in parser._actions:
            if action.option_strings and action.nargs != 0:
                metavar = action.metavar or action.dest.upper()
                shown[f"{parser.prog} {action.option_strings[0]}"] = str(metavar)
    odd = {option: metavar for option, metavar in shown.items() if "_" in metavar}
    assert not odd
    assert shown["approval-bot --log-level"] == "LEVEL"
    assert shown["approval-bot serve --log-level"] == "LEVEL"
    assert shown["approval-bot check --policy"] == "FILE"
    assert "--log-level LEVEL" in build_parser().format_help()
