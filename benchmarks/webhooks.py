"""Decision webhooks (#19), as figures: `python -m benchmarks.webhooks [REDIS_URL]`.

`EVENTS` audit entries are appended (as the bot appends them), then one `WebhookSender`
delivers them to a receiver on 127.0.0.1 that verifies each signature and answers 200. Printed:
Redis commands per delivered event (INFO's `total_commands_processed`, less this benchmark's
own reads), the CPU seconds of this process per event (sender and receiver share it), and
events per second (wall time: on a loaded machine, read it as a rough figure). The decision
path itself gains no command: the audit entry it already writes is the event.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import sys
import tempfile
import time
from pathlib import Path

import redis.asyncio as aioredis
from aiohttp import web

from bot.store.connection import EmbeddedRedis
from bot.store.trail.audit import AuditLog
from bot.store.trail.webhooks import WebhookOutbox
from bot.webhooks import WebhookSender

EVENTS = 2000
SECRET = "benchmark-webhook-secret-0123456789"


async def measure(redis_url: str) -> dict[str, float]:
    client = aioredis.Redis.from_url(redis_url)
    await client.flushdb()
    received: list[str] = []
    all_in = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        stamp = request.headers["X-Approval-Bot-Timestamp"]
        mac = hmac.new(SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
        assert hmac.compare_digest("v0=" + mac.hexdigest(), request.headers[
            "X-Approval-Bot-Signature"])  # fmt: skip
        received.append(request.headers["Idempotency-Key"])
        if len(received) >= EVENTS:
            all_in.set()
        return web.Response(status=200)

    app = web.Application()
    app.add_routes([web.post("/hook", hook)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    outbox = WebhookOutbox(client)
    await outbox.begin()
    audit = AuditLog(client)
    for i in range(EVENTS):
        await audit.append("decided", run_id=f"{i % 50:016x}", user="U2", decision="approve")
    sender = WebhookSender(
        outbox, audit, url=f"http://127.0.0.1:{port}/hook", secret=SECRET, timeout=5.0,
        retry=0.05, retry_max=0.2, max_age=3600.0, lease=30.0,
    )  # fmt: skip
    before = int((await client.info("stats"))["total_commands_processed"])
    cpu, wall = time.process_time(), time.perf_counter()
    task = asyncio.create_task(sender.run())
    await all_in.wait()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await sender.stop()
    task.cancel()
    after = int((await client.info("stats"))["total_commands_processed"])
    await runner.cleanup()
    await client.aclose()
    own = 2  # the two INFO calls
    return {
        "events": EVENTS,
        "redis_commands_per_event": (after - before - own) / EVENTS,
        "cpu_ms_per_event": cpu * 1000 / EVENTS,
        "events_per_second": EVENTS / wall,
    }


async def main() -> None:
    if len(sys.argv) > 1:
        figures = await measure(sys.argv[1])  # flushes that database
    else:
        with tempfile.TemporaryDirectory() as tmp:
            server = EmbeddedRedis(Path(tmp))
            await server.start()
            try:
                figures = await measure(server.url)
            finally:
                server.stop()
    for name, value in figures.items():
        print(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    asyncio.run(main())
