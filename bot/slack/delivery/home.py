"""The App Home tab: what waits for the viewer's decision (with the cards' own buttons) and
their recent runs, published with `views.publish`.

Publishing is never done inline in a decision: the projector, as it delivers a run's changes,
makes the run's starter and the workspace's Home viewers due (`HomeIndex.touch`); this
publisher takes due people, at most once per person every `interval` seconds (a burst of
changes costs one publish per person), renders their Home from the records, and publishes it
only when it differs from what they were last shown. `views.publish` is safe to repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from logging import WARNING
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.outage import log_failure
from bot.service.approvals import ApprovalService
from bot.service.people import Overview
from bot.service.ports import Actor
from bot.slack.api.serving import serving
from bot.slack.api.webapi import Later, Refused, classify
from bot.slack.render.overview import home_view
from bot.store.delivery.home import HomeIndex
from bot.store.delivery.pacing import SharedPacer
from bot.store.records import RunRecord

log = logging.getLogger(__name__)

IDLE_POLL = 0.5  # seconds between looks at the index at most, while the process is idle


class HomePublisher:
    """Keeps the App Home of people who opened it up to date; one per process."""

    def __init__(
        self,
        service: ApprovalService,
        client: AsyncWebClient,
        *,
        interval: float = 5.0,
        pacer: SharedPacer | None = None,
        poll: float = 0.1,
        idle_poll: float = IDLE_POLL,
    ) -> None:
        self.service = service
        self.client = client
        self.index = HomeIndex(service.store.redis)
        self.interval = interval
        self.poll = poll  # between looks at the index while they find others' Homes due
        self.idle_poll = max(idle_poll, poll)  # ... growing to this after (a setting)
        # When (monotonic) a look nothing of this process asked for last found a Home due
        # (another process made it due, or it failed there): its looks are frequent a while.
        self._active = 0.0
        # views.publish: Tier 4, per workspace, shared by every replica
        self.pacer = pacer or SharedPacer(service.store.redis, "home", rate=100 / 60, burst=20)
        self._stopping = asyncio.Event()
        self._busy = 0
        self._policy_version: str | None = None  # the policy the Homes were last judged by

    def _served(self, actor: Actor) -> bool:
        policy = self.service.policies.current().policy
        return self.service.core.authorizer.served(policy, actor).allowed

    async def opened(self, actor: Actor) -> None:
        """The `app_home_opened` event: publish this person's Home (soon, by the loop). A
        person of a workspace this bot does not serve is not kept (nor published to)."""
        if not self._served(actor):
            return
        await self.index.opened(actor.team_id, actor.user_id, actor.enterprise_id)

    def read_in(self, pipe: Any) -> None:
        """What `run_changed` needs read, queued on a projector pass's read (`version`)."""
        self.index.read_version(pipe)

    async def run_changed(self, run: RunRecord, version: Any = ...) -> None:
        """A run's records changed: its starter's Home, and the Homes of the viewers who
        approve calls in its channel (all of the workspace's viewers when the approvers are
        "*" or a user group), may show something else now. `version`: what `read_in` read
        (the viewers as this process last read them serve while it is unchanged)."""
        viewers = await self.index.viewers(run.team_id, version)
        if not viewers:
            return
        policy = self.service.policies.current().policy.for_team(run.team_id)
        approvers = policy.channel_approvers(run.channel_id)
        if not any(p == "*" or p[0] in "S@" for p in approvers):
            # Those an escalation reached decide the run's calls too.
            escalated = {
                p
                for call in await self.service.store.pause_calls(run.run_id)
                for p in call.escalated_principals()
            }
            approvers = (*approvers, *escalated)
        if not any(p == "*" or p[0] in "S@" for p in approvers):
            viewers = [v for v in viewers if v == run.user_id or v in approvers]
        if viewers:
            await self.index.touch(run.team_id, viewers, self.interval)

    async def run(self) -> None:
        """Publish due Homes until `stop()`. This process's changes wake it at once
        (`HomeIndex.woken`); see `_idle_wait` for its other looks."""
        woken = self.index.woken
        asked = True  # this look was asked for (a Home this process made due, now or by now)
        while not self._stopping.is_set():
            try:
                woken.clear()  # a Home made due from now on wakes the wait below
                await self.service.foreground.lull()  # acks first
                await self._follow_the_policy()
                due = await self.index.claim(10)
                if due:
                    self._busy += 1
                    try:
                        await self.publish_many(due)
                    finally:
                        self._busy -= 1
                if not due:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), self._idle_wait())
                    asked = woken.is_set()
                elif not asked:
                    self._active = time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception:
                log_failure(log, "the App Home publisher could not read its index", level=WARNING)
                await asyncio.sleep(1.0)

    def _idle_wait(self) -> float:
        """Seconds until the next look at the index when nothing wakes the publisher: when a
        Home this process made due later falls due (`HomeIndex.dues`); else `poll` while its
        looks find Homes other processes made due (each process's publisher is woken by its
        own: another's are left when it failed or died), growing with the quiet since to
        `idle_poll` (each look costs CPU): a Home another process made due is published
        within that much of its time. A Slack request no longer makes them frequent (#32)."""
        now = time.monotonic()
        return min(self.idle_poll, max(self.poll, (now - self._active) / 4))

    def stop(self) -> None:
        self._stopping.set()
        self.index.woken.set()

    async def _follow_the_policy(self) -> None:
        """A new policy can take calls from some Homes (a removed approver) and give them to
        others: every open Home is judged again, within the usual pacing."""
        version = self.service.policies.current().version
        if version == self._policy_version:
            return
        first = self._policy_version is None
        self._policy_version = version
        if first:
            return  # the Homes are judged by this policy as they are published
        for team, users in (await self.index.everyone()).items():
            await self.index.touch(team, users, self.interval)

    async def publish(self, team: str, user: str) -> bool:
        """Render and publish one person's Home if it changed; True when it was published."""
        return (await self.publish_many([(team, user)]))[0]

    async def publish_many(self, people: list[tuple[str, str]]) -> list[bool]:
        """Render these people's Homes together (the paused runs read once for all of them)
        and publish each that changed. A person the bot no longer serves is forgotten."""
        actors = [Actor(t, u, await self.index.enterprise(t, u)) for t, u in people]
        served = [a for a in actors if self._served(a)]
        for actor in actors:
            if actor not in served:
                await self.index.forget(actor.team_id, actor.user_id)
        try:
            overviews = await self.service.homes(served)
        except Exception:
            log_failure(log, "could not render App Homes; again later", level=WARNING)
            for actor in served:
                await self.index.again(actor.team_id, actor.user_id, self.interval)
            return [False] * len(actors)
        done = dict(zip(served, overviews, strict=True))
        return [await self._publish(a, done[a]) if a in done else False for a in actors]

    async def _publish(self, actor: Actor, overview: Overview) -> bool:
        team, user = actor.team_id, actor.user_id
        with serving(team, actor.enterprise_id):  # that workspace's token
            return await self._publish_in(team, user, overview)

    async def _publish_in(self, team: str, user: str, overview: Overview) -> bool:
        try:
            view = home_view(overview)
            digest = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()[:24]
            if digest == await self.index.shown(team, user):
                return False
            await self.pacer.wait(team)
            await self.client.views_publish(user_id=user, view=view)
        except Exception as exc:
            failure: Refused | Later = classify(exc)
            if isinstance(failure, Refused):
                log.warning("Slack refused the App Home of %s: %s", user, failure.code)
                return False
            if failure.rate_limited:  # every replica waits it out
                with contextlib.suppress(Exception):
                    await self.pacer.hold(team, failure.after)
            log.warning("could not publish the App Home of %s (%s); again later", user, failure)
            await self.index.again(team, user, max(failure.after, self.interval))
            return False
        await self.index.published(team, user, digest)
        return True

    async def idle(self) -> bool:
        """Nothing due and nothing being published (tests)."""
        return self._busy == 0 and await self.index.pending() == 0
