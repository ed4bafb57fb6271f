"""Fixtures of the tests that run the bot as real processes (the plugin gives the rest), and what
the suite's summary says about skipped tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Generator
from pathlib import Path

import pytest

from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import POLICY
from tests.capabilities import ALLOWED_ON_CI

# A test that silently does not run is worse than one that fails: on CI (CI=true) a skip is a
# failure unless a missing browser or Docker is its reason (`tests.capabilities`). Locally,
# every skip is listed with its reason at the end of `make test`.


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and on_ci() and not hasattr(report, "wasxfail"):
        reason = skip_reason(report)
        if not reason.startswith(ALLOWED_ON_CI):
            report.outcome = "failed"
            report.longrepr = (
                f"skipped on CI, where a test may only skip for a missing browser or Docker "
                f"(reasons starting {' or '.join(map(repr, ALLOWED_ON_CI))}): {reason}"
            )
    return report


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackAPI]:
    """A running Slack stand-in for bot processes started by the test."""
    async with FakeSlackAPI() as api:
        yield api


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(POLICY)
    return path
