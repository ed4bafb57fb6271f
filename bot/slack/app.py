"""The Bolt app: Slack's requests in, service calls out.

`build_app` composes it: the app (which answers every request within the ack budget and counts
the requests in flight), the middleware, one error handler, and the listeners, one module per
kind of request in `bot.slack.listeners`, each with `register(app, deps)`.

Identity (team, enterprise, user) is read only from the signed request through Bolt's context.
Every listener acknowledges first and then works inside a guard that cannot leak an exception
into Bolt (an exception after `ack()` can turn into a spurious "unhandled request").

Slack's request is answered within the ack budget whatever Redis or Slack do (Slack counts a
late answer as a failure): clicks and thread replies are answered at once and worked on in
tracked background tasks; a command or a modal submission waits for its result until the
budget is spent, then says it is still working and the result is told privately. Work still
unfinished at the budget is told "still working" once; its outcome is told as usual.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.service.approvals import ApprovalService
from bot.service.foreground import Foreground
from bot.slack.api.serving import serving
from bot.slack.delivery.home import HomePublisher
from bot.slack.installs.installation import SlackAuth
from bot.slack.installs.oauth import Distribution, Forgetting
from bot.slack.installs.oauth import register as register_installs
from bot.slack.listeners import actions, commands, events, middleware, views
from bot.slack.listeners import questions as question_listeners
from bot.slack.listeners.actions import FORM_FAILED, FORM_LATE, TRIGGER_SECONDS
from bot.slack.listeners.commands import COMMAND, STILL_WORKING_COMMAND
from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import DEADLINE, RECEIVED, STILL_WORKING, TRY_AGAIN
from bot.slack.listeners.views import STILL_WORKING_REJECTION

__all__ = [
    "ACK_BUDGET_SECONDS",
    "COMMAND",
    "FORM_FAILED",
    "FORM_LATE",
    "STILL_WORKING",
    "STILL_WORKING_COMMAND",
    "STILL_WORKING_REJECTION",
    "TRIGGER_SECONDS",
    "TRY_AGAIN",
    "build_app",
    "remember_auth_test",
]

log = logging.getLogger(__name__)

ACK_BUDGET_SECONDS = 1.5  # the default of APPROVAL_BOT_ACK_BUDGET_SECONDS

Spawn = Callable[[Coroutine[Any, Any, None], str], None]


class _BudgetedApp(AsyncApp):  # type: ignore[misc]
    """Bolt, answering every request within `budget` seconds.

    Listeners answer by the `DEADLINE` they find in their context. Should anything still hold
    the answer past the budget (Bolt's own first `auth.test`, a middleware waiting), Slack gets
    an empty 200 (a valid acknowledgement of every kind of request) and the dispatch goes on in
    a tracked task."""

    def __init__(
        self,
        *,
        budget: float,
        spawn: Spawn,
        foreground: Foreground,
        auth: SlackAuth | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.budget = budget
        self._auth = auth
        self._spawn = spawn
        self._foreground = foreground
        # Listeners answer a little before the budget, so that their answer is the one sent.
        self._margin = min(0.1, budget / 4)

    async def async_dispatch(self, req: AsyncBoltRequest) -> BoltResponse:
        """Answer one request (HTTP and Socket Mode alike), counted as in flight until then:
        deferrable work waits for a lull (see `Foreground`)."""
        with self._foreground.request():
            return await self._dispatch(req)

    async def _dispatch(self, req: AsyncBoltRequest) -> BoltResponse:
        loop = asyncio.get_running_loop()
        received = loop.time()
        req.context[RECEIVED] = received
        req.context[DEADLINE] = received + self.budget - self._margin
        if self._auth is not None and not self._auth.ok and not _before_auth(req.body):
            metrics.acknowledged(req.body, loop.time() - received)
            sentence = self._auth.refusal()
            respond = req.context.respond
            if not req.body.get("command") and respond is not None:  # a click: its author
                self._spawn(_tell(respond, sentence), "token refused")
            return _refused(req.body, sentence)
        context = req.context
        # Bolt's answer, set by its task as it ends (or None at the budget): awaited directly,
        # it is written one loop iteration after Bolt's, not two (`asyncio.wait` wakes its
        # waiter through a callback of its own), and each iteration on an ack's way runs
        # every ready step of the process's other work.
        answer: asyncio.Future[BoltResponse | None] = loop.create_future()

        async def dispatch() -> BoltResponse | None:
            """Bolt's answer, also set on `answer` (an error too: None then)."""
            try:
                response: BoltResponse = await super(_BudgetedApp, self).async_dispatch(req)
            except asyncio.CancelledError:
                answer.cancel()
                raise
            except Exception as exc:
                if answer.done():  # (answered already: the late request's task logs it)
                    raise
                answer.set_exception(exc)
                return None
            if not answer.done():
                answer.set_result(response)
            return response

        # The request's workspace, from its signed body: every Web API call of its handling
        # (and of the tasks it starts) carries that workspace's token (bot/slack/api/serving.py).
        with serving(
            context.team_id or "", context.enterprise_id or "", bool(context.is_enterprise_install)
        ):
            task = asyncio.ensure_future(dispatch())
        budget = loop.call_later(self.budget, _settle, answer)
        try:
            response = await answer
        finally:
            budget.cancel()
        if response is not None:
            metrics.acknowledged(req.body, loop.time() - received)
            return response

        async def finish() -> None:
            response = await task
            assert response is not None  # (its errors raise: answered already)
            log.warning(
                "answered a Slack request after the %.1f s budget with an empty 200; the bot's "
                "own answer (%d), %.1f s after the request arrived, was not sent",
                self.budget, response.status, loop.time() - received,
            )  # fmt: skip

        self._spawn(finish(), "late request")
        metrics.acknowledged(req.body, loop.time() - received)
        return BoltResponse(status=200, body="")


def _settle(answer: asyncio.Future[BoltResponse | None]) -> None:
    """The budget is spent: the request is answered without Bolt's answer."""
    if not answer.done():
        answer.set_result(None)


def _before_auth(body: dict[str, Any]) -> bool:
    """Slack's own checks of the endpoint, answered whatever the token (by Bolt)."""
    return body.get("type") == "url_verification" or body.get("ssl_check") == "1"


def _refused(body: dict[str, Any], sentence: str) -> BoltResponse:
    """While Slack refuses the bot token nothing can be done, and Bolt would ask Slack again
    on every request (and answer with its own apology or an empty 200 and a traceback): a
    command's author is told why, privately, in the answer; a click's through its
    `response_url` (`_tell`, which needs no token); other requests are acknowledged."""
    if body.get("command"):
        return BoltResponse(status=200, body={"response_type": "ephemeral", "text": sentence})
    return BoltResponse(status=200, body="")


async def _tell(respond: Any, sentence: str) -> None:
    """Say `sentence` privately to whoever clicked, beside the message they clicked."""
    try:
        await respond(text=sentence, response_type="ephemeral", replace_original=False)
    except Exception as exc:
        log.warning("could not tell a clicker that the bot cannot act (%s)", type(exc).__name__)


def remember_auth_test(app: AsyncApp, reply: Any) -> None:
    """Give Bolt the bot's own `auth.test` answer: otherwise Bolt asks Slack on the first
    request it handles, and that request's answer waits for Slack (a slow Slack would turn it
    into the budget's empty 200, and the request would be lost)."""
    for each in getattr(app, "_async_middleware_list", []):
        if isinstance(each, AsyncSingleTeamAuthorization):
            each.auth_test_result = each.auth_test_result or reply


class _SameTokenFilter(logging.Filter):
    """Bolt reads SLACK_BOT_TOKEN from the environment even when it is given a client, and then
    warns on every start that the token "will be unused". The bot hands Bolt its own client on
    purpose (the Slack host in use, metered calls) built from that same token, so the warning
    says nothing true; it is dropped when, and only when, the two tokens are the same."""

    def __init__(self, token: str | None) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        same = self.token is not None and os.environ.get("SLACK_BOT_TOKEN") == self.token
        return not (same and "`token` will be unused" in record.getMessage())


def _quiet_token_warning(token: str | None) -> None:
    bolt_log = logging.getLogger(f"slack_bolt.{AsyncApp.__name__}")
    for old in [f for f in bolt_log.filters if isinstance(f, _SameTokenFilter)]:
        bolt_log.removeFilter(old)
    bolt_log.addFilter(_SameTokenFilter(token))


def build_app(
    *,
    client: AsyncWebClient,
    signing_secret: str | None,
    service: ApprovalService,
    socket_mode: bool = False,
    ack_budget: float = ACK_BUDGET_SECONDS,
    home: HomePublisher | None = None,
    distribution: Distribution | None = None,
    auth: SlackAuth | None = None,
) -> AsyncApp:
    """Wire Slack's commands, button clicks, modal submissions and thread replies: the app,
    its middleware and error handler, then each listener module's `register`. With
    `distribution`, many workspaces install the app (bot/slack/installs/oauth.py). With `auth`,
    every request is refused (with a sentence) while Slack does not accept the bot token."""
    _quiet_token_warning(client.token)
    oauth = distribution.app_options(client) if distribution is not None else {}
    app = _BudgetedApp(
        budget=ack_budget,
        spawn=service.spawn,
        foreground=service.foreground,
        auth=auth,
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=not socket_mode,
        # The response waits for the listener, and listeners answer by the ack budget: work
        # that takes longer goes on in tasks the service tracks (and drains on shutdown), so
        # nothing runs untracked after a response.
        process_before_response=True,
        raise_error_for_unhandled_request=False,
        ignoring_self_events_enabled=True,
        **oauth,
    )
    deps = ListenerDeps(
        service=service,
        records=service.store,
        notifier=service.notifier,
        client=client,
        foreground=service.foreground,
        ack_budget=ack_budget,
        default_agent=service.engine.registry.default_name,
        home=home,
    )
    app.error(_on_error)
    for listeners in (middleware, commands, actions, views, events):
        listeners.register(app, deps)
    question_listeners.register(app, deps)  # Answer and its modal (ask_human)
    if distribution is not None:  # uninstalls and revoked tokens
        register_installs(app, Forgetting(distribution, service.forget_workspace), service.spawn)
    return app


async def _on_error(error: Exception, request: AsyncBoltRequest) -> None:
    """The last resort, for what a listener's own guard did not catch (listeners answer and
    report their failures themselves): logged, and Bolt answers as it does by default."""
    log.error(
        "failed to handle a Slack request (%s)",
        request.body.get("type") or request.body.get("command") or "?",
        exc_info=error,
    )  # fmt: skip
