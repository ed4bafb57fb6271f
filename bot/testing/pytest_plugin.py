"""A pytest plugin for testing your own agents and policy against the real bot, offline.

Installed with the bot it is loaded automatically (the `pytest11` entry point); without the
entry point, load it with `pytest -p bot.testing.pytest_plugin` or, in a `conftest.py`,
`pytest_plugins = ["bot.testing.pytest_plugin"]`. Fixtures:

- `redis_server` (session): a private `redis-server` from PATH on a free port, in a temp dir;
- `redis_url`: its URL, flushed before each test; in a test marked `cluster_too` the test runs
  twice, once more on `redis_cluster`;
- `redis_cluster` (session): a three-node Redis Cluster on loopback (`LocalCluster`), started
  by the first test that needs it;
- `slack_api`: the Slack Web API stand-in (`FakeSlackAPI`), started by the first bot using it;
- `bot_harness`: `bot_harness(agents, policy_text)` is the whole bot in-process (`BotHarness`)
  on `redis_url` and `slack_api`; use it as `async with bot_harness(...) as bot:`.

For the whole session it turns the Agents SDK's tracing off (nothing is exported from tests)
and sets APPROVAL_BOT_ENV_FILE to empty, so no bot started by a test reads a `.env` file.
Async tests that use these fixtures run on asyncio even without pytest-asyncio.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bot.config import ENV_FILE_VARIABLE

if TYPE_CHECKING:  # the bot itself is imported only by tests that use a fixture
    from bot.service.policy.source import PolicySource
    from bot.store.connection import EmbeddedRedis
    from bot.testing.cluster import LocalCluster
    from bot.testing.harness import BotHarness
    from bot.testing.slack_api import FakeSlackAPI

KIT_FIXTURES = frozenset({"redis_server", "redis_url", "redis_cluster", "slack_api", "bot_harness"})
REDIS_KINDS = ("standalone", "cluster")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster_too: run the test on a three-node Redis Cluster as well"
    )
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"  # and in bots started as processes
    os.environ[ENV_FILE_VARIABLE] = ""


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an `async def` test that uses the kit's fixtures when no async plugin took it (no
    pytest-asyncio, or its strict mode without a marker). Others are left to pytest."""
    function = pyfuncitem.obj
    names = set(pyfuncitem.fixturenames)
    if not inspect.iscoroutinefunction(function) or not names & KIT_FIXTURES:
        return None
    if pyfuncitem.get_closest_marker("asyncio") or pyfuncitem.get_closest_marker("anyio"):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(function(**arguments))
    return True


LEFTOVER_NAMES = ("redis-server", "approval-bot", "python", "chromium")


def leftover_processes(directory: Path) -> list[tuple[int, str, Path]]:
    """(pid, name, cwd) of processes still working under `directory` (Linux: /proc)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            name = (proc / "comm").read_text().strip()
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if name.startswith(LEFTOVER_NAMES) and cwd.is_relative_to(directory):
            found.append((int(proc.name), name, cwd))
    return found


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Name every process a test left running in this session's temp directories (a bot
    started as a process and never stopped, or its redis-server), so none goes unnoticed."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or not Path("/proc").is_dir():
        return
    base = factory.getbasetemp().resolve()
    deadline = time.monotonic() + 5  # a server told to stop may still be writing its AOF
    while (left := leftover_processes(base)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        terminalreporter.section("processes left running by tests", sep="-", yellow=True)
        for pid, name, cwd in left:
            terminalreporter.write_line(f"pid {pid} {name} in {cwd}")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """One `redis-server` for the test session (skips the tests with a reason if there is none)."""
    from bot.store.connection import EmbeddedRedis

    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on PATH (Debian/Ubuntu: apt-get install redis-server)")
    server = EmbeddedRedis(Path(tmp_path_factory.mktemp("redis")))
    asyncio.run(server.start())
    yield server
    server.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A `cluster_too` test that reaches `redis_url` runs on each kind of Redis."""
    if "redis_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "cluster_too"
    ):
        metafunc.parametrize("redis_url", REDIS_KINDS, indirect=True)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A three-node Redis Cluster for the test session (skips without `redis-server`)."""
    from bot.testing.cluster import LocalCluster

    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on PATH (Debian/Ubuntu: apt-get install redis-server)")
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("cluster")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, redis_server: EmbeddedRedis) -> Iterator[str]:
    """The session's Redis, emptied for this test (the cluster's, for a `cluster_too` test's
    second run: afterwards no node may have refused a command for spanning slots)."""
    import redis

    if getattr(request, "param", "standalone") == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        cluster.flush()
        yield cluster.url
        assert not cluster.refusals(), f"the cluster refused commands: {cluster.refusals()}"
        return
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    yield redis_server.url


@pytest.fixture
def slack_api() -> FakeSlackAPI:
    """The Slack Web API stand-in; read what the bot posted from `.messages` and `.calls`."""
    from bot.testing.slack_api import FakeSlackAPI

    return FakeSlackAPI()


@pytest.fixture
def bot_harness(redis_url: str, slack_api: FakeSlackAPI) -> Callable[..., BotHarness]:
    """`bot_harness(agents, policy, **options)`: a `BotHarness` on this test's Redis and stand-in.
    `agents` is an Agent, a dict of them or an `AgentRegistry`; `policy` is the policy's YAML."""

    from bot.testing.harness import BotHarness

    def make(agents: Any, policy: str | PolicySource, **options: Any) -> BotHarness:
        return BotHarness(redis_url, agents, policy, slack=slack_api, **options)

    return make
