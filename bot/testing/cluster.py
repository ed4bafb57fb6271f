"""A real Redis Cluster on loopback for tests and benchmarks: three `redis-server
--cluster-enabled yes` primaries, owned by pid and stopped by whoever started them.

The slots are assigned and the nodes introduced with plain commands (`CLUSTER ADDSLOTSRANGE`,
`CLUSTER MEET`), so nothing beyond `redis-server` is needed. `redis_for(url)` is the client a
test reads Redis with: a cluster client when the URL names a cluster node, so the same test body
runs on either kind.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from bot.store.connection import LISTPACK_SETTINGS, RedisUnavailable, detect_mode

SLOTS = 16384


def _free_ports(count: int) -> list[int]:
    """`count` free ports whose cluster bus ports (port + 10000) are free too."""
    found: list[int] = []
    while len(found) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 > 65535 or port in found:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        found.append(port)
    return found


class LocalCluster:
    """Three primaries (no replicas) in `directory`, each slot range on one of them."""

    def __init__(self, directory: Path, *, nodes: int = 3, node_timeout_ms: int = 2000) -> None:
        self.directory = directory
        self.node_timeout_ms = node_timeout_ms  # how soon the others call a silent node failed
        self.ports = _free_ports(nodes)
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """Any one node's URL is enough: the client learns the others."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, timeout: float = 20.0) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailable("no `redis-server` on PATH for the test cluster")
        for port in self.ports:
            folder = self.directory / str(port)
            folder.mkdir(parents=True, exist_ok=True)
            command = [binary, "--bind", "127.0.0.1", "--port", str(port)]
            command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            command += ["--dir", str(folder), "--save", "", "--appendonly", "no"]
            command += ["--maxmemory-policy", "noeviction", *LISTPACK_SETTINGS]
            command += ["--cluster-node-timeout", str(self.node_timeout_ms)]
            command += ["--logfile", "redis.log"]
            self.processes.append(
                subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
            )
        clients = [redis.Redis(port=port, socket_connect_timeout=1) for port in self.ports]
        try:
            deadline = time.monotonic() + timeout
            for client in clients:
                while True:
                    try:
                        client.ping()
                        break
                    except redis.ConnectionError:
                        if time.monotonic() > deadline:
                            raise RedisUnavailable(
                                "the test cluster's nodes did not start"
                            ) from None
                        time.sleep(0.05)
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
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes = []


async def redis_for(url: str, *, decode_responses: bool = False) -> aioredis.Redis:
    """A client for a test to read Redis with: a cluster client when `url` names a cluster
    node (typed as `redis.asyncio.Redis`, as the bot's own is)."""
    if await detect_mode(url) == "cluster":
        cluster = RedisCluster.from_url(url, decode_responses=decode_responses)
        return cast(aioredis.Redis, cluster)
    return aioredis.from_url(url, decode_responses=decode_responses)
