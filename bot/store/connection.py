"""Connecting to Redis: a standalone server (a sized, blocking connection pool), a Redis
Cluster (redis-py's cluster client), or an embedded `redis-server`.

redis-py's default pool raises `MaxConnectionsError` the moment it runs dry; under a burst of
clicks plus background resumes that would drop work. A blocking pool makes callers wait instead.
The cluster client has no blocking pool: it opens connections on demand, up to a larger cap per
node (`CLUSTER_CONNECTIONS_FACTOR` times the setting).

Which kind `REDIS_URL` names is asked of the server (`INFO cluster`) unless the setting
`APPROVAL_BOT_REDIS_MODE` says it: an operator points the bot at any node of a cluster and
nothing else changes. Every key a script or transaction touches lies in one hash slot (a run's
keys share the tag `{<run id>}`; the global indexes each have their own), so the store runs on
either kind unchanged; `tests/test_cluster.py` proves it on a real three-node cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import unquote, urlsplit

import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff
from redis.event import AsyncAfterConnectionReleasedEvent

from bot.errors import ApprovalBotError

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


RedisMode = Literal["auto", "standalone", "cluster"]
"""What `REDIS_URL` names: `auto` asks the server; the others say it (a `redis+sentinel://`
URL always names a Sentinel-managed primary)."""
RedisKind = Literal["standalone", "cluster", "sentinel"]
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")

CLUSTER_CONNECTIONS_FACTOR = 4


def _retry() -> Retry:
    """After a Redis restart (or a failover) every pooled connection is dead: reconnect and
    retry a command a few times (briefly) instead of failing it. The transition scripts are
    written so that running one twice is harmless."""
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), 3)


# A write bigger than this keeps redis-py's timeout (see `UntimedSmallWrites`): asyncio's
# transport buffers up to 64 KiB without waiting, so only a larger one can wait on a server.
TIMED_WRITE_BYTES = 64 * 1024


class UntimedSmallWrites:
    """A connection mixin: a small command is written without redis-py's write timeout.

    With `socket_timeout` set, redis-py writes every command under `asyncio.wait_for`, which
    on Python 3.11 makes a task per command: a GET's round trip cost 103-108 µs of CPU with it
    and 84-92 µs without, and a decision makes some 45 round trips. A small write is only handed to
    asyncio's buffer and never waits, so that timeout guards nothing there. Every reply is
    still read under the timeout, and so a stalled server fails the command as before; the
    connection's handshake, health check and a large write keep the timeout too."""

    socket_timeout: float | None
    is_connected: bool

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        small = isinstance(command, list) and sum(map(len, command)) <= TIMED_WRITE_BYTES
        if not small:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        if not self.is_connected:
            await self.connect()  # type: ignore[attr-defined]
        if check_health:
            await self.check_health()  # type: ignore[attr-defined]
        timeout, self.socket_timeout = self.socket_timeout, None
        try:
            await super().send_packed_command(command, False)  # type: ignore[misc]
        finally:
            self.socket_timeout = timeout


def untimed_small_writes(pool: redis.ConnectionPool) -> redis.ConnectionPool:
    """`pool`, its connections with `UntimedSmallWrites` over the class the URL chose (TCP,
    TLS, Unix socket or Sentinel-managed)."""
    base = pool.connection_class
    if not issubclass(base, UntimedSmallWrites):
        pool.connection_class = type(base.__name__, (UntimedSmallWrites, base), {})
    return pool


class ReplicasBehind(redis.ConnectionError):
    """Fewer replicas than required confirmed a transition in time. It may still be lost in a
    failover, so the bot acts as if Redis were unreachable: the person is asked to try again,
    a worker does not run the tool, and what was left undone is picked up again (the sweeper
    re-enqueues a decided pause's resume; a tool's journal entry makes a retry safe)."""


# The SHA-1 of scripts whose writes need no replica's confirmation: what they keep may be lost
# in a failover at no cost (Slack's pacing, bot/store/delivery/pacing.py: at worst a call goes
# early, and Slack's 429 holds the bucket again), so they keep working while replicas lag.
UNREPLICATED: set[str] = set()


class Replicated(redis.Redis):
    """A client whose every script (every state transition of the bot is one) is answered only
    once `replicas` replicas hold its writes (`WAIT`, on the same connection, in the same round
    trip, at most `wait_ms`). With asynchronous replicas a failover can lose the primary's last
    writes, so two workers could each think they own a job, or a tool's journal entry could
    vanish and the tool run again; with this, nothing the bot acted on is lost with the old
    primary. Fewer confirmations raise `ReplicasBehind` (Redis cannot undo the write, so the
    bot does not build on it)."""

    replicas = 0
    wait_ms = 1000
    short = 0  # transitions a replica had not confirmed in time

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if (
            not self.replicas
            or str(args[0]).upper() not in ("EVALSHA", "EVAL")
            or (len(args) > 1 and args[1] in UNREPLICATED)
        ):
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        for _ in range(3):
            async with self.pipeline(transaction=False) as pipe:
                pipe.execute_command(*args, **options)
                pipe.execute_command("WAIT", self.replicas, self.wait_ms)
                result, acked = await pipe.execute(raise_on_error=False)
            demoted = isinstance(result, redis.ReadOnlyError) or (
                isinstance(acked, redis.ResponseError) and "replica" in str(acked)
            )
            if not demoted:
                break
            # This connection's server was demoted in a failover: reconnect (a Sentinel pool
            # asks for the new primary) and run the script again (transitions are safe to
            # repeat).
            await self.connection_pool.disconnect()
        else:
            raise redis.ConnectionError("the primary was demoted and no new one took over")
        if isinstance(result, Exception):
            raise result
        if isinstance(acked, Exception):
            raise acked
        if int(acked) < self.replicas:
            type(self).short += 1
            pool = self.connection_pool
            if isinstance(pool, SentinelConnectionPool):
                # A primary with no replica left may be the old one of a failover still under
                # way: ask the sentinels, and drop idle connections to it if so (else they
                # would keep writing to it what its demotion loses).
                with contextlib.suppress(redis.RedisError, OSError):
                    await pool.get_master_address()  # type: ignore[no-untyped-call]
            raise ReplicasBehind(
                f"a transition was confirmed by {acked} of {self.replicas} replica(s) within "
                f"{self.wait_ms} ms"
            )
        return result


class QuickPool(redis.BlockingConnectionPool):
    """A blocking pool that hands out a free connection, and takes one back, at once when no
    caller is waiting for one (no maintenance under way, no reconnect due).

    redis-py's blocking pool takes a condition, a timeout and a lock for each, and records
    observability counters that do nothing here: 15-20 µs of CPU a round trip, about 1 ms of a
    decision's 50 (py-spy of a burst of 200 decisions). Nothing awaits between the look at the
    free list and taking from it, so one event loop needs no lock there. When a caller waits,
    when a connection must reconnect, or in maintenance, the pool's own way is taken, which
    keeps its order and its wake-ups; a released connection still passes through the pool's
    released-connection listeners (re-authentication)."""

    async def get_connection(self, *args: Any, **options: Any) -> Any:
        free = self._available_connections
        if args or options or not free or self._in_maintenance or self._condition._waiters:
            return await super().get_connection(*args, **options)  # type: ignore[no-untyped-call]
        connection = free.pop()
        self._in_use_connections.add(connection)
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def release(self, connection: Any) -> None:
        dispatcher = self._event_dispatcher
        if (
            dispatcher is None
            or self._in_maintenance
            or self._condition._waiters
            or connection not in self._in_use_connections
            or connection.should_reconnect()
        ):
            await super().release(connection)
            return
        self._in_use_connections.remove(connection)
        self._available_connections.append(connection)
        await dispatcher.dispatch_async(AsyncAfterConnectionReleasedEvent(connection))  # type: ignore[no-untyped-call]


def replicated(replicas: int, wait_ms: int) -> type[redis.Redis]:
    """The client class for `connect` / `connect_sentinel`: plain, or `Replicated`."""
    if replicas <= 0:
        return redis.Redis
    return type("ReplicatedRedis", (Replicated,), {"replicas": replicas, "wait_ms": wait_ms})


def connect(
    url: str,
    *,
    max_connections: int,
    wait_seconds: float = 10.0,
    replicas: int = 0,
    wait_ms: int = 1000,
) -> redis.Redis:
    """A standalone server's client whose callers wait up to `wait_seconds` for a free
    connection (and, with `replicas`, for that many replicas to confirm each transition)."""
    pool = QuickPool.from_url(
        url,
        max_connections=max_connections,
        timeout=wait_seconds,
        socket_connect_timeout=5,
        socket_timeout=30,
        health_check_interval=30,
        retry=_retry(),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    return replicated(replicas, wait_ms)(connection_pool=untimed_small_writes(pool))


def connect_cluster(url: str, *, max_connections: int) -> redis.Redis:
    """A Redis Cluster client from the URL of any one node (`rediss://` and credentials in the
    URL are honoured): it learns the slots, follows MOVED/ASK and re-learns them after a
    failover.

    Typed as `redis.Redis`: the store uses only the commands, scripts and pipelines both
    clients share (transactions stay within one slot), which the cluster tests exercise."""
    cluster = RedisCluster.from_url(
        url,
        max_connections=max_connections * CLUSTER_CONNECTIONS_FACTOR,
        socket_connect_timeout=5,
        socket_timeout=30,
        retry=_retry(),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    return cast(redis.Redis, cluster)


class BlockingSentinelPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """Sentinel's pool (it asks the sentinels for the primary, and drops its connections when
    the primary changes) with the blocking pool's waiting for a free connection."""


@dataclass(frozen=True)
class SentinelTarget:
    """What a `redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]` URL
    names. The credentials are the data nodes'; the sentinels are asked without them."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int
    username: str | None
    password: str | None
    tls: bool

    @classmethod
    def parse(cls, url: str) -> SentinelTarget:
        parts = urlsplit(url)
        if parts.scheme not in SENTINEL_SCHEMES:
            raise ValueError(f"not a Sentinel URL (scheme {parts.scheme!r})")
        where = parts.netloc.rpartition("@")[2]
        sentinels = []
        for item in where.split(","):
            host, _, port = item.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"a sentinel is host:port, not {item!r}")
            sentinels.append((host.strip("[]"), int(port)))
        path = [p for p in parts.path.split("/") if p]
        if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
            raise ValueError("the path is /<service name>[/<db>], e.g. /mymaster/0")
        return cls(
            sentinels=sentinels,
            service=unquote(path[0]),
            db=int(path[1]) if len(path) == 2 else 0,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=parts.scheme == "rediss+sentinel",
        )


def connect_sentinel(
    url: str,
    *,
    max_connections: int,
    wait_seconds: float = 10.0,
    replicas: int = 0,
    wait_ms: int = 1000,
) -> redis.Redis:
    """The primary a set of sentinels names, re-asked after a failover: a connection that finds
    the old primary gone (or read-only) reconnects to the new one, and a command that failed on
    the way is retried (`_retry`; the transition scripts are safe to repeat)."""
    target = SentinelTarget.parse(url)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        target.sentinels, socket_connect_timeout=5, socket_timeout=5
    )
    primary = sentinel.master_for(
        target.service,
        redis_class=replicated(replicas, wait_ms),
        connection_pool_class=BlockingSentinelPool,
        max_connections=max_connections,
        timeout=wait_seconds,
        db=target.db,
        username=target.username,
        password=target.password,
        ssl=target.tls,
        socket_connect_timeout=5,
        socket_timeout=30,
        health_check_interval=30,
        retry=_retry(),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError],
    )
    untimed_small_writes(primary.connection_pool)
    return cast(redis.Redis, primary)


async def detect_mode(url: str) -> Literal["standalone", "cluster"]:
    """Whether the server at `url` is a cluster node (`INFO cluster`: `cluster_enabled:1`).
    A server that does not answer raises, as the bot's first command would."""
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        info = await client.info("cluster")
    except redis.ResponseError:  # a proxy or managed service without INFO cluster: standalone
        return "standalone"
    finally:
        await client.aclose()
    return "cluster" if str(info.get("cluster_enabled", 0)) == "1" else "standalone"


async def open_redis(
    url: str,
    *,
    max_connections: int,
    mode: RedisMode | RedisKind = "auto",
    replicas: int = 0,
    wait_ms: int = 1000,
) -> tuple[redis.Redis, RedisKind]:
    """The client for `url` and the kind of Redis it talks to (asked of it when `auto`);
    `replicas` > 0 makes each transition wait for that many replicas (not on a cluster, whose
    primaries each have their own)."""
    sized: dict[str, Any] = {"max_connections": max_connections}
    waiting: dict[str, Any] = {"replicas": replicas, "wait_ms": wait_ms}
    if urlsplit(url).scheme in SENTINEL_SCHEMES:
        return connect_sentinel(url, **sized, **waiting), "sentinel"
    kind = await detect_mode(url) if mode in ("auto", "sentinel") else mode
    if kind == "cluster":
        return connect_cluster(url, **sized), "cluster"
    return connect(url, **sized, **waiting), "standalone"


def is_cluster(client: redis.Redis) -> bool:
    """Whether `client` is a Redis Cluster client (see `connect_cluster`)."""
    return isinstance(client, RedisCluster)


async def primaries(client: redis.Redis) -> str:
    """Which servers answer as primary now: their `run_id`s (a cluster's primaries, sorted and
    joined). It changes when a failover promotes a replica or a server restarts: writes
    acknowledged by the old primary just before may be gone, so the sweeper looks at every
    active run again (see `Sweeper.sweep_forever`)."""
    if is_cluster(client):
        cluster = cast(RedisCluster, client)
        reply: Any = await cluster.info("server", target_nodes=RedisCluster.PRIMARIES)
    else:
        reply = await client.info("server")
    if "run_id" in reply:
        return str(reply["run_id"])
    return ",".join(sorted(str(info.get("run_id", "")) for info in reply.values()))


class RedisUnavailable(ApprovalBotError):
    """No REDIS_URL and no redis-server to start: the message says how to fix it."""


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive SIGTERM when this process dies (Linux
    `PR_SET_PDEATHSIG`; strictly, when the thread that started it ends: start it from a thread
    that lives as long as the server, such as the event loop's). Elsewhere None: a server left
    by a killed bot is stopped by the next bot on the same data directory."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the line above: do not start
            os._exit(1)

    return preexec


PORT_ATTEMPTS = 5


def _same_directory(path: str, directory: Path) -> bool:
    return Path(path) == directory.resolve()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A run or call hash holding realistic text (a 150-character task, 100 characters of arguments)
# has values past Redis's default 64-byte listpack limit, which turns the whole hash into a
# hashtable about 3.5 times its size (432 -> 1,552 bytes). Values up to 1 KB keep the compact
# encoding; a hash has at most a few dozen fields, so a lookup in it stays cheap. docs/scaling.md's
# "Redis settings for production" names the same settings.
LISTPACK_SETTINGS = ("--hash-max-listpack-value", "1024", "--hash-max-listpack-entries", "128")


class EmbeddedRedis:
    """A private `redis-server` on loopback, with its AOF kept in the bot's data directory.

    Settings are the durable ones recommended for the bot: AOF with `appendfsync everysec` (at most
    about a second of writes lost on a machine crash) and `noeviction` (Redis never drops a pending
    approval to make room; writes fail loudly instead).
    """

    def __init__(self, data_dir: Path, *, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or _free_port()
        self._port_chosen = not port  # ours to change when another process took it first
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailable(
                "REDIS_URL is not set and no `redis-server` is on PATH. Either install Redis "
                "(Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`) so "
                "the bot can start its own, or set REDIS_URL=redis://host:6379/0."
            )
        return [
            binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.data_dir.resolve()),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--maxmemory-policy", "noeviction",
            *LISTPACK_SETTINGS,
            "--protected-mode", "yes",
            "--logfile", "redis.log",
        ]  # fmt: skip

    async def start(self, timeout: float = 10.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await self._stop_leftover()
        # The port was free when chosen; another process may have bound it since (an outgoing
        # connection given it as its local port, another server): then on another port.
        for _ in range(PORT_ATTEMPTS - 1):
            if await self._launch(timeout) or not self._port_chosen:
                break
            log.info("port %d was taken before the redis-server bound it: another", self.port)
            self.port = _free_port()
        else:
            await self._launch(timeout)
        if self.process is None:
            raise RedisUnavailable(
                f"the embedded redis-server could not bind a port; see {self._log}"
            )
        (self.data_dir / "redis.port").write_text(str(self.port))  # for `audit` and restarts
        log.info(
            "started embedded redis-server on 127.0.0.1:%d (data in %s)", self.port, self.data_dir
        )

    @property
    def _log(self) -> Path:
        return self.data_dir / "redis.log"

    async def _launch(self, timeout: float) -> bool:
        """Start the server on `self.port` and wait until it answers; False (and no process)
        when its port was taken first."""
        logged = self._log.stat().st_size if self._log.exists() else 0
        # Its own session: a Ctrl-C or SIGTERM to the bot's process group must not stop Redis
        # while the bot is still draining; the bot stops it last. If the bot dies without
        # stopping it (SIGKILL, OOM), the kernel sends it SIGTERM (a clean shutdown).
        process = self.process = subprocess.Popen(  # noqa: ASYNC220
            self.command(),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
        try:
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                try:
                    # This very process: a server another test or bot started may answer there.
                    info = await client.info("server")
                    if int(info.get("process_id", 0)) == process.pid:
                        return True
                except (redis.RedisError, OSError):  # not up yet, or not a Redis at all
                    pass
                exited = process.poll() is not None
                if exited and b"Address already in use" in self._logged_since(logged):
                    self.process = None
                    return False
                if exited or asyncio.get_running_loop().time() > deadline:
                    self.stop()
                    raise RedisUnavailable(
                        f"the embedded redis-server did not start; see {self._log}"
                    )
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    def _logged_since(self, offset: int) -> bytes:
        try:
            with self._log.open("rb") as log_file:
                log_file.seek(offset)
                return log_file.read()
        except OSError:
            return b""

    async def _stop_leftover(self) -> None:
        """A bot killed with SIGKILL leaves its redis-server running on this directory: shut it
        down (it writes its AOF) so that two servers never share one AOF."""
        url = await self.running_url(self.data_dir)
        if url is None:
            return
        log.warning("stopping the redis-server a previous bot left running on %s", self.data_dir)
        client = redis.Redis.from_url(url)
        try:
            await client.shutdown()
        except (redis.ConnectionError, OSError):
            pass  # it closes the connection as it exits
        finally:
            await client.aclose()
        for _ in range(100):
            if await self.running_url(self.data_dir) is None:
                return
            await asyncio.sleep(0.05)

    @staticmethod
    async def running_url(data_dir: Path) -> str | None:
        """The URL of a bot's embedded redis-server that is running on `data_dir`, if any."""
        try:
            port = int((data_dir / "redis.port").read_text())
        except (OSError, ValueError):
            return None
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        try:
            # The port may be another server's by now (the file outlives the server).
            found = await client.config_get("dir")
            return url if _same_directory(found.get("dir") or "", data_dir) else None
        except (redis.RedisError, OSError):
            return None
        finally:
            await client.aclose()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None
