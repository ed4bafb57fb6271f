"""What the sandbox shows of a policy that learns from its audit trail: a shadow rule in its
policy (it decides nothing; it records what it would have done), and `/report`, the page that
shows `approval-bot report` of the sandbox's own trail (the shadow rules' agreement with the
people who clicked)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from bot.learning.history import read_history
from bot.learning.report import Options, report_text
from bot.store.trail.audit import AuditLog

SHADOW_RULES = """\
tools:
  # A shadow rule decides nothing: each call it would have decided is audited with what it
  # would have done. The page's Report link compares it with what Bob and Carol decide.
  - name: try-auto-restarts
    match: restart_service
    auto: approve
    mode: shadow
"""


def report_page(trail: Callable[[], AuditLog]) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The handler of `/report`: every section of the report over the whole trail, as plain
    text (the agents' arguments in it are never read as markup)."""

    async def report(_: web.Request) -> web.Response:
        history = await read_history(trail(), since=0.0, until=time.time())
        text = "\n".join(report_text(history, [], Options(limit=0))) + "\n"
        return web.Response(
            text=text, content_type="text/plain", headers={"X-Content-Type-Options": "nosniff"}
        )

    return report
