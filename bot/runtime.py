"""The composition root: builds Redis, store, engine, service and the Slack app from Settings,
and serves them over HTTP (`/slack/events`, `/metrics`, `/healthz`, `/readyz`) or Socket Mode
(with the same operations endpoints on a small port of their own, like a worker)."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import Callable
from functools import partial
from typing import Any

import aiohttp
from agents import Agent
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest

from bot import metrics, ops
from bot.clock import SYSTEM_CLOCK, Clock
from bot.config import Settings
from bot.engine.advisor import load_advisor
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Engine
from bot.engine.tracing import Tracing
from bot.listening import start_site
from bot.outage import OUTAGE
from bot.service.approvals import ApprovalService
from bot.service.authorize import Authorizer
from bot.service.foreground import Elsewhere, Foreground
from bot.service.oversight.advice import AdvisorSettings
from bot.service.oversight.attention import AttentionSettings
from bot.service.oversight.review_digest import ReviewDigests
from bot.service.policy.source import PolicySource
from bot.service.running.limits import StartLimits
from bot.service.running.worker import Worker
from bot.slack.api.notifier import SlackNotifier
from bot.slack.api.webapi import build_client
from bot.slack.app import build_app, remember_auth_test
from bot.slack.delivery.home import HomePublisher
from bot.slack.delivery.projector import Projector
from bot.slack.directory.channels import SlackChannels
from bot.slack.directory.groups import SlackGroups
from bot.slack.installs.installation import SlackAuth, learn_installation, learn_once
from bot.slack.installs.oauth import Distribution
from bot.slack.installs.tokens import WorkspaceTokens
from bot.slack.intake import Refusal, admit, bolt_request
from bot.slack.render.base import use_slack_api
from bot.slack.review_digest import DigestPoster
from bot.stopping import cancel_and_wait
from bot.store.admission import AdmissionStore, Quota
from bot.store.connection import EmbeddedRedis, open_redis
from bot.store.delivery.pacing import SharedPacer
from bot.store.installs.installations import RedisInstallationStore, TokenCipher
from bot.store.installs.oauth_states import RedisStateStore
from bot.store.journal import RedisJournal
from bot.store.queue import JobQueue
from bot.store.runs import RunStore
from bot.store.trail.audit import AuditLog
from bot.store.trail.webhooks import WebhookOutbox
from bot.webhooks import WebhookSender
from bot.weekly import parse_schedule

log = logging.getLogger(__name__)

# Of the shutdown budget (APPROVAL_BOT_DRAIN_SECONDS), what in-flight HTTP requests may take:
# listeners answer within Slack's three seconds.
HTTP_DRAIN_SECONDS = 3.0


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
        clock: Clock = SYSTEM_CLOCK,
        advisor: Agent[Any] | None = None,
        elsewhere: Elsewhere | None = None,
    ) -> None:
        self.settings = settings
        # The other serving processes' requests in flight (`serve --processes`): acks first
        # over all of them (`bot.service.foreground`).
        self.elsewhere = elsewhere
        self.clock = clock  # when timers are due (tests pass a clock they move forward)
        self.socket_mode = socket_mode
        self.with_worker = with_worker
        self.registry = registry or AgentRegistry.load(settings.agents)
        # The second opinion on each card: given (the sandbox's, a test's), or the setting's.
        self.advisor = advisor or (load_advisor(settings.advisor) if settings.advisor else None)
        self.policies = policies or PolicySource.from_file(
            settings.policy_file, check_every=settings.policy_check_seconds
        )
        self.embedded: EmbeddedRedis | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._timers: asyncio.Task[None] | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._installation: asyncio.Task[None] | None = None
        self._stopping = False
        self.slack_auth = SlackAuth()  # whether Slack accepts the token (auth.test)
        self.worker: Worker | None = None
        self.projector: Projector
        self._projector_task: asyncio.Task[None] | None = None
        self.home: HomePublisher
        self._home_task: asyncio.Task[None] | None = None
        self.http: aiohttp.ClientSession | None = None
        self.webhooks: WebhookSender | None = None
        self._webhooks_task: asyncio.Task[None] | None = None
        self.service: ApprovalService
        self.app: AsyncApp
        self.distribution: Distribution | None = None  # OAuth distribution's parts, if set
        self.digests: ReviewDigests | None = None  # the weekly review digest, when set

    def _distribution(self) -> Distribution:
        """OAuth distribution's parts (bot/slack/installs/oauth.py): installations and states in
        Redis, each workspace's token found (and refreshed) for the bot's own calls."""
        s = self.settings
        assert s.slack_client_id is not None and s.slack_client_secret is not None
        secret = s.slack_client_secret.get_secret_value()
        assert self.http is not None
        installations = RedisInstallationStore(self.redis, TokenCipher(s.token_key_list()))
        plain = build_client(None, s.slack_api_url, self.http, timeout=s.slack_timeout_seconds)
        return Distribution(
            client_id=s.slack_client_id,
            client_secret=secret,
            installations=installations,
            states=RedisStateStore(self.redis),
            tokens=WorkspaceTokens(
                installations,
                client_id=s.slack_client_id,
                client_secret=secret,
                client=plain,
                rotate_before=s.token_rotate_minutes * 60,
            ),
            authorize_url=s.authorize_url(),
            redirect_uri=s.slack_redirect_uri,
            rotate_minutes=s.token_rotate_minutes,
            reactions=s.reactions,
        )

    async def start(self) -> None:
        s = self.settings
        url = s.redis_url
        if url is None:
            self.embedded = EmbeddedRedis(s.data_dir)
            await self.embedded.start()
            url = self.embedded.url
        waiting = {"replicas": s.redis_wait_replicas, "wait_ms": s.redis_wait_ms}
        self.redis, self.redis_kind = await open_redis(
            url, max_connections=s.redis_max_connections, mode=s.redis_mode, **waiting
        )
        log.info("Redis: %s", self.redis_kind)
        OUTAGE.attach(self.redis.ping)  # an outage ends when a PING answers again
        retention = s.run_retention_days * 86400
        store = RunStore(
            self.redis,
            retention_seconds=retention,
            progress_due_in=s.progress_due_seconds,
            clock=self.clock,
            resume_gather=s.projector_gather_seconds,
            take_due_in=s.projector_coalesce_seconds,
        )
        self.leases, _ = await open_redis(url, max_connections=4, mode=self.redis_kind, **waiting)
        self.queue = JobQueue(self.redis, lease_seconds=s.job_lease_seconds, leases=self.leases)
        token = s.slack_bot_token.get_secret_value() if s.slack_bot_token else None
        # One HTTP session (pooled connections) for every Web API call of this process.
        self.http = aiohttp.ClientSession()
        self.distribution = self._distribution() if s.distributed else None
        tokens = self.distribution.tokens if self.distribution is not None else None
        self.client = build_client(
            token, s.slack_api_url, self.http, timeout=s.slack_timeout_seconds, tokens=tokens
        )
        # The projector's and the App Home's: a 429 is not waited out inside the call (that
        # process alone would wait) but held in the bucket every replica shares, and the
        # message is tried again through the outbox (bot/store/delivery/pacing.py).
        self.delivery_client = build_client(
            token, s.slack_api_url, self.http, timeout=s.slack_timeout_seconds, rate_limited=0,
            tokens=tokens,
        )  # fmt: skip
        use_slack_api(s.slack_api_url)
        tracing = Tracing(
            enabled=s.tracing == "on",
            include_sensitive_data=s.trace_sensitive_data,
            api_key=s.tracing_api_key.get_secret_value() if s.tracing_api_key else None,
        )
        tracing.apply()
        engine = Engine(
            self.registry, rejection_text=s.rejection_text, max_turns=s.max_turns, tracing=tracing,
            stream_answers=s.stream_answers,
        )  # fmt: skip
        self.groups = SlackGroups(self.client)
        self.channels = SlackChannels(self.client)
        authorizer = Authorizer(
            self.groups, channels=self.channels, installed=self.distribution is not None
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
                lists_per_minute=s.user_lists_per_minute,
            ),
            foreground=Foreground(
                max_wait=s.lull_max_seconds, elsewhere=self.elsewhere, collect_at_lulls=True
            ),
            attention=AttentionSettings(
                read_chars_per_second=s.review_read_chars_per_second,
                stamp_seconds=s.rubber_stamp_seconds,
                stamp_streak=s.rubber_stamp_streak,
            ),
            reactions=s.reactions,
            advisor=AdvisorSettings(
                self.advisor,
                timeout_seconds=s.advisor_timeout_seconds,
                concurrency=s.advisor_concurrency,
            ),
        )
        self.home = HomePublisher(
            self.service,
            self.delivery_client,
            interval=s.home_refresh_seconds,
            poll=s.home_poll_seconds,
            idle_poll=s.projector_idle_poll_seconds,
        )
        if self.distribution is not None:  # a token per workspace, each checked by Bolt
            self.slack_auth = SlackAuth(accepted=True)
        secret = s.slack_signing_secret.get_secret_value() if s.slack_signing_secret else None
        if secret is not None or self.socket_mode:  # a worker-only process receives nothing
            self.app = build_app(
                client=self.client,
                signing_secret=secret,
                service=self.service,
                socket_mode=self.socket_mode,
                ack_budget=s.ack_budget_seconds,
                home=self.home,
                distribution=self.distribution,
                auth=self.slack_auth,
            )
        # Learned before serving when Slack answers; retried in the background if not (until
        # then every request is refused, closed). The Bolt app keeps the answer too.
        if self.distribution is None:  # else each request's workspace is found by Bolt
            if not await learn_once(
                self.client, authorizer, self._answered(), self.slack_auth,
                s.slack_auth_retry_seconds,
            ):  # fmt: skip
                self._learn_again()
            for client in (self.client, self.delivery_client):
                client.token_refused = self._token_refused
        policy = await store.eviction_policy()
        if policy not in (None, "noeviction"):
            log.warning(
                "Redis maxmemory-policy is %r: under memory pressure Redis may evict pending "
                "approvals and run state. Set `maxmemory-policy noeviction`.",
                policy,
            )
        await self.queue.ensure_group()
        # Runs active before the channel indexes existed are listed from the first request.
        await store.index_channels()
        self.projector = Projector(
            store,
            self.delivery_client,
            self.service.undeliverable,
            lease=s.job_lease_seconds,
            coalesce=s.projector_coalesce_seconds,
            busy_coalesce=s.projector_busy_coalesce_seconds,
            gather=s.projector_gather_seconds,
            poll=s.projector_poll_seconds,
            idle_poll=s.projector_idle_poll_seconds,
            posts=SharedPacer(self.redis, "post", rate=s.slack_posts_per_second, burst=5),
            updates=SharedPacer(
                self.redis, "update", rate=s.slack_updates_per_minute / 60, burst=10
            ),
            notice=s.requester_notice,
            notice_window=s.requester_notice_seconds,
            run_changed=self.home.run_changed,
            run_changed_reads=self.home.read_in,
            card_posted=self.service.card_posted,
            foreground=self.service.foreground,
            streams=s.slack_streaming == "auto",
            run_posted=self.service.runs.start_in,
        )
        self._projector_task = asyncio.create_task(self.projector.run(), name="projector")
        self._home_task = asyncio.create_task(self.home.run(), name="app-home")
        self._sweeper = asyncio.create_task(
            self.service.sweep_forever(s.job_lease_seconds), name="sweeper"
        )
        schedule = parse_schedule(s.review_digest)
        if schedule is not None:  # the weekly review digest, on the timer loop's passes
            self.digests = ReviewDigests(
                self.service.core, schedule, DigestPoster(self.client).post,
                read_chars_per_second=s.review_read_chars_per_second,
            )  # fmt: skip
            self.service.timers.on_pass.append(self.digests.tick)
        self._timers = asyncio.create_task(
            self.service.timers_forever(every=s.timers_poll_seconds, lease=s.job_lease_seconds),
            name="timers",
        )
        await self._start_webhooks()
        if self.with_worker:
            self.worker = Worker(
                self.service,
                self.queue,
                concurrency=s.worker_concurrency,
                lease_seconds=s.job_lease_seconds,
            )
            self._worker_task = asyncio.create_task(self.worker.run(), name="worker")
            self.service.core.worker = self.worker  # a decision hands it its resume job

    def _answered(self) -> Callable[[Any], None] | None:
        app = getattr(self, "app", None)
        return partial(remember_auth_test, app) if app is not None else None

    def _learn_again(self) -> None:
        """Ask Slack's auth.test again, every APPROVAL_BOT_SLACK_AUTH_RETRY_SECONDS, until it
        accepts the token (once at a time)."""
        if self._stopping or (self._installation is not None and not self._installation.done()):
            return
        self._installation = asyncio.create_task(
            learn_installation(
                self.client,
                self.service.authorizer,
                self.settings.slack_auth_retry_seconds,
                answered=self._answered(),
                auth=self.slack_auth,
            ),
            name="auth.test",
        )

    def _token_refused(self, error: str) -> None:
        """A Web API call was answered that the token is refused (revoked while the bot runs):
        not ready, and nothing done, until auth.test accepts it again."""
        every = self.settings.slack_auth_retry_seconds
        self.slack_auth.failed(error, rejected=True, every=every, method="a Web API call")
        self._learn_again()

    async def _start_webhooks(self) -> None:
        """The webhook delivery loop, when a webhook is configured (every process runs one;
        one at a time delivers). Its cursor is set before anything is served, so the first
        entries after a webhook is configured are sent too."""
        s = self.settings
        if s.webhook_url is None or s.webhook_secret is None:
            return
        outbox = WebhookOutbox(self.redis)
        await outbox.begin()
        self.webhooks = WebhookSender(
            outbox,
            self.service.audit_log,
            url=s.webhook_url,
            secret=s.webhook_secret.get_secret_value(),
            timeout=s.webhook_timeout_seconds,
            retry=s.webhook_retry_seconds,
            retry_max=s.webhook_retry_max_seconds,
            max_age=s.webhook_max_age_hours * 3600,
            free_text=s.webhook_free_text,
            lease=s.job_lease_seconds,
            clock=self.clock,
            foreground=self.service.foreground,
        )
        self._webhooks_task = asyncio.create_task(self.webhooks.run(), name="webhooks")

    async def stop(self, budget: float | None = None) -> None:
        """Finish in-flight jobs and background tasks within `budget` seconds in all
        (default: APPROVAL_BOT_DRAIN_SECONDS), then close. Jobs still running then are cancelled
        unacknowledged: another worker takes them over after the lease, and the call journal
        keeps that retry from running a tool twice."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.settings.drain_seconds if budget is None else budget)

        def left() -> float:
            return max(0.0, deadline - loop.time())

        self._stopping = True  # a token refused from now on starts no auth.test loop
        await _cancel(self._installation)
        # Finish in-flight runs while still heartbeating, so no other process takes them for
        # orphans; only then stop the loops.
        await _cancel(self._sweeper)
        self.service.stop_timers()
        await _cancel(self._timers)
        if self.worker is not None:  # no new jobs; the ones in hand finish
            await self.worker.stop(self._worker_task, left())
            await self.worker.abandon()
        await _cancel(self._worker_task)
        await self.service.drain(left())
        await self.service.abandon()
        # Messages still due are delivered by another process, or by this one when it is back.
        await self.projector.stop(left())
        await _cancel(self._projector_task)
        self.home.stop()
        await _cancel(self._home_task)
        if self.webhooks is not None:  # what is undelivered waits in Redis for the next holder
            await self.webhooks.stop()
        await _cancel(self._webhooks_task)
        await self.groups.close()
        await self.channels.close()
        if self.http is not None:
            await self.http.close()
        await OUTAGE.detach()
        await self.redis.aclose()
        await self.leases.aclose()
        if self.embedded is not None:
            self.embedded.stop()

    # Operations ---------------------------------------------------------------------------

    async def ready(self) -> bool:
        """Redis answers (the probe of `/readyz`)."""
        return await self.service.store.ping()

    def slack_problem(self) -> str | None:
        """Why Slack does not accept the bot token (None once it does): `/readyz` says it."""
        return self.slack_auth.said()

    async def refresh_gauges(self) -> None:
        """Read the shared state the gauges of `/metrics` describe."""
        store = self.service.store
        pending, depth, age = await asyncio.gather(
            store.pending_calls(), self.queue.backlog(), self.queue.oldest_age()
        )
        metrics.PENDING_CALLS.set(pending)
        metrics.QUEUE_DEPTH.set(depth)
        metrics.QUEUE_OLDEST_AGE.set(age)
        if self.webhooks is not None:
            metrics.WEBHOOK_BACKLOG_AGE.set(await self.webhooks.outbox.oldest_age())
        if self.distribution is not None:
            installed = await self.distribution.installations.installed()
            metrics.WORKSPACES_INSTALLED.set(len(installed))

    def ops_server(
        self, host: str | None = None, port: int | None = None, sock: socket.socket | None = None
    ) -> ops.OpsServer | None:
        """The operations endpoints on a port of their own (None when the port is 0), or on
        `sock`: the metrics port's socket, shared by several serving processes."""
        port = self.settings.metrics_port if port is None else port
        if port == 0 and sock is None:
            return None
        host = host or self.settings.metrics_host
        return ops.OpsServer(
            host, port, self.ready, self.refresh_gauges, self.slack_problem, sock=sock
        )

    # HTTP ---------------------------------------------------------------------------------

    def web_app(self) -> web.Application:
        """`POST /slack/events` for everything Slack sends; `/healthz` (liveness), `/readyz`
        (Redis reachable) and `/metrics` for the platform."""

        secret = self.settings.slack_signing_secret
        signing_secret = secret.get_secret_value() if secret is not None else None

        async def events(request: web.Request) -> web.Response:
            body = await request.read()
            admitted = admit(signing_secret, body, request.headers, request.content_type)
            if isinstance(admitted, Refusal):
                return web.Response(status=admitted.status, text=admitted.reason)
            bolt_response = await self.app.async_dispatch(
                bolt_request(body, admitted, request.query_string, request.headers)
            )
            return await to_aiohttp_response(bolt_response)

        async def oauth(request: web.Request) -> web.Response:
            """The browser's side of an installation (OAuth distribution): the install page,
            and Slack's redirect back with the code (Bolt's OAuth flow,
            bot/slack/installs/oauth.py)."""
            flow = self.app.oauth_flow
            assert flow is not None
            bolt_req = AsyncBoltRequest(
                body="", query=request.query_string, headers=dict(request.headers)
            )
            if request.path == flow.install_path:
                return await to_aiohttp_response(await flow.handle_installation(bolt_req))
            return await to_aiohttp_response(await flow.handle_callback(bolt_req))

        web_app = web.Application(client_max_size=1024 * 1024)
        operations = ops.routes(self.ready, self.refresh_gauges, self.slack_problem)
        web_app.add_routes([web.post("/slack/events", events), *operations])
        if self.distribution is not None and getattr(self, "app", None) is not None:
            web_app.add_routes(
                [web.get("/slack/install", oauth), web.get("/slack/oauth_redirect", oauth)]
            )
        return web_app


async def _cancel(task: asyncio.Task[None] | None) -> None:
    await cancel_and_wait(task)


# The cyclic GC's youngest generation is collected after this many new container objects
# (Python's default: 700). A resume makes tens of thousands, nearly all freed by reference
# counting soon after: collected every 700, the survivors of the moment were walked over and
# over and promoted into older generations, whose collections followed (#32 part 2: 1.1 ms of
# CPU per decision in a burst of 200 at once, 0.4 ms at 7,000; a young collection then takes
# about 3 ms, within a click's ack budget many times over).
GC_YOUNG = 7000


def settle_heap() -> None:
    """Put everything alive after start-up (the SDK, Bolt, pydantic, the agents: some 200,000
    objects) out of the cyclic GC's reach. Otherwise each full collection walks them all while
    every request waits: 100-170 ms pauses that were the slowest click acks of
    a burst (`gc.freeze`; objects made later are collected as usual, their youngest
    generation after `GC_YOUNG` new ones)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, middle, old)


async def serve_http(
    runtime: BotRuntime,
    host: str,
    port: int,
    stop: asyncio.Event,
    *,
    sock: socket.socket | None = None,
    ops_server: ops.OpsServer | None = None,
) -> None:
    """Serve Slack on `host`:`port` until `stop` is set (on `sock`, already bound and listening,
    when given: the socket several serving processes share, `bot.processes`, each of which
    has its operations endpoints on a port of its own too: `ops_server`), then drain."""
    await runtime.start()
    settle_heap()
    budget = runtime.settings.drain_seconds
    http_drain = min(HTTP_DRAIN_SECONDS, budget / 4)
    runner = web.AppRunner(runtime.web_app(), access_log=None, shutdown_timeout=http_drain)
    await runner.setup()
    port = await start_site(runner, host, port, sock=sock)
    log.info("serving Slack on http://%s:%d/slack/events (also /metrics, /healthz, /readyz)",
             host, port)  # fmt: skip
    metrics.SERVING.set(1)
    try:
        ops_server = await _start_ops(ops_server)
        await stop.wait()
    finally:
        metrics.SERVING.set(0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        if ops_server is not None:
            await ops_server.stop()
        await runner.cleanup()
        await runtime.stop(max(0.0, budget - (loop.time() - started)))


async def serve_socket(
    runtime: BotRuntime, stop: asyncio.Event, ops_server: ops.OpsServer | None = None
) -> None:
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

    await runtime.start()
    settle_heap()
    token = runtime.settings.slack_app_token
    assert token is not None
    handler = AsyncSocketModeHandler(runtime.app, token.get_secret_value())
    await handler.connect_async()  # type: ignore[no-untyped-call]
    log.info("connected to Slack in Socket Mode")
    metrics.SERVING.set(1)
    try:
        ops_server = await _start_ops(ops_server)
        await stop.wait()
    finally:
        metrics.SERVING.set(0)
        if ops_server is not None:
            await ops_server.stop()
        await handler.close_async()  # type: ignore[no-untyped-call]
        await runtime.stop()


async def _start_ops(server: ops.OpsServer | None) -> ops.OpsServer | None:
    """Start the operations endpoints; when their port is taken (several workers on one
    machine), say so and go on without them rather than stop the worker."""
    if server is None:
        return None
    try:
        await server.start()
    except ops.PortUnavailable as exc:
        log.warning("%s Going on without /metrics, /healthz and /readyz.", exc)
        return None
    return server


def install_signal_handlers(stop: asyncio.Event) -> Callable[[], None]:
    import signal

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def remove() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    return remove


async def serve_worker(
    runtime: BotRuntime, stop: asyncio.Event, ops_server: ops.OpsServer | None = None
) -> None:
    """A process that only runs jobs (and the sweeper); Slack reaches the `serve` processes."""
    await runtime.start()
    settle_heap()  # (its resumes are a serving process's: the same collections)
    log.info("worker %s taking jobs", runtime.worker.consumer if runtime.worker else "?")
    try:
        ops_server = await _start_ops(ops_server)
        await stop.wait()
    finally:
        if ops_server is not None:
            await ops_server.stop()
        await runtime.stop()
