"""`ListenerDeps`: the collaborators every listener receives, and the helpers built on them
(the answer deadline, private answers, work in tracked background tasks).

The listeners depend on the interfaces below, not on how the service is assembled: the app
composes them in `build_app`; a unit test can hand in fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from slack_bolt.async_app import AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot.service.decisions.batch import BatchDone, BatchForm
from bot.service.decisions.decide import CallAndRun, WhoReacted
from bot.service.decisions.edits import EditErrors, EditForm, Entered
from bot.service.decisions.grants import ChooseScope, GrantScope
from bot.service.foreground import Foreground
from bot.service.oversight.details import Conversation, WholeCall
from bot.service.people import Overview, RunView
from bot.service.ports import Actor, Notifier
from bot.service.replies import ConfirmReject, RejectForm, Reply, TypeToConfirm
from bot.slack.listeners.shared import DEADLINE, STILL_WORKING, guard, left
from bot.store.records import CallRecord

R = TypeVar("R")


class Service(Protocol):
    """What the listeners ask of the application service (`ApprovalService`)."""

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run `coro` in a tracked background task (drained on shutdown)."""

    def later(self, what: str, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a best-effort call in a tracked background task; failures are logged."""

    def agent_names(self) -> list[str]: ...

    async def start_run(
        self, actor: Actor, channel: str, agent_name: str | None, task: str, delivery_id: str = ""
    ) -> Reply: ...

    async def reject_form(
        self, actor: Actor, approval_id: str, *, always: bool
    ) -> RejectForm | Reply: ...

    async def decide(
        self,
        actor: Actor,
        approval_id: str,
        *,
        approve: bool,
        always: bool,
        reason: str = "",
        typed: str | None = None,
        scope: GrantScope | None = None,
    ) -> Reply: ...

    async def approve(
        self, actor: Actor, approval_id: str, *, always: bool, version: str = "",
        read: Awaitable[CallAndRun] | None = None,
    ) -> Reply | TypeToConfirm | ChooseScope: ...  # fmt: skip

    def read_ahead(self, approval_id: str) -> Awaitable[CallAndRun]:
        """A click's read of its call and run, sent now (`approve(read=...)` judges it)."""

    async def pause_batch_form(
        self, actor: Actor, run_id: str, *, approve: bool
    ) -> BatchForm | Reply: ...

    async def batch_form(
        self, actor: Actor, chosen: list[tuple[str, str]], *, approve: bool
    ) -> BatchForm | Reply: ...

    async def submit_batch(
        self, actor: Actor, chosen: list[tuple[str, str]], *, approve: bool, reason: str = "",
        left: list[tuple[str, str]] | None = None,
    ) -> BatchDone | Reply: ...  # fmt: skip

    async def whole_call(self, actor: Actor, approval_id: str) -> WholeCall | Reply: ...

    async def conversation(self, actor: Actor, approval_id: str) -> Conversation | Reply: ...

    async def edit_form(self, actor: Actor, approval_id: str) -> EditForm | Reply: ...

    async def submit_edit(
        self, actor: Actor, approval_id: str, entered: Entered, *, version: str = ""
    ) -> Reply | EditErrors: ...

    async def resolve_review(self, actor: Actor, review_id: str, *, action: str) -> Reply: ...

    async def confirm_reply(self, actor: Actor, reply_id: str, *, reject: bool) -> Reply: ...

    async def cancel_run(self, actor: Actor, run_id: str) -> Reply: ...

    async def run_status(self, actor: Actor, run_id: str) -> RunView | Reply: ...

    async def overview(self, actor: Actor, channel: str) -> Overview | Reply: ...

    async def list_grants(self, actor: Actor, channel: str) -> Reply: ...

    async def revoke_grant(self, actor: Actor, channel: str, sticky: str) -> Reply: ...

    async def revoke_grant_id(self, actor: Actor, grant_id: str) -> Reply: ...

    async def thread_reply(
        self, actor: Actor, channel: str, thread_ts: str, text: str, *, ts: str = ""
    ) -> Reply | ConfirmReject | None: ...

    async def reaction(
        self, actor: Actor, channel: str, ts: str, emoji: str, who: WhoReacted | None = None
    ) -> Reply | None: ...

    async def follow_up(
        self, actor: Actor, channel: str, thread_ts: str, text: str, *, ts: str = ""
    ) -> Reply | None: ...


class Records(Protocol):
    """What the listeners read from the store directly."""

    async def first_delivery(self, kind: str, delivery_id: str) -> bool:
        """True the first time a (kind, id) is seen: drops Slack's duplicate deliveries."""

    async def get_call(self, approval_id: str) -> CallRecord | None: ...

    async def approval_for_message(self, channel: str, ts: str) -> str | None: ...


class HomeOpened(Protocol):
    """The App Home publisher, told when someone opens their Home."""

    async def opened(self, actor: Actor) -> None: ...


@dataclass(frozen=True)
class ListenerDeps:
    """The collaborators of the listeners, given to each module's `register(app, deps)`."""

    service: Service
    records: Records
    notifier: Notifier
    client: AsyncWebClient  # views.open and the command answers told after the ack
    foreground: Foreground  # Slack's requests in flight: a click's decision waits for a lull
    ack_budget: float  # seconds; the deadline when a request carries none (a unit test)
    default_agent: str  # named in `/agent help`
    home: HomeOpened | None = None

    def deadline_of(self, context: AsyncBoltContext) -> float:
        """When the listener must have answered (set by the app as each request arrives)."""
        deadline = context.get(DEADLINE)
        if deadline is None:
            return asyncio.get_running_loop().time() + self.ack_budget
        return float(deadline)

    def teller(self, channel: str, user: str, thread_ts: str = "") -> Callable[[str], None]:
        """Tell `user` something privately, in a tracked background task."""

        def tell(text: str) -> None:
            self.service.later(
                "answer privately", self.notifier.tell(channel, user, text, thread_ts)
            )

        return tell

    def in_background(
        self, what: str, context: AsyncBoltContext, work: Awaitable[Any],
        tell: Callable[[str], None], still_working: str | None = STILL_WORKING,
        defer: bool = False,
    ) -> None:  # fmt: skip
        """Do `work` in a tracked task (Slack's request is answered without waiting for it);
        if it is still going at the ack deadline, say `still_working` once. `defer` (a click's
        decision): the work first waits for a lull in Slack's requests, and then counts as one
        of them, so that what waits for a lull (resumes, deliveries) waits for it too. Acks
        come first, decisions next (the clicker waits for theirs), the rest after."""
        deadline = self.deadline_of(context)
        foreground = self.foreground

        async def run() -> None:
            loop = asyncio.get_running_loop()
            note = None
            if still_working:
                note = loop.call_later(max(0.0, deadline - loop.time()), tell, still_working)
            try:
                if not defer:
                    await guard(what, work, tell)
                    return
                try:
                    await foreground.lull()
                except asyncio.CancelledError:  # shutting down: the work never starts
                    if isinstance(work, Coroutine):
                        work.close()
                    raise
                async with foreground.deciding():
                    await guard(what, work, tell)
            finally:
                if note is not None:
                    note.cancel()

        self.service.spawn(run(), what)

    async def by_deadline(
        self,
        name: str,
        deadline: float,
        work: Coroutine[Any, Any, R],
        late: Callable[[R], Coroutine[Any, Any, None]],
    ) -> R | None:
        """Run `work` (which returns something, never None) in a tracked task: its result when
        it finishes by `deadline`; otherwise None, and `late(result)` runs when it does finish."""
        task = asyncio.ensure_future(work)
        missed = False

        async def watch() -> None:
            result = await task
            if missed:
                await late(result)

        self.service.spawn(watch(), name)
        await asyncio.wait({task}, timeout=left(deadline))
        if task.done():
            return task.result()
        missed = True
        return None
