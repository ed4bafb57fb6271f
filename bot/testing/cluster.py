"""A real Redis Cluster on loopback for tests and benchmarks: three `redis-server
--cluster-enabled yes` primaries, owned by pid and stopped by whoever started them.

The slots are assigned and the nodes introduced with plain commands (`CLUSTER ADDSLOTSRANGE`,
`CLUSTER MEET`), so nothing beyond `redis-server` is needed. `redis_for(url)` is the client a
test reads Redis with: a cluster client when the URL names a cluster node, so the same test body
runs on either kind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from bot.store.connection import LISTPACK_SETTINGS, RedisUnavailable, detect_mode, die_with_parent

SLOTS = 16384


PORT_ATTEMPTS = 5


def _free_port(*, bus: bool = False) -> int:
    """A port free now (with `bus`, its cluster bus port, port + 10000, too). Another process
    may bind it before the server does: `_start_server` then tries another."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if not bus:
            return port
        if port + 10000 > 65535:
            continue
        with socket.socket() as other:
            try:
                other.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def _start_server(
    args: Callable[[int], list[str]], folder: Path, *, bus: bool = False, timeout: float = 20.0
) -> tuple[subprocess.Popen[bytes], int]:
    """`redis-server <args(port)>` in `folder` on a free port, answering; the process and its
    port. When another process took the port first (another test's server, a connection given
    it as its local port), on another port: a test never talks to a server not its own."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisUnavailable("no `redis-server` on PATH for the test servers")
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "redis.log"
    for _ in range(PORT_ATTEMPTS):
        port = _free_port(bus=bus)
        logged = log.stat().st_size if log.exists() else 0
        process = subprocess.Popen(
            [binary, *args(port), "--dir", str(folder), "--logfile", "redis.log"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # a test killed outright leaves none behind
        )
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
        try:
            while True:
                with contextlib.suppress(redis.RedisError, OSError, ValueError):
                    if int(client.info("server").get("process_id", 0)) == process.pid:
                        return process, port
                if process.poll() is not None:
                    with log.open("rb") as text:
                        text.seek(logged)
                        if b"Address already in use" in text.read():
                            break  # try another port
                if process.poll() is not None or time.monotonic() > deadline:
                    _stop_all([process])
                    raise RedisUnavailable(f"a test redis-server did not start; see {log}")
                time.sleep(0.05)
        finally:
            client.close()
    raise RedisUnavailable(f"no free port for a test redis-server in {PORT_ATTEMPTS} attempts")


def _stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every server still running, then wait for each (SIGKILL after 10 s)."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class LocalCluster:
    """Three primaries (no replicas) in `directory`, each slot range on one of them."""

    def __init__(self, directory: Path, *, nodes: int = 3, node_timeout_ms: int = 2000) -> None:
        self.directory = directory
        self.nodes = nodes
        self.node_timeout_ms = node_timeout_ms  # how soon the others call a silent node failed
        self.ports: list[int] = []  # known once started
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """Any one node's URL is enough: the client learns the others."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, timeout: float = 20.0) -> None:
        def node(port: int) -> list[str]:
            command = ["--bind", "127.0.0.1", "--port", str(port)]
            command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            command += ["--save", "", "--appendonly", "no"]
            command += ["--maxmemory-policy", "noeviction", *LISTPACK_SETTINGS]
            return [*command, "--cluster-node-timeout", str(self.node_timeout_ms)]

        for index in range(self.nodes):
            process, port = _start_server(node, self.directory / f"node{index}", bus=True)
            self.processes.append(process)
            self.ports.append(port)
        clients = [redis.Redis(port=port, socket_connect_timeout=1) for port in self.ports]
        try:
            deadline = time.monotonic() + timeout
            share = SLOTS // len(clients)
            for index, client in enumerate(clients):
                last = SLOTS - 1 if index == len(clients) - 1 else (index + 1) * share - 1
                client.execute_command("CLUSTER ADDSLOTSRANGE", index * share, last)  # type: ignore[no-untyped-call]
            for port in self.ports[1:]:
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", port)  # type: ignore[no-untyped-call]
            while not all(self._formed(client) for client in clients):
                if time.monotonic() > deadline:
                    raise RedisUnavailable("the test cluster did not reach cluster_state:ok")
                time.sleep(0.05)
        finally:
            for client in clients:
                client.close()

    def _formed(self, client: redis.Redis) -> bool:
        """This node serves every slot and knows every other node."""
        info = client.execute_command("CLUSTER INFO")  # type: ignore[no-untyped-call]
        fields = {str(k): str(v) for k, v in dict(info).items()}  # redis-py parses the reply
        return fields.get("cluster_state") == "ok" and fields.get("cluster_known_nodes") == str(
            len(self.ports)
        )

    def flush(self) -> None:
        """Empty every node (a test starts from nothing)."""
        for port in self.ports:
            client = redis.Redis(port=port)
            try:
                client.flushall()
                client.config_resetstat()
            finally:
                client.close()

    def refusals(self) -> dict[str, int]:
        """The errors the nodes answered that mean a command or script spanned slots
        (`CROSSSLOT`) or a transaction could not run on one node, summed over the nodes since
        the last `flush` (which resets them): a test on the cluster expects none."""
        found: dict[str, int] = {}
        for port in self.ports:
            client = redis.Redis(port=port)
            try:
                stats = client.info("errorstats")
            finally:
                client.close()
            for name, value in stats.items():
                kind = name.removeprefix("errorstat_")
                if kind in ("CROSSSLOT", "EXECABORT"):
                    found[kind] = found.get(kind, 0) + int(dict(value).get("count", 0))
        return found

    def keys_per_node(self) -> dict[int, int]:
        """How many keys each node holds (to see how the data spreads)."""
        counts: dict[int, int] = {}
        for port in self.ports:
            client = redis.Redis(port=port)
            try:
                counts[port] = int(client.dbsize())
            finally:
                client.close()
        return counts

    def stop_node(self, index: int) -> None:
        """Stop one node (its slots are then served by no one: the cluster fails)."""
        process = self.processes[index]
        process.terminate()
        process.wait(timeout=10)

    def stop(self) -> None:
        _stop_all(self.processes)
        self.processes = []


async def redis_for(url: str, *, decode_responses: bool = False) -> aioredis.Redis:
    """A client for a test to read Redis with: a cluster client when `url` names a cluster
    node (typed as `redis.asyncio.Redis`, as the bot's own is)."""
    if await detect_mode(url) == "cluster":
        cluster = RedisCluster.from_url(url, decode_responses=decode_responses)
        return cast(aioredis.Redis, cluster)
    return aioredis.from_url(url, decode_responses=decode_responses)


class LocalSentinel:
    """A primary, one replica and one sentinel watching them (`service`), on loopback: enough
    for a failover forced with `SENTINEL FAILOVER` (a lone sentinel needs no quorum for it)."""

    service = "approvals"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.primary_port = self.replica_port = self.sentinel_port = 0  # known once started
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{self.service}/0"

    def _start(self, name: str, args: Callable[[int], list[str]]) -> int:
        process, port = _start_server(args, self.directory / name)
        self.processes.append(process)
        return port

    def start(self, timeout: float = 20.0) -> None:
        data = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"]
        data += ["--maxmemory-policy", "noeviction", *LISTPACK_SETTINGS]
        # The first sync starts at once (Redis's default waits 5 s for more replicas to join
        # it). Only the first: the replica, once promoted, syncs the old primary as Redis does
        # by default, as it would in production (the failover tests' timing is Redis's own).
        at_once = ["--repl-diskless-sync-delay", "0"]
        self.primary_port = self._start(
            "primary", lambda port: ["--port", str(port), *data, *at_once]
        )
        self.replica_port = self._start(
            "replica",
            lambda port: ["--port", str(port), *data,
                          "--replicaof", "127.0.0.1", str(self.primary_port)],
        )  # fmt: skip

        def sentinel(port: int) -> list[str]:
            config = self.directory / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\n"
                f"sentinel monitor {self.service} 127.0.0.1 {self.primary_port} 1\n"
                f"sentinel down-after-milliseconds {self.service} 1000\n"
                f"sentinel failover-timeout {self.service} 10000\n"
            )
            return [str(config), "--sentinel"]

        # The replica in sync before the sentinel starts: the sentinel reads each replica's
        # state when it finds it, then only every 10 s, and will not promote one it last saw
        # with its link down ("NOGOODSLAVE").
        deadline = time.monotonic() + timeout
        while not self._in_sync():
            if time.monotonic() > deadline:
                raise RedisUnavailable("the test replica did not sync in time")
            time.sleep(0.02)
        self.sentinel_port = self._start("sentinel", sentinel)
        while not self._promotable():
            if time.monotonic() > deadline:
                raise RedisUnavailable("the test sentinel did not see its replica in time")
            time.sleep(0.02)

    def _sentinel(self) -> redis.Redis:
        return redis.Redis(port=self.sentinel_port, socket_connect_timeout=1)

    def replicas_known(self) -> int:
        client = self._sentinel()
        try:
            return len(client.sentinel_slaves(self.service))  # type: ignore[no-untyped-call]
        except redis.RedisError:
            return 0
        finally:
            client.close()

    def _promotable(self) -> bool:
        """The sentinel knows a replica whose link to the primary it saw up."""
        client = self._sentinel()
        try:
            found: Any = client.sentinel_slaves(self.service)  # type: ignore[no-untyped-call]
        except redis.RedisError:
            return False
        finally:
            client.close()
        return any(replica.get("master-link-status") == "ok" for replica in found)

    def _in_sync(self) -> bool:
        client = redis.Redis(port=self.replica_port, socket_connect_timeout=1)
        try:
            return client.info("replication").get("master_link_status") == "up"
        except redis.RedisError:
            return False
        finally:
            client.close()

    def primary(self) -> int:
        """The port of the primary the sentinel names now."""
        client = self._sentinel()
        try:
            found: Any = client.execute_command(  # type: ignore[no-untyped-call]
                "SENTINEL GET-MASTER-ADDR-BY-NAME", self.service
            )
            return int(found[1])
        finally:
            client.close()

    def failover(self, timeout: float = 90.0) -> int:
        """Force a failover (`SENTINEL FAILOVER`) and wait until the other node is primary and
        takes writes; its port. The bound is generous: on a loaded machine a failover during a
        burst took over 30 s (a bound, not a measure)."""
        before = self.primary()
        deadline = time.monotonic() + timeout
        client = self._sentinel()
        try:
            while True:
                try:
                    client.execute_command("SENTINEL FAILOVER", self.service)  # type: ignore[no-untyped-call]
                    break
                except redis.ResponseError as exc:
                    # No replica it would promote yet (its view of one is refreshed every 10 s
                    # at most, e.g. after an earlier failover), or a failover still under way.
                    if not str(exc).startswith(("NOGOODSLAVE", "INPROG")):
                        raise
                    if time.monotonic() > deadline:
                        raise RedisUnavailable(f"the sentinel would not fail over: {exc}") from exc
                    time.sleep(0.1)
        finally:
            client.close()
        while True:
            now = self.primary()
            if now != before and self._writable(now):
                return now
            if time.monotonic() > deadline:
                raise RedisUnavailable("the forced failover did not finish in time")
            time.sleep(0.05)

    async def runs_left(self) -> str:
        """What a test that timed out needs to know: each run's status and error, from the
        primary the sentinel names now."""
        client: Any = aioredis.Redis(port=self.primary(), decode_responses=True)
        try:
            found: list[str] = []
            async for key in client.scan_iter(match="ab:{*}:run"):
                run = await client.hgetall(key)
                run_id = key.split("{")[1].split("}")[0]
                marks = await client.hgetall(f"ab:{{{run_id}}}:outbox")
                due = await client.zscore("ab:{outbox}:due", run_id)
                found.append(
                    f"{run_id}: {run.get('status')} attempts={run.get('attempts')} "
                    f"marks={sorted(k for k in marks if not k.endswith('@'))} "
                    f"outbox-indexed={due is not None} error={run.get('error', '')[:80]!r}"
                )
            return "runs: " + "; ".join(sorted(found))
        finally:
            await client.aclose()

    def stall_replica(self, seconds: float) -> None:
        """Freeze the replica (SIGSTOP) for `seconds`, then let it go on (SIGCONT, from a timer
        thread): every write meanwhile is one no replica confirms in time."""
        replica = self.processes[1]
        os.kill(replica.pid, signal.SIGSTOP)
        timer = threading.Timer(seconds, os.kill, (replica.pid, signal.SIGCONT))
        timer.daemon = True
        timer.start()

    @staticmethod
    def _writable(port: int) -> bool:
        client = redis.Redis(port=port, socket_connect_timeout=1)
        try:
            return client.info("replication").get("role") == "master"
        except redis.RedisError:
            return False
        finally:
            client.close()

    def stop(self) -> None:
        _stop_all(self.processes)
        self.processes = []
