"""Fixtures of the tests that run the bot as real processes (the plugin gives the rest), and what
the suite's summary says about skipped tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Generator
from pathlib import Path

import pytest

from bot.testing.slack_api import FakeSlackAPI
from tests import forkserver
from tests.agents_for_tests import POLICY
from tests.capabilities import ALLOWED_ON_CI

# A test that silently does not run is worse than one that fails: on CI (CI=true) a skip is a
# failure unless a missing browser or Docker is its reason (`tests.capabilities`). Locally,
# every skip is listed with its reason at the end of `make test`.


SHARED_SERVER = pytest.StashKey[tuple[subprocess.Popen[bytes], str]]()


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist, one fork server (tests/forkserver.py) for every worker, started by the
    controller as the workers start (each imports the bot again otherwise: seconds of CPU)."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        process, address = forkserver.start_server()
        os.environ[forkserver.SHARED] = address  # the workers inherit it
        config.stash[SHARED_SERVER] = (process, address)


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(SHARED_SERVER, None)
    if server is not None:
        forkserver.stop_server(*server)
        os.environ.pop(forkserver.SHARED, None)


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


# Longest first. The suite mostly waits (on Redis, bot processes, a browser, Retry-After), so
# it runs on more workers than cores, and its wall time is the busiest worker's: a long test
# started last would end last alone. Each test's time in the previous run is kept in pytest's
# cache; the tests known to take seconds (a fresh clone has no cache) go first, longest first,
# and the rest keep their order (the order pytest collected them in: a module's tests
# together, for fixtures scoped to a module). `make test` hands each worker a test or two at a
# time (`--maxschedchunk 1`), so the long ones spread over the workers.
DURATIONS_KEY = "approval-bot/durations"
LONG = 2.0  # seconds: a test this long or longer is started first
# Before a run has timed them (a fresh clone): modules whose tests take seconds each.
LONG_MODULES = {
    "test_cluster.py": 8.0,
    "test_sandbox_page.py": 15.0,
    "test_sandbox_process.py": 5.0,
    "test_testkit.py": 8.0,
    "test_doc_samples.py": 3.0,
    "test_trip_ups.py": 4.0,
    "test_faults.py": 3.0,
    "test_process.py": 4.0,
    "test_operations_process.py": 3.0,
    "test_lifecycle_timers.py": 2.0,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cache = getattr(config, "cache", None)
    known: dict[str, float] = (cache.get(DURATIONS_KEY, {}) if cache is not None else {}) or {}

    def estimate(item: pytest.Item) -> float:
        if item.nodeid in known:
            return float(known[item.nodeid])
        return LONG_MODULES.get(item.path.name, 0.0)

    long = sorted((i for i in items if estimate(i) >= LONG), key=estimate, reverse=True)
    first = {id(i) for i in long}
    items[:] = long + [i for i in items if id(i) not in first]


_timed: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _timed[report.nodeid] = _timed.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    cache = getattr(session.config, "cache", None)
    if cache is None or hasattr(session.config, "workerinput") or not _timed:
        return  # (an xdist worker: its reports reach the controller, which keeps them)
    known = cache.get(DURATIONS_KEY, {}) or {}
    known.update({nodeid: round(seconds, 2) for nodeid, seconds in _timed.items()})
    cache.set(DURATIONS_KEY, known)
