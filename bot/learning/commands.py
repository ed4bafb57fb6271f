"""The commands that learn from the audit trail: `approval-bot report`, `approval-bot policy
backtest` and `approval-bot policy suggest`.

They read the trail (REDIS_URL, or the embedded Redis of APPROVAL_BOT_DATA_DIR) and policy
files; they need no Slack secret and post nothing. Exit codes: 0 done; 1 a backtest found calls
the candidate would approve automatically that were rejected (so CI can stop the change);
2 the command could not run (a policy with problems, no trail, Redis unreachable).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import redis

from bot.checks import load_settings_problems, redacted
from bot.config import Settings
from bot.learning import backtest, suggest
from bot.learning.history import History, read_history
from bot.learning.report import SECTIONS, TABLES, Options, report_csv, report_data, report_text
from bot.service.policy.rules import Policy, PolicyError, load_policy
from bot.store.connection import RedisUnavailable
from bot.store.trail.audit import offline_trail

CANNOT = 2


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not 0 < days <= 3660:
        raise argparse.ArgumentTypeError("a number of days, more than 0 (e.g. 30, 7, 0.5)")
    return days


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("a whole number, at least 1")
    return int(text)


def _window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--days",
        type=_days,
        default=30.0,
        metavar="N",
        help="the window: the last N days (default 30)",
    )


def register(sub: Any) -> None:
    """Add `report` and `policy` to the top-level subcommands `sub`."""
    report = sub.add_parser(
        "report",
        help="what the audit trail says, by section: " + ", ".join(SECTIONS),
        description="Sections: "
        + "; ".join(f"{name}: {section.about}" for name, section in SECTIONS.items()),
    )
    report.add_argument("sections", nargs="*", metavar="SECTION", help="default: all")
    _window(report)
    report.add_argument(
        "--limit", type=int, default=20, metavar="N", help="calls listed per list (0: all)"
    )
    report.add_argument(
        "--channel", default="", metavar="CHANNEL", help="only this channel (its id, e.g. C0123)"
    )
    shape = report.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print JSON")
    shape.add_argument(
        "--csv",
        action="store_true",
        help="print one table as CSV (sections with a table: " + ", ".join(TABLES) + ")",
    )
    report.set_defaults(func=_report)
    policy = sub.add_parser(
        "policy", help="learn from the audit trail: backtest a policy file, suggest rules"
    )
    commands = policy.add_subparsers(dest="policy_command", required=True)
    test = commands.add_parser(
        "backtest",
        help="replay the settled calls of the audit trail against a candidate policy",
        description=backtest.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    test.add_argument("candidate", help="the policy file to try (e.g. NEW.yml)")
    _window(test)
    test.add_argument(
        "--limit", type=int, default=20, metavar="N", help="calls listed per set (0: all)"
    )
    test.add_argument("--json", action="store_true", help="print JSON")
    test.set_defaults(func=_backtest)
    advise = commands.add_parser(
        "suggest",
        help="propose auto-approve rules (in shadow mode) from what people keep approving",
        description=suggest.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _window(advise)
    advise.add_argument(
        "--min-approvals",
        type=_count,
        default=5,
        metavar="N",
        help="approvals a pattern needs (default 5)",
    )
    advise.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help="the policy in force (default: APPROVAL_BOT_POLICY)",
    )
    advise.set_defaults(func=_suggest)


def _settings() -> Settings | None:
    settings, problems = load_settings_problems()
    if settings is None or problems:
        print("\n".join(problems), file=sys.stderr)
        return None
    return settings


def _policy(path: Path) -> Policy | None:
    try:
        return load_policy(path)
    except PolicyError as exc:
        print(f"{path} has problems:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return None


def _history(settings: Settings, days: float) -> History | None:
    """The trail's last `days` days, or None (said why on stderr)."""
    until = time.time()

    async def read() -> History | None:
        async with offline_trail(
            settings.redis_url, settings.data_dir, mode=settings.redis_mode
        ) as trail:
            if trail is None:
                print(
                    f"No audit trail: no REDIS_URL and no data in {settings.data_dir}.",
                    file=sys.stderr,
                )
                return None
            return await read_history(trail, since=until - days * 86400, until=until)

    try:
        return asyncio.run(read())
    except (RedisUnavailable, redis.RedisError, OSError) as exc:
        where = f" (REDIS_URL={redacted(settings.redis_url)})" if settings.redis_url else ""
        said = f"{type(exc).__name__}: {exc}{where}"
        print(f"Could not read the audit trail: {said}", file=sys.stderr)
        return None


def _report(args: argparse.Namespace) -> int:
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown:
        print(
            f"Unknown section {', '.join(unknown)}: the sections are {', '.join(SECTIONS)}.",
            file=sys.stderr,
        )
        return CANNOT
    table = _table(args.sections) if args.csv else ""
    if table is None:
        return CANNOT
    settings = _settings()
    history = _history(settings, args.days) if settings is not None else None
    if settings is None or history is None:
        return CANNOT
    options = Options(
        limit=args.limit,
        channel=args.channel.strip(),
        read_chars_per_second=settings.review_read_chars_per_second,
    )
    if table:
        sys.stdout.write(report_csv(history, table, options))
    elif args.json:
        print(json.dumps(report_data(history, args.sections, options), ensure_ascii=True))
    else:
        print("\n".join(report_text(history, args.sections, options)))
    return 0


def _table(names: list[str]) -> str | None:
    """The one section `--csv` prints (None: said why on stderr)."""
    named = names or TABLES
    if len(named) != 1 or named[0] not in TABLES:
        print(
            f"--csv prints one table: name one of {', '.join(TABLES)} "
            f"(e.g. approval-bot report {TABLES[0]} --csv).",
            file=sys.stderr,
        )
        return None
    return named[0]


def _backtest(args: argparse.Namespace) -> int:
    candidate = _policy(Path(args.candidate))
    settings = _settings() if candidate is not None else None
    history = _history(settings, args.days) if settings is not None else None
    if candidate is None or history is None:
        return CANNOT
    result = backtest.backtest(candidate, history.decided)
    if args.json:
        print(json.dumps(result.as_json(), ensure_ascii=True))
    else:
        print("\n".join(backtest.render(result, history, args.candidate, limit=args.limit)))
    return 1 if result.fails else 0


def _suggest(args: argparse.Namespace) -> int:
    settings = _settings()
    if settings is None:
        return CANNOT
    policy = _policy(Path(args.policy) if args.policy else settings.policy_file)
    history = _history(settings, args.days) if policy is not None else None
    if policy is None or history is None:
        return CANNOT
    found = suggest.suggest(policy, history, min_approvals=args.min_approvals)
    sys.stdout.write(suggest.render(found, history, min_approvals=args.min_approvals))
    return 0
