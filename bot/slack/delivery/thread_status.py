"""The run thread's status line: Slack's `assistant.threads.setStatus`, which channel apps may
use with `chat:write` (Slack's changelog of 2026-03-05), shows "<the bot> <status>" under the
thread while the agent works: working on it, running a tool, waiting for approval, resuming.

Best effort, never in the way of a message: it is set when the run message is delivered and
says something new (a quick resume's run message goes out once, finished: no status at all),
only with a token to spare in its own shared bucket (status urgency,
`bot/store/delivery/pacing.py`), and a failure is logged, not retried. Slack clears it when the bot
posts in the thread (the answer) or after two minutes. When the run ends and no post came after the
line was set (a follow-up turn's answer is written into the turn's message, an update; a status set
in the pass that posted the answer), the bot clears it itself. A workspace that answers that it does
not offer it is remembered by this process.
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.store.delivery.pacing import SharedPacer, Urgency
from bot.store.records import RunRecord

log = logging.getLogger(__name__)

KEPT = 10_000  # runs whose last status this process remembers (to say only what is news)

NOT_OFFERED = frozenset(
    {"unknown_method", "missing_scope", "not_allowed_token_type", "feature_not_enabled",
     "method_not_supported_for_channel_type", "not_supported"}
)  # fmt: skip


class ThreadStatus:
    """Sets each run thread's status line when it changes (see the module docstring)."""

    def __init__(self, client: AsyncWebClient, pacer: SharedPacer, *, enabled: bool = True):
        self.client = client
        self.pacer = pacer
        self.enabled = enabled
        self._shown: dict[str, str] = {}  # run id -> the status this process set last
        self._standing: set[str] = set()  # of those, the lines no post in the thread cleared
        self._without: set[str] = set()  # workspaces that do not offer it

    def posted(self, run: RunRecord) -> None:
        """The bot posted in the run's thread: Slack cleared its status line."""
        self._standing.discard(run.run_id)

    async def show(self, run: RunRecord, status: str) -> None:
        """Say `status` under the run's thread ("": clear it), if it is news. An ended run's
        line is cleared with a call only if it still stands (no post in the thread since)."""
        if not self.enabled or not run.message_ts or run.team_id in self._without:
            return
        if not status:
            self._shown.pop(run.run_id, None)
            if run.run_id not in self._standing:
                return  # none, or the answer (or error) posted in the thread cleared it
        elif self._shown.get(run.run_id, "") == status:
            return
        taken = await self.pacer.take(run.team_id, Urgency.STATUS, message=f"{run.run_id}/status")
        if not taken.taken or taken.wait > 0:
            return  # tokens are short: messages first (the next change says it)
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=run.channel_id, thread_ts=run.message_ts, status=status
            )
        except SlackApiError as exc:
            code = str(exc.response.get("error", ""))
            if code in NOT_OFFERED:
                self._without.add(run.team_id)
                log.info("workspace %s has no thread status line (%s)", run.team_id, code)
            else:
                log.warning("could not set the status of run %s's thread (%s)", run.run_id, code)
            return
        except Exception as exc:
            log.warning("could not set the status of run %s's thread (%s)", run.run_id, exc)
            return
        if status:
            self._shown[run.run_id] = status
            self._standing.add(run.run_id)
            if len(self._shown) > KEPT:  # runs that ended elsewhere: the oldest forgotten
                self._standing.discard(oldest := next(iter(self._shown)))
                del self._shown[oldest]
        else:
            self._standing.discard(run.run_id)
