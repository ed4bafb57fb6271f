"""Operating the bot: `/metrics` scraped after real decisions, health and readiness, tracing."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from platform import python_version
from typing import Any

import aiohttp
import pytest
from agents import TracingProcessor, set_trace_processors, set_tracing_disabled
from agents.tracing import Span, Trace
from agents.tracing.processors import default_processor
from prometheus_client.parser import text_string_to_metric_families

from bot import metrics
from bot.config import Settings
from bot.logs import configure_logging
from bot.slack.blocks import APPROVE
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import POLICY, Ledger, assistant_message, function_call, ops_agent
from tests.test_config import check

# Every metric the issue names, as exposed (counters with their `_total` sample).
METRICS = {
    "approval_bot_decisions_total": "decisions by outcome",
    "approval_bot_time_to_decision_seconds": "time to decision",
    "approval_bot_pending_calls": "pending calls",
    "approval_bot_queue_depth": "queue depth",
    "approval_bot_queue_oldest_age_seconds": "queue age",
    "approval_bot_expiries_total": "expiries",
    "approval_bot_slack_api_errors_total": "Slack API errors",
    "approval_bot_slack_rate_limited_total": "Slack 429s",
    "approval_bot_resumes_total": "resumes",
    "approval_bot_run_failures_total": "failures",
    "approval_bot_ack_seconds": "ack latency",
    "approval_bot_build_info": "build info",
    "approval_bot_slack_auth_ok": "Slack accepts the token",
}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, from the exposition text."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def scrape(url: str) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    return text, samples(text)


async def fresh_scrape(
    url: str,
) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """A scrape whose Redis-backed gauges were read for it: a loaded machine's read can miss
    the scrape's 1 s bound, and the gauges then keep their last values (counted as a scrape
    error), so scrape again."""

    def errors() -> float:
        return metrics.REGISTRY.get_sample_value("approval_bot_scrape_errors_total") or 0.0

    async def attempt() -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] | None:
        before = errors()
        found = await scrape(url)
        return found if errors() == before else None

    scraped: tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]
    scraped = await wait_until(attempt, what="a scrape with its gauges read")
    return scraped


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def delete_steps() -> list[Any]:
    return [
        [function_call("delete_logs", {"path": "/var/log"}, call_id="c1")],
        [assistant_message("done")],
    ]


async def test_metrics_name_every_metric_and_follow_decisions(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(delete_steps(), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        _, before = await fresh_scrape(bot.url)
        approval = await bot.start_and_wait("clean", user="U1")
        text, paused = await fresh_scrape(bot.url)
        for name, what in METRICS.items():
            assert f"# TYPE {name} " in text, what
        assert value(paused, "approval_bot_pending_calls") == 1
        assert value(paused, "approval_bot_queue_depth") == 0
        assert value(paused, "approval_bot_queue_oldest_age_seconds") == 0

        # The starter may not approve their own run: refused, and nothing recorded.
        assert (await bot.click(approval, APPROVE, user="U1")).status == 200
        assert (await bot.click(approval, APPROVE, user="U2")).status == 200
        await bot.wait_for_status("finished")
        await bot.idle()
        _, after = await fresh_scrape(bot.url)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("approval_bot_decisions_total", outcome="approve") == 1
    assert moved("approval_bot_decisions_total", outcome="refused") == 1
    assert moved("approval_bot_decisions_total", outcome="reject") == 0
    assert moved("approval_bot_time_to_decision_seconds_count") == 1
    assert moved("approval_bot_resumes_total") == 1
    assert moved("approval_bot_runs_started_total") == 1
    assert moved("approval_bot_run_failures_total") == 0
    assert value(after, "approval_bot_pending_calls") == 0
    # Each of Slack's requests is timed to its answer: the command, the two clicks.
    assert moved("approval_bot_ack_seconds_count", kind="command") == 1
    assert moved("approval_bot_ack_seconds_count", kind="block_actions") == 2
    assert moved("approval_bot_ack_seconds_bucket", kind="command", le="+Inf") == 1
    build = {"version": metadata.version("slack-approval-bot"), "python": python_version()}
    assert value(after, "approval_bot_build_info", **build) == 1
    assert value(after, "approval_bot_slack_auth_ok") == 1
    assert ledger.names() == ["delete_logs"]


async def test_slack_errors_and_rate_limits_are_counted(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent([[assistant_message("nothing to do")]], ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        _, before = await scrape(bot.url)
        bot.slack_api.rate_limited.add("chat.update")
        bot.slack_api.fail_methods.add("chat.postEphemeral")
        await bot.slack.command("hello", user="U1", channel="C1")
        await bot.slack.command("run nobody hello", user="U1", channel="C1")  # refused: told
        await bot.wait_for_status("running")  # the update to "finished" is rate limited

        # ... and retried (after Retry-After) until Slack recovers: wait for it to be counted.
        async def counted() -> str:
            _, text = await scrape(bot.url)
            rate_limited = value(
                text, "approval_bot_slack_rate_limited_total", method="chat.update"
            )
            return (
                text
                if rate_limited
                > value(before, "approval_bot_slack_rate_limited_total", method="chat.update")
                else ""
            )

        after = await wait_until(counted, what="the 429 to be counted")

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("approval_bot_slack_rate_limited_total", method="chat.update") >= 1
    assert (
        moved("approval_bot_slack_api_errors_total", method="chat.update", error="ratelimited") >= 1
    )


async def test_healthz_is_liveness_and_readyz_follows_redis(tmp_path: Any) -> None:
    own = EmbeddedRedis(tmp_path / "redis")
    await own.start()
    agent, _ = ops_agent([[assistant_message("hi")]], Ledger())
    try:
        async with BotHarness(own.url, agent, POLICY) as bot, aiohttp.ClientSession() as session:
            for path in ("/healthz", "/readyz"):
                async with session.get(f"{bot.url}{path}") as response:
                    assert response.status == 200, path
            own.stop()
            async with session.get(f"{bot.url}/readyz") as response:
                assert response.status == 503
                assert (await response.json())["redis"] == "unreachable"
            async with session.get(f"{bot.url}/healthz") as response:
                assert response.status == 200  # alive: no restart while Redis is away
            async with session.get(f"{bot.url}/metrics") as response:
                assert response.status == 200  # the gauges keep their last values
                assert "approval_bot_scrape_errors_total" in await response.text()
    finally:
        own.stop()


async def test_while_slack_refuses_the_token_readyz_says_so_and_so_is_the_person_told(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Slack answers the bot's auth.test with `invalid_auth`, then accepts the token again:
    not ready (and the gauge 0) until then, a command's author is told why in a sentence,
    and the log has one line when it starts failing and one when it recovers, however often
    the bot asked meanwhile."""
    caplog.set_level(logging.INFO)
    slack = FakeSlackAPI()
    refusing = {"auth.test"}
    slack.fail_error = "invalid_auth"
    slack.fail_when = lambda method, _: method in refusing
    agent, _ = ops_agent(delete_steps(), Ledger())
    retry = {"slack_auth_retry_seconds": 0.05}
    async with BotHarness(redis_url, agent, POLICY, slack=slack, settings=retry) as bot, \
            aiohttp.ClientSession() as http:  # fmt: skip

        async def readyz() -> tuple[int, dict[str, Any]]:
            async with http.get(f"{bot.url}/readyz") as response:
                return response.status, await response.json()

        assert await readyz() == (
            503,
            {"ok": False, "redis": "up", "slack": "token refused: invalid_auth"},
        )
        _, found = await scrape(bot.url)
        assert value(found, "approval_bot_slack_auth_ok") == 0
        told = await bot.slack.command("clean", user="U1", channel="C1")
        assert told.status == 200
        assert told.json() == {"response_type": "ephemeral", "text": REFUSED}
        # The bot keeps asking; the log does not repeat itself.
        asked = len(slack.calls_to("auth.test"))
        await wait_until(
            lambda: len(slack.calls_to("auth.test")) >= asked + 3, what="auth.test retries"
        )
        lines = [r for r in caplog.records if r.name == "bot.slack.installs.installation"]
        assert [r.levelname for r in lines] == ["ERROR"]
        assert "refuses the bot token (auth.test: invalid_auth)" in lines[0].getMessage()
        assert "check SLACK_BOT_TOKEN" in lines[0].getMessage()
        assert not [r for r in caplog.records if r.exc_info or (r is not lines[0]
                    and r.levelno >= logging.ERROR)]  # fmt: skip
        assert bot.slack_api.top_level() == []

        refusing.clear()  # Slack accepts the token again
        await wait_until(lambda: bot.runtime.slack_problem() is None, what="auth.test")
        assert await readyz() == (200, {"ok": True, "redis": "up", "slack": "up"})
        _, found = await scrape(bot.url)
        assert value(found, "approval_bot_slack_auth_ok") == 1
        lines = [r for r in caplog.records if r.name == "bot.slack.installs.installation"]
        assert [r.levelname for r in lines] == ["ERROR", "INFO"]
        assert "accepts the bot token again" in lines[1].getMessage()
        await bot.start_and_wait("clean", user="U1")  # and the bot works


async def test_a_token_revoked_while_the_bot_runs_is_told_as_at_start(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Slack starts refusing the token of a running bot (revoked): the first Web API call
    answered so makes the bot not ready and refuse requests with the same sentence, until
    auth.test accepts the token again; one log line each way."""
    caplog.set_level(logging.INFO)
    slack = FakeSlackAPI()
    refusing: set[str] = set()
    slack.fail_error = "invalid_auth"
    slack.fail_when = lambda method, _: bool(refusing)
    agent, _ = ops_agent(delete_steps(), Ledger())
    retry = {"slack_auth_retry_seconds": 0.05}
    async with BotHarness(redis_url, agent, POLICY, slack=slack, settings=retry) as bot, \
            aiohttp.ClientSession() as http:  # fmt: skip

        async def ready() -> tuple[int, str]:
            async with http.get(f"{bot.url}/readyz") as response:
                return response.status, (await response.json())["slack"]

        card = await bot.start_and_wait("clean", user="U1")
        assert await ready() == (200, "up")
        refusing.add("everything")  # the token is revoked
        await bot.click(card, APPROVE, user="U2")  # the card's update is refused
        await wait_until(
            lambda: bot.runtime.slack_problem() is not None, what="the refusal to be seen"
        )
        assert await ready() == (503, "token refused: invalid_auth")
        told = await bot.slack.command("clean", user="U1", channel="C1")
        assert told.json()["text"] == REFUSED
        # A click meanwhile: its author is told too, beside the card (no token needed).
        before = len(slack.responses)
        await bot.click(card, APPROVE, user="U3")
        await wait_until(lambda: len(slack.responses) > before, what="the clicker told")
        assert slack.responses[-1]["text"] == REFUSED
        assert slack.responses[-1]["replace_original"] is False
        lines = [r for r in caplog.records if r.name == "bot.slack.installs.installation"]
        assert [r.levelname for r in lines][-1:] == ["ERROR"]
        assert "(a Web API call: invalid_auth)" in lines[-1].getMessage()
        refused_at = len(lines)

        refusing.clear()
        await wait_until(lambda: bot.runtime.slack_problem() is None, what="auth.test")
        assert await ready() == (200, "up")
        lines = [r for r in caplog.records if r.name == "bot.slack.installs.installation"]
        assert [r.levelname for r in lines[refused_at:]] == ["INFO"]
        assert "accepts the bot token again" in lines[-1].getMessage()


REFUSED = (
    "The bot cannot act right now: Slack does not accept its token (invalid_auth). Please tell "
    "whoever runs the bot to check SLACK_BOT_TOKEN; it works again as soon as Slack accepts it."
)


# Tracing --------------------------------------------------------------------------------------


class Captured(TracingProcessor):
    """The SDK's own extension point: receives every trace and span the SDK would export."""

    def __init__(self) -> None:
        self.traces: list[dict[str, Any]] = []
        self.spans: list[dict[str, Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.traces.append(trace.export() or {})

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        self.spans.append(span.export() or {})

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def captured() -> Iterator[Captured]:
    """Traces go to this processor only; tracing starts as the SDK's default (on), as in a
    fresh process, and is turned off again afterwards."""
    processor = Captured()
    set_trace_processors([processor])
    set_tracing_disabled(False)
    yield processor
    set_tracing_disabled(True)
    set_trace_processors([default_processor()])


class TracedBot(BotHarness):
    def __init__(self, *args: Any, sensitive: bool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sensitive = sensitive

    def settings(self) -> Settings:
        update = {"tracing": "on", "trace_sensitive_data": self.sensitive}
        return super().settings().model_copy(update=update)


async def approve_one_run(bot: BotHarness) -> str:
    approval = await bot.start_and_wait("clean", user="U1")
    await bot.click(approval, APPROVE, user="U2")
    await bot.wait_for_status("finished")
    await bot.idle()
    return next(e["run_id"] for e in await bot.audit() if e["kind"] == "run_started")


async def test_tracing_is_off_by_default_nothing_is_exported(
    redis_url: str, captured: Captured
) -> None:
    agent, _ = ops_agent(delete_steps(), Ledger())
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await approve_one_run(bot)
    assert captured.traces == [] and captured.spans == []


async def test_tracing_on_groups_start_and_resume_by_run_without_sensitive_data(
    redis_url: str, captured: Captured
) -> None:
    agent, _ = ops_agent(delete_steps(), Ledger())
    async with TracedBot(redis_url, agent, POLICY, sensitive=False) as bot:
        run_id = await approve_one_run(bot)
    # The start and the resume (the SDK reattaches the paused run's trace) are one group.
    assert captured.traces and {t.get("group_id") for t in captured.traces} == {run_id}
    traced = {t["id"] for t in captured.traces}
    assert {s["trace_id"] for s in captured.spans} <= traced
    assert {t.get("workflow_name") for t in captured.traces} == {"approval-bot ops"}
    kinds = [s["span_data"]["type"] for s in captured.spans]
    assert kinds.count("agent") == 2  # one Runner.run for the start, one for the resume
    tools = [s["span_data"] for s in captured.spans if s["span_data"]["type"] == "function"]
    assert tools and {t["name"] for t in tools} == {"delete_logs"}
    assert all(t.get("input") is None and t.get("output") is None for t in tools)  # not sent


async def test_tracing_sensitive_data_when_asked(redis_url: str, captured: Captured) -> None:
    agent, _ = ops_agent(delete_steps(), Ledger())
    async with TracedBot(redis_url, agent, POLICY, sensitive=True) as bot:
        await approve_one_run(bot)
    tools = [s["span_data"] for s in captured.spans if s["span_data"]["type"] == "function"]
    assert any("/var/log" in str(t.get("input")) for t in tools)


def test_check_refuses_tracing_that_would_send_another_services_key_to_openai(
    tmp_path: Path,
) -> None:
    base = {
        "SLACK_BOT_TOKEN": "xoxb-secret-value",
        "SLACK_SIGNING_SECRET": "shh",
        "OPENAI_API_KEY": "sk-model-service-0123456789",  # the example agents need a model key
    }
    local = {"APPROVAL_BOT_TRACING": "on", "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}
    refused = check(tmp_path, POLICY, **base, **local)
    assert refused.returncode == 1
    assert "APPROVAL_BOT_TRACING=on exports traces to OpenAI" in refused.stderr
    assert "OPENAI_BASE_URL points at 127.0.0.1" in refused.stderr
    key = "sk-tracing-only-0123456789"
    allowed = check(tmp_path, POLICY, **base, **local, APPROVAL_BOT_TRACING_API_KEY=key)
    assert allowed.returncode == 0, allowed.stderr
    assert key not in allowed.stdout + allowed.stderr
    openai = {"OPENAI_BASE_URL": "https://api.openai.com/v1"}
    assert check(tmp_path, POLICY, **base, **openai, APPROVAL_BOT_TRACING="on").returncode == 0


def test_log_lines_are_json_objects_with_credentials_masked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("httpx").level)
    try:
        configure_logging("info", "json")
        log = logging.getLogger("bot.example")
        try:
            raise RuntimeError("Slack said no to xoxb-1234-abcdef")
        except RuntimeError:
            log.exception("posting with token xoxb-1234-abcdef failed")
        logging.getLogger("httpx").info("HTTP Request: POST https://api.openai.com/v1/responses")
    finally:
        root.handlers[:], _, _ = saved
        root.setLevel(saved[1])
        logging.getLogger("httpx").setLevel(saved[2])
    err = capsys.readouterr().err
    [entry] = [json.loads(line) for line in err.splitlines()]  # httpx's INFO line is not there
    assert entry["level"] == "ERROR" and entry["logger"] == "bot.example"
    assert entry["message"] == "posting with token *** failed"
    assert "RuntimeError: Slack said no to ***" in entry["exc_info"]
    assert "xoxb-1234" not in err and entry["time"].endswith("+00:00")
