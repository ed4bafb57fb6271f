"""`approval-bot serve` runs the bot; `approval-bot check` validates configuration and policy;
`approval-bot report` and `approval-bot policy` learn from the audit trail."""

from __future__ import annotations

import argparse
import asyncio
import csv
import importlib
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from bot.checks import (
    collect_problems,
    load_settings_problems,
    policy_placeholders,
    redacted,
    redis_survey,
)
from bot.config import Settings, export_openai
from bot.engine.registry import AgentLoadError, AgentRegistry
from bot.learning import commands as learning_commands
from bot.service.policy.rules import PolicyError, load_policy
from bot.store.connection import RedisUnavailable


def _check_policy(path: Path) -> int:
    """`check --policy FILE`: the policy alone, as CI checks it (no Slack secrets, no Redis, no
    agents needed)."""
    try:
        policy = load_policy(path)
    except PolicyError as exc:
        print(f"{len(exc.problems)} problem(s) found in {path}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    placeholders = policy_placeholders(policy)
    if placeholders:
        print(f"1 problem found in {path}:\n  - {placeholders[0]}", file=sys.stderr)
        return 1
    print(
        f"OK: policy {path} with {len(policy.channels)} channel(s), {len(policy.tools)} tool "
        f"rule(s) and {len(policy.workspaces)} workspace section(s)."
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    if args.policy is not None:
        return _check_policy(Path(args.policy))
    settings, problems = collect_problems(socket_mode=args.socket)
    if problems:
        print(f"{len(problems)} problem(s) found:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    assert settings is not None
    registry = AgentRegistry.load(settings.agents)
    policy = load_policy(settings.policy_file)
    print(
        f"OK: agents {', '.join(registry.agents)} (default {registry.default_name}); "
        f"policy {settings.policy_file} with {len(policy.channels)} channel(s)."
    )
    if settings.redis_url is None:
        print("Redis: none set; the bot starts its own redis-server (AOF, noeviction).")
    else:
        try:
            print(f"Redis: {redis_survey(settings.redis_url)}")
        except (redis.RedisError, OSError) as exc:
            print(f"Redis: answers PING, but could not be surveyed ({type(exc).__name__}).")
    return 0


TRY_THE_SANDBOX = (
    "To try the bot first, with nothing to set up (no Slack app, no model key): `make sandbox` "
    "(or `approval-bot sandbox`), then open http://127.0.0.1:3000."
)


def run_loop(main: Coroutine[Any, Any, None], loop: str) -> None:
    """`asyncio.run(main)`, on uvloop's event loop when `loop` is "uvloop" (checked installed
    by the configuration check): a choice, not the default (#32, docs/benchmarks.md)."""
    if loop == "uvloop":
        uvloop = importlib.import_module("uvloop")
        uvloop.run(main)
    else:
        asyncio.run(main)


def _launch(
    what: str,
    *,
    socket_mode: bool,
    slack_transport: bool,
    body: Callable[[Settings, asyncio.Event], Awaitable[None]],
    processes: Callable[[Settings], int] | None = None,
) -> int:
    """Validate everything, then run `body` until SIGINT/SIGTERM; say plainly why it can't.
    `processes`, when given, runs instead once the settings are valid (`serve --http` in
    several processes: each runs `body` through `_run`)."""
    settings, problems = collect_problems(socket_mode=socket_mode, slack_transport=slack_transport)
    if problems or settings is None:
        print(f"The {what} cannot start:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        if slack_transport:
            print(TRY_THE_SANDBOX, file=sys.stderr)
        return 1
    if processes is not None:
        return _failing(what, settings, lambda: processes(settings))
    return _run(what, settings, body)


def _run(
    what: str, settings: Settings, body: Callable[[Settings, asyncio.Event], Awaitable[None]]
) -> int:
    """Run `body` on an event loop until SIGINT/SIGTERM; its exit code."""
    from bot.runtime import install_signal_handlers

    async def main() -> None:
        stop = asyncio.Event()
        install_signal_handlers(stop)
        await body(settings, stop)

    def run() -> int:
        run_loop(main(), settings.event_loop)
        return 0

    return _failing(what, settings, run)


def _failing(what: str, settings: Settings, run: Callable[[], int]) -> int:
    """`run()`, its failures to start or to go on said plainly (exit code 1)."""
    try:
        return run()
    except RedisUnavailable as exc:
        print(f"The {what} cannot start: {exc}", file=sys.stderr)
        return 1
    except (redis.RedisError, OSError) as exc:  # Redis went away after the check, a port taken
        where = f" (REDIS_URL={redacted(settings.redis_url)})" if settings.redis_url else ""
        print(f"The {what} stopped: {type(exc).__name__}: {exc}{where}", file=sys.stderr)
        return 1


def _serve(args: argparse.Namespace) -> int:
    from bot import metrics
    from bot.processes import Serving, process_count, supervise
    from bot.runtime import BotRuntime, serve_http, serve_socket

    def body_on(
        serving: Serving | None = None,
    ) -> Callable[[Settings, asyncio.Event], Awaitable[None]]:
        """Serve in this process; with `serving`, as one of several on a shared socket, with
        their metrics as one (`bot.metrics.share`) and the metrics port's socket shared too."""

        async def body(settings: Settings, stop: asyncio.Event) -> None:
            if serving is not None:
                metrics.share(serving.metrics_dir)
            runtime = BotRuntime(
                settings, socket_mode=args.socket, with_worker=not args.no_worker,
                elsewhere=serving.elsewhere if serving else None,
            )  # fmt: skip
            if args.socket:
                await serve_socket(
                    runtime, stop, runtime.ops_server(args.metrics_host, args.metrics_port)
                )
                return
            if serving is None:
                await serve_http(runtime, args.host, args.port, stop)
                return
            ops_server = runtime.ops_server(args.metrics_host, 0, serving.ops_sock)
            await serve_http(
                runtime, args.host, args.port, stop, sock=serving.sock, ops_server=ops_server
            )

        return body

    def processes(settings: Settings) -> int:
        count = process_count(args.processes if args.processes is not None else settings.processes)
        if count == 1:
            return _run("bot", settings, body_on())
        port = settings.metrics_port if args.metrics_port is None else args.metrics_port
        return supervise(
            settings, args.host, args.port, count,
            lambda settings, serving: _run("bot", settings, body_on(serving)),
            metrics_host=args.metrics_host or settings.metrics_host, metrics_port=port,
        )  # fmt: skip

    if args.socket and args.processes not in (None, 1):
        print("Socket Mode serves in one process: --processes is for --http.", file=sys.stderr)
        return 2
    return _launch(
        "bot", socket_mode=args.socket, slack_transport=True, body=body_on(),
        processes=None if args.socket else processes,
    )  # fmt: skip


def _worker(args: argparse.Namespace) -> int:
    from bot.runtime import BotRuntime, serve_worker

    async def body(settings: Settings, stop: asyncio.Event) -> None:
        runtime = BotRuntime(settings, with_worker=True)
        await serve_worker(runtime, stop, runtime.ops_server(args.metrics_host, args.metrics_port))

    return _launch("worker", socket_mode=False, slack_transport=False, body=body)


def _sandbox(args: argparse.Namespace) -> int:
    from bot.runtime import install_signal_handlers
    from bot.sandbox.server import serve, wants_offline

    settings, _ = load_settings_problems()
    agents = args.agents or (settings.agents if settings else "bot.examples.agents:agents")
    policy = Path(args.policy) if args.policy else None
    try:
        AgentRegistry.load(agents)
        if policy is not None:
            load_policy(policy)
    except AgentLoadError as exc:
        print(f"The sandbox cannot start: {exc}", file=sys.stderr)
        return 1
    except PolicyError as exc:
        print(f"The sandbox cannot start: {policy} has problems:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1

    async def main() -> None:
        stop = asyncio.Event()
        install_signal_handlers(stop)
        await serve(
            host=args.host,
            port=args.port,
            agents=agents,
            policy_file=policy,
            offline=wants_offline(args.offline),
            stop=stop,
        )

    try:
        asyncio.run(main())
    except RedisUnavailable as exc:
        print(f"The sandbox cannot start: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the page's port is taken, or the host is not ours
        print(
            f"The sandbox cannot serve http://{args.host}:{args.port}: {exc.strerror or exc}. "
            "Pick another port with --port (or PORT=... make sandbox).",
            file=sys.stderr,
        )
        return 1
    return 0


def parse_time(text: str) -> float:
    """`2026-11-01`, `2026-11-01T12:00`, or an age like `90m`, `24h`, `7d`; as Unix seconds."""
    units = {"m": 60, "h": 3600, "d": 86400}
    if text and text[-1] in units and text[:-1].isdigit():
        return time.time() - int(text[:-1]) * units[text[-1]]
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


async def _export_audit(settings: Settings, since: float, until: float | None, fmt: str) -> int:

    from bot.store.trail.audit import FIELDS, offline_trail

    async with offline_trail(
        settings.redis_url, settings.data_dir, mode=settings.redis_mode
    ) as trail:
        if trail is None:
            print(no_trail(settings), file=sys.stderr)
            return 1
        writer = csv.DictWriter(sys.stdout, fieldnames=["id", *FIELDS], extrasaction="ignore")
        if fmt == "csv":
            writer.writeheader()
        async for entry in trail.read(since=since, until=until):
            entry["time"] = iso_time(entry.get("time", ""))
            if fmt == "csv":
                writer.writerow({key: csv_cell(value) for key, value in entry.items()})
            else:
                print(json.dumps(entry, ensure_ascii=False))
    return 0


def no_trail(settings: Settings) -> str:
    return f"No audit trail: no REDIS_URL and no data in {settings.data_dir}."


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    """A cell a spreadsheet will not run: text starting like a formula (`=`, `+`, `-`, `@`, tab,
    CR) is prefixed with `'`, as OWASP recommends against CSV injection."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def iso_time(stamp: str) -> str:
    """An audit time (Unix seconds) as ISO 8601 UTC, e.g. `2026-12-01T09:30:00.123Z`."""
    try:
        moment = datetime.fromtimestamp(float(stamp), tz=UTC)
    except ValueError:
        return stamp
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _audit(args: argparse.Namespace) -> int:
    settings, problems = load_settings_problems()
    if settings is None or problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    try:
        since = parse_time(args.since)
        until = parse_time(args.until) if args.until else None
    except ValueError:
        print("--since/--until take a date (2026-11-01), a time (2026-11-01T12:00) or an age "
              "(90m, 24h, 7d)", file=sys.stderr)  # fmt: skip
        return 2
    return asyncio.run(_export_audit(settings, since, until, args.format))


def _prepare(args: argparse.Namespace) -> None:
    """Logging: `--log-level` (before or after the command) wins over APPROVAL_BOT_LOG_LEVEL;
    the format is APPROVAL_BOT_LOG_FORMAT. The OpenAI key and URL of `.env` are put where the
    SDK reads them. Invalid settings are reported by the command itself."""
    from bot.logs import configure_logging

    settings, _ = load_settings_problems()
    if settings is not None:
        export_openai(settings)
    level = args.log_level or args.top_log_level or (settings.log_level if settings else "INFO")
    configure_logging(level, settings.log_format if settings else "text")


def _log_level(text: str) -> str:
    level = text.strip().upper()
    if not isinstance(logging.getLevelName(level), int):
        raise argparse.ArgumentTypeError("use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return level


def _ops_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        type=_log_level,
        default=None,
        metavar="LEVEL",
        help="default: APPROVAL_BOT_LOG_LEVEL, INFO",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="port of /metrics, /healthz and /readyz in worker and Socket Mode, and of all the "
        "serving processes of `serve --http` in several, as one "
        "(default: APPROVAL_BOT_METRICS_PORT, 9090; 0: none)",
    )
    parser.add_argument(
        "--metrics-host",
        default=None,
        metavar="HOST",
        help="default: APPROVAL_BOT_METRICS_HOST, 127.0.0.1",
    )


def _process_count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError("a number of processes: 1, 2, ... (0: one per core)")
    return int(text)


def _token_key(args: argparse.Namespace) -> int:
    """A new Fernet key: put it first in APPROVAL_BOT_TOKEN_KEYS (keep the old one after it
    until every workspace's token was written again, or reinstalled)."""
    from bot.store.installs.installations import TokenCipher

    print(TokenCipher.new_key())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Every command and option of `approval-bot`."""
    parser = argparse.ArgumentParser(prog="approval-bot", description=__doc__)
    parser.add_argument(
        "--log-level",
        dest="top_log_level",
        type=_log_level,
        default=None,
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL (default: APPROVAL_BOT_LOG_LEVEL, INFO)",
    )
    parser.set_defaults(log_level=None)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the bot")
    _ops_options(serve)
    mode = serve.add_mutually_exclusive_group()
    mode.add_argument("--http", action="store_true", help="serve Slack over HTTP (default)")
    mode.add_argument("--socket", action="store_true", help="connect with Socket Mode")
    serve.add_argument(
        "--no-worker", action="store_true", help="run no worker in this process (run `worker`s)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=3000)
    serve.add_argument(
        "--processes",
        type=_process_count,
        default=None,
        metavar="N",
        help="serve HTTP in N processes on one socket, each a whole bot (0: one per core; "
        "default: APPROVAL_BOT_PROCESSES)",
    )
    serve.set_defaults(func=_serve)
    worker = sub.add_parser("worker", help="run a worker: executes start and resume jobs")
    _ops_options(worker)
    worker.set_defaults(func=_worker)
    check = sub.add_parser("check", help="validate configuration, agents and policy")
    check.add_argument("--socket", action="store_true", help="check for Socket Mode")
    check.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help="check only this policy file: no Slack secrets, Redis or agents needed (for CI)",
    )
    check.set_defaults(func=_check)
    sandbox = sub.add_parser(
        "sandbox", help="try the bot in a browser: a local Slack stand-in, no Slack app needed"
    )
    sandbox.add_argument("--host", default="127.0.0.1")
    sandbox.add_argument("--port", type=int, default=3000)
    sandbox.add_argument(
        "--agents", default=None, metavar="MODULE:ATTR", help="default: the example agents"
    )
    sandbox.add_argument(
        "--policy", default=None, metavar="FILE", help="a policy file (default: the sandbox's)"
    )
    sandbox.add_argument(
        "--offline", action="store_true", help="use the demo model even with OPENAI_API_KEY set"
    )
    sandbox.set_defaults(func=_sandbox)
    key = sub.add_parser(
        "token-key", help="print a new key for APPROVAL_BOT_TOKEN_KEYS (OAuth distribution)"
    )
    key.set_defaults(func=_token_key)
    audit = sub.add_parser("audit", help="export the audit trail")
    audit.add_argument(
        "--since", default="30d", metavar="WHEN", help="date, time or age (default 30d)"
    )
    audit.add_argument("--until", default=None, metavar="WHEN", help="date, time or age")
    audit.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    audit.set_defaults(func=_audit)
    learning_commands.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _prepare(args)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
