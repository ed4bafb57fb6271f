"""The composition root: builds Redis, store, engine, service and the Slack app from Settings,
and serves them over HTTP (`/slack/events`, `/healthz`) or Socket Mode."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import Settings
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Engine
from bot.service.approvals import ApprovalService
from bot.service.authorize import Authorizer
from bot.service.limits import StartLimits
from bot.service.policy_source import PolicySource
from bot.service.worker import Worker
from bot.slack.app import build_app
from bot.slack.blocks import use_slack_api
from bot.slack.groups import SlackGroups
from bot.slack.installation import learn_installation, learn_once
from bot.slack.intake import refuse
from bot.slack.notifier import SlackNotifier
from bot.store.admission import AdmissionStore, Quota
from bot.store.audit import AuditLog
from bot.store.connection import EmbeddedRedis, connect
from bot.store.journal import RedisJournal
from bot.store.queue import JobQueue
from bot.store.runs import RunStore

log = logging.getLogger(__name__)

DRAIN_SECONDS = 30.0


class BotRuntime:
    """One bot process: call `start()`, serve, then `stop()`."""

    def __init__(
        self,
        settings: Settings,
        *,
        registry: AgentRegistry | None = None,
        policies: PolicySource | None = None,
        socket_mode: bool = False,
        with_worker: bool = True,
    ) -> None:
        self.settings = settings
        self.socket_mode = socket_mode
        self.with_worker = with_worker
        self.registry = registry or AgentRegistry.load(settings.agents)
        self.policies = policies or PolicySource.from_file(settings.policy_file)
        self.embedded: EmbeddedRedis | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._installation: asyncio.Task[None] | None = None
        self.worker: Worker | None = None
        self.service: ApprovalService
        self.app: AsyncApp

    async def start(self) -> None:
        s = self.settings
        url = s.redis_url
        if url is None:
            self.embedded = EmbeddedRedis(s.data_dir)
            await self.embedded.start()
            url = self.embedded.url
        self.redis = connect(url, max_connections=s.redis_max_connections)
        retention = s.run_retention_days * 86400
        store = RunStore(self.redis, retention_seconds=retention)
        self.leases = connect(url, max_connections=4)
        self.queue = JobQueue(self.redis, lease_seconds=s.job_lease_seconds, leases=self.leases)
        token = s.slack_bot_token.get_secret_value() if s.slack_bot_token else None
        self.client = AsyncWebClient(token=token, base_url=s.slack_api_url)
        use_slack_api(s.slack_api_url)
        engine = Engine(self.registry, rejection_text=s.rejection_text, max_turns=s.max_turns)
        authorizer = Authorizer(SlackGroups(self.client))
        # Learned before serving when Slack answers; retried in the background if not (until
        # then every request is refused, closed).
        if not await learn_once(self.client, authorizer):
            self._installation = asyncio.create_task(
                learn_installation(self.client, authorizer), name="auth.test"
            )
        self.service = ApprovalService(
            store=store,
            engine=engine,
            notifier=SlackNotifier(self.client),
            policies=self.policies,
            authorizer=authorizer,
            audit=AuditLog(self.redis, retention_days=s.audit_retention_days),
            queue=self.queue,
            journal=RedisJournal(self.redis, retention_seconds=retention),
            admission=AdmissionStore(self.redis, retention_seconds=retention),
            limits=StartLimits(
                Quota(
                    user_per_minute=s.user_starts_per_minute,
                    user_burst=s.user_start_burst,
                    channel_per_minute=s.channel_starts_per_minute,
                    channel_burst=s.channel_start_burst,
                    user_open=s.user_open_runs,
                    channel_open=s.channel_open_runs,
                ),
                max_task_chars=s.max_task_chars,
            ),
        )
        secret = s.slack_signing_secret.get_secret_value() if s.slack_signing_secret else None
        if secret is not None or self.socket_mode:  # a worker-only process receives nothing
            self.app = build_app(
                client=self.client,
                signing_secret=secret,
                service=self.service,
                socket_mode=self.socket_mode,
            )
        policy = await store.eviction_policy()
        if policy not in (None, "noeviction"):
            log.warning(
                "Redis maxmemory-policy is %r: under memory pressure Redis may evict pending "
                "approvals and run state. Set `maxmemory-policy noeviction`.",
                policy,
            )
        await self.queue.ensure_group()
        self._sweeper = asyncio.create_task(
            self.service.sweep_forever(s.job_lease_seconds), name="sweeper"
        )
        if self.with_worker:
            self.worker = Worker(
                self.service,
                self.queue,
                concurrency=s.worker_concurrency,
                lease_seconds=s.job_lease_seconds,
            )
            self._worker_task = asyncio.create_task(self.worker.run(), name="worker")

    async def stop(self) -> None:
        await _cancel(self._installation)
        # Finish in-flight runs while still heartbeating, so no other process takes them for
        # orphans; only then stop the loops.
        await _cancel(self._sweeper)
        if self.worker is not None:  # no new jobs; the ones in hand finish
            await self.worker.stop(self._worker_task, DRAIN_SECONDS)
        await _cancel(self._worker_task)
        await self.service.drain(DRAIN_SECONDS)
        await self.redis.aclose()
        await self.leases.aclose()
        if self.embedded is not None:
            self.embedded.stop()

    # HTTP ---------------------------------------------------------------------------------

    def web_app(self) -> web.Application:
        """`POST /slack/events` for everything Slack sends; `GET /healthz` for load balancers."""

        secret = self.settings.slack_signing_secret
        signing_secret = secret.get_secret_value() if secret is not None else None

        async def events(request: web.Request) -> web.Response:
            body = await request.read()
            refusal = refuse(signing_secret, body, request.headers, request.content_type)
            if refusal is not None:
                return web.Response(status=refusal.status, text=refusal.reason)
            bolt_response = await self.app.async_dispatch(await to_bolt_request(request))
            return await to_aiohttp_response(bolt_response)

        async def healthz(_: web.Request) -> web.Response:
            if await self.service.store.ping():
                return web.json_response({"ok": True, "redis": "up"})
            return web.json_response({"ok": False, "redis": "unreachable"}, status=503)

        web_app = web.Application(client_max_size=1024 * 1024)
        web_app.add_routes([web.post("/slack/events", events), web.get("/healthz", healthz)])
        return web_app


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def serve_http(runtime: BotRuntime, host: str, port: int, stop: asyncio.Event) -> None:
    await runtime.start()
    runner = web.AppRunner(runtime.web_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info("serving Slack on http://%s:%d/slack/events (health: /healthz)", host, port)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await runtime.stop()


async def serve_socket(runtime: BotRuntime, stop: asyncio.Event) -> None:
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

    await runtime.start()
    token = runtime.settings.slack_app_token
    assert token is not None
    handler = AsyncSocketModeHandler(runtime.app, token.get_secret_value())
    await handler.connect_async()  # type: ignore[no-untyped-call]
    log.info("connected to Slack in Socket Mode")
    try:
        await stop.wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
        await runtime.stop()


def install_signal_handlers(stop: asyncio.Event) -> Callable[[], None]:
    import signal

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def remove() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    return remove


async def serve_worker(runtime: BotRuntime, stop: asyncio.Event) -> None:
    """A process that only runs jobs (and the sweeper); Slack reaches the `serve` processes."""
    await runtime.start()
    log.info("worker %s taking jobs", runtime.worker.consumer if runtime.worker else "?")
    try:
        await stop.wait()
    finally:
        await runtime.stop()
