"""The reject form's submission: answered within the ack budget with the outcome (the form
closes, or shows why not), or closed with "still working" and the outcome told privately."""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext

from bot.outage import log_failure
from bot.service.decisions.batch import BatchDone
from bot.service.decisions.edits import EditErrors, Entered
from bot.service.replies import Reply, reason_too_long
from bot.slack import blocks
from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import TRY_AGAIN, Listener, actor_of
from bot.slack.render import batch, grants, modals
from bot.slack.replies import shown
from bot.untrusted import escape, truncate

log = logging.getLogger(__name__)

STILL_WORKING_REJECTION = "Still working on your rejection; the card will show the result."
STILL_WORKING_APPROVAL = "Still working on your approval; the card will show the result."


def register(app: AsyncApp, deps: ListenerDeps) -> None:
    """Listen to the reject form's submissions."""
    app.view(blocks.REJECT_MODAL)(on_reject_submit(deps))
    app.view(blocks.CONFIRM_MODAL)(on_confirm_submit(deps))
    app.view(blocks.EDIT_MODAL)(on_edit_submit(deps))
    app.view(blocks.GRANT_MODAL)(on_grant_submit(deps))
    app.view(blocks.BATCH_MODAL)(on_batch_submit(deps))


STILL_WORKING_BATCH = "Still working on your decisions; each card will show its result."


def on_batch_submit(deps: ListenerDeps) -> Listener:
    """Approve all or Reject all submitted: each call it names (opaque ids, with the version
    of the arguments shown) is judged again under the policy in force and decided on its own;
    the form then shows what was done to each (or, late, the outcome is told privately)."""

    async def on_batch_submit(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        actor = actor_of(context, body)
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            approve = meta.get("approve") is True
            chosen = [blocks.approval_and_version(str(v)) for v in meta.get("calls") or []]
            left = [blocks.approval_and_version(str(v)) for v in meta.get("left") or []]
            channel = str(meta.get("channel") or "")
            values = view.get("state", {}).get("values", {})
            reason = values.get(blocks.REASON_BLOCK, {}).get(blocks.REASON_INPUT, {}).get("value")
        except Exception:
            log_failure(log, "could not read a batch form")
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: TRY_AGAIN})
            return
        too_long = reason_too_long(str(reason or ""))
        if too_long is not None:  # (the form's own limit is the client's)
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: too_long})
            return

        async def decide() -> BatchDone | Reply:
            try:
                return await deps.service.submit_batch(
                    actor, chosen, approve=approve, reason=str(reason or ""), left=left
                )
            except Exception:
                log_failure(log, "could not apply a batch")
                return Reply(False, TRY_AGAIN)

        tell = deps.teller(channel, actor.user_id)

        async def late(done: BatchDone | Reply) -> None:
            tell(shown(done) if isinstance(done, Reply) else batch.done_text(done))

        done = await deps.by_deadline("batch form", deps.deadline_of(context), decide(), late)
        if done is None:
            await ack()  # the form closes; the cards show the results, the outcome is told
            tell(STILL_WORKING_BATCH)
        elif isinstance(done, Reply):
            await ack(response_action="update", view=batch.said_modal(shown(done)))
        else:
            await ack(response_action="update", view=batch.batch_done_modal(done))

    return on_batch_submit


NOT_OFFERED = "Choose one of the lengths the form offers. Nothing was approved."


def on_grant_submit(deps: ListenerDeps) -> Listener:
    """The Always approve form submitted: approve always, with the scope chosen. The choice
    is judged on the server against the policy in force (a longer time than `grant_max`, or
    an argument the call does not have, keeps the form open with the reason and decides
    nothing). Identity from the signed request; the metadata is only the call's opaque id."""

    async def on_grant_submit(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        actor = actor_of(context, body)
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            approval_id = str(meta.get("approval_id", ""))
            channel = str(meta.get("channel") or "")
            scope = grants.scope_of(view.get("state", {}).get("values", {}))
        except Exception:
            log_failure(log, "could not read an Always approve form")
            await ack(response_action="errors", errors={blocks.SCOPE_BLOCK: TRY_AGAIN})
            return
        if scope is None:
            await ack(response_action="errors", errors={blocks.SCOPE_BLOCK: NOT_OFFERED})
            return

        async def approve() -> Reply:
            try:
                return await deps.service.decide(
                    actor, approval_id, approve=True, always=True, scope=scope
                )
            except Exception:
                log_failure(log, "could not apply an Always approve")
                return Reply(False, TRY_AGAIN)

        async def late(reply: Reply) -> None:
            if not reply.ok and channel:
                deps.teller(channel, actor.user_id)(shown(reply))

        reply = await deps.by_deadline("grant form", deps.deadline_of(context), approve(), late)
        if reply is None:
            await ack()  # the modal closes; the outcome shows on the card, or is told
            if channel:
                deps.teller(channel, actor.user_id)(STILL_WORKING_APPROVAL)
        elif reply.ok:
            await ack()
        else:
            await ack(response_action="errors", errors={blocks.SCOPE_BLOCK: shown(reply)})

    return on_grant_submit


def on_confirm_submit(deps: ListenerDeps) -> Listener:
    """The confirmation form submitted: approve the call with the value typed. The value is
    judged on the server, under the policy in force; a wrong one keeps the form open with the
    reason, and decides nothing. Identity from the signed request; the metadata is only the
    call's opaque id (and where to answer)."""

    async def on_confirm_submit(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        actor = actor_of(context, body)
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            approval_id = str(meta.get("approval_id", ""))
            channel = str(meta.get("channel") or "")
            values = view.get("state", {}).get("values", {})
            typed = values.get(blocks.TYPED_BLOCK, {}).get(blocks.TYPED_INPUT, {}).get("value")
        except Exception:
            log_failure(log, "could not read a confirmation form")
            await ack(response_action="errors", errors={blocks.TYPED_BLOCK: TRY_AGAIN})
            return

        async def approve() -> Reply:
            try:
                return await deps.service.decide(
                    actor, approval_id, approve=True, always=False, typed=str(typed or "")
                )
            except Exception:
                log_failure(log, "could not apply a confirmed approval")
                return Reply(False, TRY_AGAIN)

        async def late(reply: Reply) -> None:
            if not reply.ok and channel:
                deps.teller(channel, actor.user_id)(shown(reply))

        reply = await deps.by_deadline("confirmation form", deps.deadline_of(context), approve(),
                                       late)  # fmt: skip
        if reply is None:
            await ack()  # the modal closes; the outcome shows on the card, or is told
            if channel:
                deps.teller(channel, actor.user_id)(STILL_WORKING_APPROVAL)
        elif reply.ok:
            await ack()
        else:
            await ack(response_action="errors", errors={blocks.TYPED_BLOCK: shown(reply)})

    return on_confirm_submit


def on_reject_submit(deps: ListenerDeps) -> Listener:
    """The reject form submitted: reject the call with the reason given."""

    async def on_reject_submit(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        actor = actor_of(context, body)
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            approval_id = str(meta.get("approval_id", ""))
            always = meta.get("always") is True
            channel = str(meta.get("channel") or "")
            values = view.get("state", {}).get("values", {})
            reason = values.get(blocks.REASON_BLOCK, {}).get(blocks.REASON_INPUT, {}).get("value")
        except Exception:
            log_failure(log, "could not read a reject form")
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: TRY_AGAIN})
            return
        too_long = reason_too_long(str(reason or ""))
        if too_long is not None:  # (the form's own limit is the client's)
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: too_long})
            return

        async def reject() -> Reply:
            try:
                return await deps.service.decide(
                    actor, approval_id, approve=False, always=always, reason=str(reason or "")
                )
            except Exception:
                log_failure(log, "could not apply a rejection")
                return Reply(False, TRY_AGAIN)

        async def late(reply: Reply) -> None:
            if reply.ok:
                return
            where = channel
            if not where:  # a form opened before forms carried their channel
                call = await deps.records.get_call(approval_id)
                where = call.channel_id if call is not None else ""
            if where:
                deps.teller(where, actor.user_id)(shown(reply))

        deadline = deps.deadline_of(context)
        reply = await deps.by_deadline("reject form", deadline, reject(), late)
        if reply is None:
            await ack()  # the modal closes; the outcome shows on the card, or is told
            if channel:
                deps.teller(channel, actor.user_id)(STILL_WORKING_REJECTION)
        elif reply.ok:
            await ack()
        else:
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: shown(reply)})

    return on_reject_submit


LATE_ERRORS_LIMIT = 2000  # characters of an edit's errors told privately after the budget
STILL_WORKING_EDIT = "Still working on your edit; the card will show the result."


def entered_of(values: dict[str, Any]) -> Entered:
    """What the Edit form holds: the JSON text, or each argument's text by name (None: empty).
    The names are only looked up in the tool's own schema by the service."""
    json_block = values.get(blocks.EDIT_JSON_BLOCK)
    if isinstance(json_block, dict):
        return str((json_block.get(blocks.EDIT_INPUT) or {}).get("value") or "")
    entered: dict[str, str | None] = {}
    for block_id, inputs in values.items():
        if not str(block_id).startswith(blocks.EDIT_FIELD) or not isinstance(inputs, dict):
            continue
        element = inputs.get(blocks.EDIT_INPUT) or {}
        selected = element.get("selected_option")
        value = selected.get("value") if isinstance(selected, dict) else element.get("value")
        entered[str(block_id)[len(blocks.EDIT_FIELD) :]] = None if value is None else str(value)
    return entered


def on_edit_submit(deps: ListenerDeps) -> Listener:
    """The Edit form submitted: errors go back to the form field by field (nothing decided);
    otherwise the edit is applied as the submitter's approval."""

    async def on_edit_submit(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        actor = actor_of(context, body)
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            approval_id = str(meta.get("approval_id", ""))
            version = str(meta.get("version", ""))  # (a form opened before versions: "")
            values = view.get("state", {}).get("values", {})
            entered = entered_of(values)
            names = [str(b)[len(blocks.EDIT_FIELD) :] for b in values if
                     str(b).startswith(blocks.EDIT_FIELD)]  # fmt: skip
        except Exception:
            log_failure(log, "could not read an edit form")
            await ack(response_action="errors", errors={blocks.EDIT_JSON_BLOCK: TRY_AGAIN})
            return

        async def edit() -> Reply | EditErrors:
            try:
                return await deps.service.submit_edit(actor, approval_id, entered, version=version)
            except Exception:
                log_failure(log, "could not apply an edit")
                return Reply(False, TRY_AGAIN)

        async def late(reply: Reply | EditErrors) -> None:
            if isinstance(reply, Reply) and reply.ok:
                return
            call = await deps.records.get_call(approval_id)
            if call is not None and call.channel_id:
                # The errors can quote what was typed: untrusted text, in a message, not a form.
                said = (
                    shown(reply)
                    if isinstance(reply, Reply)
                    else truncate(escape(" ".join(reply.errors.values())), LATE_ERRORS_LIMIT)[0]
                )
                deps.teller(call.channel_id, actor.user_id)(said)

        reply = await deps.by_deadline("edit form", deps.deadline_of(context), edit(), late)
        if reply is None:
            await ack()  # the modal closes; the outcome shows on the card, or is told
            call = await deps.records.get_call(approval_id)
            if call is not None and call.channel_id:
                deps.teller(call.channel_id, actor.user_id)(STILL_WORKING_EDIT)
        elif isinstance(reply, EditErrors):
            errors: dict[str, str] = {}
            for where, what in reply.errors.items():
                block = modals.edit_error_block(names, where)
                errors[block] = f"{errors[block]} {what}" if block in errors else what
            await ack(response_action="errors", errors=errors)
        elif reply.ok:
            await ack()
        else:
            await ack(
                response_action="errors", errors={modals.edit_error_block(names, ""): shown(reply)}
            )

    return on_edit_submit
