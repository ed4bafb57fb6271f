"""`approval-bot serve` runs the bot; `approval-bot check` validates configuration and policy."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pydantic import ValidationError

from bot.config import Settings
from bot.engine.registry import AgentLoadError, AgentRegistry
from bot.service.policy import PolicyError, load_policy
from bot.store.connection import RedisUnavailable


def _settings_problems() -> tuple[Settings | None, list[str]]:
    try:
        return Settings(), []
    except ValidationError as exc:
        return None, [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]


def collect_problems(*, socket_mode: bool) -> tuple[Settings | None, list[str]]:
    """Every configuration, agent and policy problem found, each as one actionable line."""
    settings, problems = _settings_problems()
    if settings is None:
        return None, problems
    problems += settings.problems(socket_mode=socket_mode)
    try:
        load_policy(settings.policy_file)
    except PolicyError as exc:
        problems += exc.problems
    try:
        AgentRegistry.load(settings.agents)
    except AgentLoadError as exc:
        problems.append(f"APPROVAL_BOT_AGENTS: {exc}")
    return settings, problems


def _check(args: argparse.Namespace) -> int:
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
    return 0


def _serve(args: argparse.Namespace) -> int:
    from bot.runtime import BotRuntime, install_signal_handlers, serve_http, serve_socket

    settings, problems = collect_problems(socket_mode=args.socket)
    if problems or settings is None:
        print("The bot cannot start:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1

    async def main() -> None:
        stop = asyncio.Event()
        install_signal_handlers(stop)
        runtime = BotRuntime(settings, socket_mode=args.socket)
        if args.socket:
            await serve_socket(runtime, stop)
        else:
            await serve_http(runtime, args.host, args.port, stop)

    try:
        asyncio.run(main())
    except RedisUnavailable as exc:
        print(f"The bot cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="approval-bot", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the bot")
    mode = serve.add_mutually_exclusive_group()
    mode.add_argument("--http", action="store_true", help="serve Slack over HTTP (default)")
    mode.add_argument("--socket", action="store_true", help="connect with Socket Mode")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=3000)
    serve.set_defaults(func=_serve)
    check = sub.add_parser("check", help="validate configuration, agents and policy")
    check.add_argument("--socket", action="store_true", help="check for Socket Mode")
    check.set_defaults(func=_check)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
