"""`/metrics`, `/healthz` and `/readyz`: on the Slack HTTP app in HTTP mode, and on a small
HTTP server of their own in worker and Socket Mode processes (which receive nothing over HTTP).

- `/healthz` is liveness: 200 while the process serves requests, without touching Redis, so an
  orchestrator does not restart every replica while Redis is briefly away.
- `/readyz` is readiness: 200 when Redis answers a PING within a second and Slack has accepted
  the bot token (`auth.test`), 503 otherwise, saying which. Of several serving processes
  (`bot.processes`), whichever answers answers for all: 503 too when another that serves has
  lost Redis or its token (as its own gauges say), naming it, since a share of Slack's
  requests goes to it.
- `/metrics` refreshes the gauges read from Redis (with the same short timeout), then renders
  (the whole of several serving processes: `bot.metrics.share`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web

from bot import metrics
from bot.errors import ApprovalBotError
from bot.listening import start_site

log = logging.getLogger(__name__)

PROBE_SECONDS = 1.0

Check = Callable[[], Awaitable[bool]]
Refresh = Callable[[], Awaitable[None]]
SlackProblem = Callable[[], "str | None"]


def _no_problem() -> str | None:
    return None


def routes(ready: Check, refresh: Refresh, slack: SlackProblem = _no_problem) -> list[web.RouteDef]:
    """The three endpoints; `ready` pings Redis, `refresh` updates the Redis-backed gauges,
    `slack` says why Slack does not accept the token (None: it does)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(_: web.Request) -> web.Response:
        try:
            up = await asyncio.wait_for(ready(), PROBE_SECONDS)
        except Exception:  # a timeout, or Redis refused
            up = False
        problem = slack()
        others = metrics.others_unready()
        said: dict[str, object] = {
            "ok": up and problem is None and not others,
            "redis": "up" if up else "unreachable",
            "slack": "up" if problem is None else problem,
        }
        if others:
            said["processes"] = {f"pid {pid}": what for pid, what in sorted(others.items())}
        return web.json_response(said, status=200 if said["ok"] else 503)

    async def scrape(_: web.Request) -> web.Response:
        try:
            await asyncio.wait_for(refresh(), PROBE_SECONDS)
        except Exception:
            metrics.SCRAPE_ERRORS.inc()
            log.warning("could not read the queue and pending calls for /metrics", exc_info=True)
        body, content_type = metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", scrape)]


class PortUnavailable(ApprovalBotError):
    """The operations port cannot be opened: the message says which and what to do."""


class OpsServer:
    """The small HTTP server of a process without a Slack HTTP endpoint."""

    def __init__(
        self,
        host: str,
        port: int,
        ready: Check,
        refresh: Refresh,
        slack: SlackProblem = _no_problem,
        *,
        sock: socket.socket | None = None,
    ) -> None:
        self.host, self.port, self.sock = host, port, sock
        app = web.Application()
        app.add_routes(routes(ready, refresh, slack))
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        self._started = False

    async def start(self) -> None:
        await self._runner.setup()
        self._started = True
        try:
            self.port = await start_site(self._runner, self.host, self.port, sock=self.sock)
        except OSError as exc:
            await self.stop()
            raise PortUnavailable(
                f"cannot serve /metrics on {self.host}:{self.port} ({exc.strerror or exc}). "
                "Choose another with --metrics-port or APPROVAL_BOT_METRICS_PORT (0: none)."
            ) from exc
        log.info("metrics and health on http://%s:%d (/metrics, /healthz, /readyz)",
                 self.host, self.port)  # fmt: skip

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._runner.cleanup()
