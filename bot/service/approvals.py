"""The application service: start runs, authorize and apply decisions, resume exactly once.

This is where the rules live. Slack handlers call it with an `Actor` taken from the signed request
and an opaque approval id; it answers with what to tell that person. Agents run in jobs taken by
workers, so that Slack gets its acknowledgement within three seconds.

`ApprovalService` is a front: it builds one `ServiceCore` (the collaborators and shared helpers)
and the flows that receive it (and, where one needs another, that other), and exposes their
public methods. Nothing inherits from anything: a click goes `decide` -> `Decisions.decide`
-> `Judgement.settle` -> `RunStore.decide`, each a plain method call on an object named in a
constructor.
"""

from __future__ import annotations

import logging

from bot.engine.runner import Engine
from bot.service.authorize import Authorizer
from bot.service.core import ServiceCore
from bot.service.decisions.batch import Batch
from bot.service.decisions.decide import Decisions
from bot.service.decisions.edits import Edits
from bot.service.decisions.grants import Grants
from bot.service.decisions.questions import Questions
from bot.service.decisions.reviews import Reviews
from bot.service.decisions.timers import Timers
from bot.service.foreground import Foreground
from bot.service.judgement import Judgement
from bot.service.oversight.advice import Advisor, AdvisorSettings
from bot.service.oversight.attention import Attention, AttentionSettings
from bot.service.oversight.details import Details
from bot.service.people import People
from bot.service.policy.source import PolicySource
from bot.service.ports import Notifier
from bot.service.replies import RejectForm, Reply, when
from bot.service.running.limits import StartLimits
from bot.service.running.runs import Runs
from bot.service.running.sweeper import Sweeper
from bot.store.admission import AdmissionStore
from bot.store.installs.workspaces import forget_workspace
from bot.store.journal import RedisJournal
from bot.store.queue import JobQueue
from bot.store.records import CallRecord, RunRecord
from bot.store.runs import RunStore
from bot.store.trail.audit import AuditLog

log = logging.getLogger(__name__)


class ApprovalService:
    """Runs and decisions, for one bot process (any number of processes may share Redis).

    Who holds what: `core` (store, engine, notifier, policies, authorizer, audit, queue,
    journal, admission, limits, foreground; background tasks) is shared by every flow;
    `judgement` judges every way of settling a call against the policy in force; `reviews`
    stops runs for a person and settles reviews; `runs` (with the judgement and the reviews)
    starts, executes and settles runs; `decisions` (with the judgement) records clicks and
    thread replies; `timers` fires expiry, reminders and escalation; `people` (with the
    judgement) answers cancel, status and the lists; `sweeper` (with the runs) finishes what a
    stopped process left half done.
    """

    def __init__(
        self,
        *,
        store: RunStore,
        engine: Engine,
        notifier: Notifier,
        policies: PolicySource,
        authorizer: Authorizer,
        audit: AuditLog,
        queue: JobQueue,
        journal: RedisJournal,
        admission: AdmissionStore,
        limits: StartLimits | None = None,
        foreground: Foreground | None = None,
        attention: AttentionSettings | None = None,
        reactions: bool = False,
        advisor: AdvisorSettings | None = None,
    ) -> None:
        core = ServiceCore(
            store=store, engine=engine, notifier=notifier, policies=policies,
            authorizer=authorizer, audit=audit, queue=queue, journal=journal,
            admission=admission, limits=limits, foreground=foreground,
        )  # fmt: skip
        self.core = core
        self.judgement = Judgement(core.policies, core.authorizer, core.store.timers.clock)
        self.reviews = Reviews(core, self.judgement)
        self.runs = Runs(core, self.judgement, self.reviews)
        self.questions = Questions(core)
        self.attention = Attention(core, attention)
        self.decisions = Decisions(
            core, self.judgement, answer=self.questions.answer, attended=self.attention.decided_in,
            reactions=reactions, overruled=self.runs.overruled,
        )  # fmt: skip
        self.edits = Edits(core, self.decisions)
        self.details = Details(core, self.judgement, viewed=self.attention.viewed)
        self.batch = Batch(core, self.judgement, self.decisions, self.details.may_view)
        self.timers = Timers(core)
        self.people = People(core, self.judgement)
        self.sweeper = Sweeper(core, self.runs)
        self.grants = Grants(core)
        self.advisor = Advisor(
            core, self.judgement, advisor or AdvisorSettings(), self.runs.auto_decide
        )

        # The collaborators, as the adapters and the tests reach them.
        self.store = core.store
        self.engine = core.engine
        self.notifier = core.notifier
        self.policies = core.policies
        self.authorizer = core.authorizer
        self.audit_log = core.audit_log
        self.queue = core.queue
        self.journal = core.journal
        self.admission = core.admission
        self.limits = core.limits
        self.foreground = core.foreground
        self.process_id = core.process_id
        self._tasks = core.tasks  # the background tasks (the test harness waits for none)

        # Background work and shutdown.
        self.spawn = core.spawn
        self.later = core.later
        self.drain = core.drain
        self.abandon = core.abandon
        self.agent_names = core.agent_names
        self._enqueue = core.enqueue  # tests re-enqueue a resume, as a lost job's redelivery

        # Runs: the `/agent` command, the worker's jobs, a message Slack refuses for good.
        self.start_run = self.runs.start_run
        self.run_job = self.runs.run_job
        self.take_next = self.runs.take_next  # a worker's read of jobs that takes them too
        self.undeliverable = self.runs.undeliverable
        self.follow_up = self.runs.follow_ups.follow_up  # a reply in a run's thread

        # Decisions: clicks, the reject modal, thread replies.
        self.decide = self.decisions.decide
        self.approve = self.decisions.approve
        self.read_ahead = self.decisions.read_ahead  # a click's read, sent while it is acked
        self.reject_form = self.decisions.reject_form
        self.thread_reply = self.decisions.thread_reply  # on a question's card: an answer
        self.confirm_reply = self.decisions.confirm_reply
        self.reaction = self.decisions.reaction  # a reaction on a card (APPROVAL_BOT_REACTIONS)
        self.edit_form = self.edits.edit_form
        # Approve all, Reject all (a pause's calls, or a selection on the App Home).
        self.batch_form = self.batch.form
        self.pause_batch_form = self.batch.pause_form
        self.submit_batch = self.batch.submit
        self.submit_edit = self.edits.submit_edit

        # Questions (ask_human): the Answer form, its submission (thread replies above).
        self.answer_form = self.questions.answer_form
        self.answer = self.questions.answer
        # What lies behind a card: its call's whole text, the run's conversation.
        self.whole_call = self.details.whole_call
        self.conversation = self.details.conversation

        # Reviews, timers, people, the sweeper.
        self.resolve_review = self.reviews.resolve_review
        self.timers_forever = self.timers.timers_forever
        self.fire_due = self.timers.fire_due
        self.stop_timers = self.timers.stop_timers
        self.cancel_run = self.people.cancel_run
        self.run_status = self.people.run_status
        self.waiting_for = self.people.waiting_for
        self.overview = self.people.overview
        self.home = self.people.home
        self.homes = self.people.homes
        self.sweep_forever = self.sweeper.sweep_forever
        self.list_grants = self.grants.list_grants
        self.revoke_grant = self.grants.revoke_grant
        self.revoke_grant_id = self.grants.revoke_by_id
        self.requeue_stalled = self.sweeper.requeue_stalled

    def card_posted(self, run: RunRecord, call: CallRecord, chars: int, folded: bool) -> None:
        """A call's card was posted (the projector says so): what it asked of its reader, and
        a second opinion on it (off every person's path)."""
        self.attention.card_shown(run, call, chars, folded)
        self.advisor.card_posted(run, call)

    async def forget_workspace(self, team_id: str) -> int:
        """The app was uninstalled from `team_id` (or its bot token revoked): everything the
        bot keeps about that workspace goes, nothing of another
        (bot/store/installs/workspaces.py)."""
        return await forget_workspace(self.store.redis, team_id)


__all__ = ["ApprovalService", "RejectForm", "Reply", "when"]
