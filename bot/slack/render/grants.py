"""Block Kit for grants (#19, item 2): the Always approve form that asks a grant's scope, what
a card says of the grant a call made or was settled by, and the App Home's list of grants with
their Revoke buttons.

Why a form (a modal opened from Always approve) rather than a menu on the card: the card is a
shared message, and what a reviewer picks on it is theirs alone until they click, so a menu
would be one more control in everyone's way on every card; the form opens only for the person
who asked for a lasting approval, says exactly what it will let through (which tool, which
channel, until when, for which values), and defaults to the narrowest choice (this run only).
A grant is then a deliberate act, not a side effect of a click. The form carries only the
call's opaque id; its choice is judged on the server against the policy in force.
"""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    CheckboxesElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    InputBlock,
    Option,
    PlainTextObject,
    RadioButtonsElement,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.service.decisions.grants import ChooseScope, GrantScope, GrantView, until_text
from bot.service.policy.rules import human
from bot.slack.blocks import (
    GRANT_MODAL,
    GRANT_REVOKE,
    NARROW_BLOCK,
    NARROW_INPUT,
    SCOPE_BLOCK,
    SCOPE_INPUT,
)
from bot.slack.render.base import md, person
from bot.slack.text import inline
from bot.store.grants import canonical
from bot.store.records import CallRecord

RUN_ONLY = "run"
HOME_GRANTS = 20  # grants listed on a Home (the view holds at most 100 blocks)


def _where(narrow: dict[str, Any]) -> str:
    return "".join(
        f" {'where' if n == 0 else 'and'} `{inline(name, 60)}` = `{inline(canonical(v), 80)}`"
        for n, (name, v) in enumerate(sorted(narrow.items()))
    )


def grant_modal(choose: ChooseScope) -> View:
    """The form behind Always approve on a call whose rule allows grants: this run only (the
    default), or this channel for one of the lengths the policy allows, optionally only for
    the current values of chosen arguments."""
    call = choose.call
    options = [Option(value=RUN_ONLY, label="This run only")]
    options += [
        Option(value=str(seconds), label=f"This channel for {human(seconds)}")
        for seconds in choose.choices
    ]
    blocks: list[Block] = [
        SectionBlock(
            text=md(
                f"Approve `{inline(call.tool)}` requested by agent *{inline(call.agent)}*, and "
                "let later calls of it through without a card: for the rest of this run, or "
                f"in <#{call.channel_id}> for up to {human(choose.grant_max)} (the policy's "
                "limit), for this agent's tool."
            )
        ),
        InputBlock(
            block_id=SCOPE_BLOCK,
            label=PlainTextObject(text="For how long"),
            element=RadioButtonsElement(
                action_id=SCOPE_INPUT, options=options, initial_option=options[0]
            ),
        ),
    ]
    if choose.arguments:
        narrow = [
            Option(value=name, text=md(f"only when `{inline(name, 60)}` = `{inline(value, 80)}`"))
            for name, value in choose.arguments
        ]
        blocks.append(
            InputBlock(
                block_id=NARROW_BLOCK,
                label=PlainTextObject(text="Only for these values (a channel grant)"),
                element=CheckboxesElement(action_id=NARROW_INPUT, options=narrow),
                optional=True,
            )
        )
    blocks.append(
        ContextBlock(
            elements=[
                md(
                    "A channel grant is yours: it is judged again against the policy at each "
                    "use, listed by `/agent grants` and on the App Home, and you or the "
                    "channel's approvers can revoke it there."
                )
            ]
        )
    )
    return View(
        type="modal",
        callback_id=GRANT_MODAL,
        title=PlainTextObject(text="Always approve"),
        submit=PlainTextObject(text="Approve"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=json.dumps({"approval_id": call.approval_id, "channel": call.channel_id}),
        blocks=blocks,
    )


def scope_of(values: dict[str, Any]) -> GrantScope | None:
    """What the submitted form chose (None: nothing the form offers; the service judges the
    rest against the policy)."""
    element = (values.get(SCOPE_BLOCK) or {}).get(SCOPE_INPUT) or {}
    chosen = str((element.get("selected_option") or {}).get("value") or "")
    if chosen == RUN_ONLY:
        seconds = 0
    elif chosen.isdigit() and len(chosen) <= 9:
        seconds = int(chosen)
    else:
        return None
    picked = ((values.get(NARROW_BLOCK) or {}).get(NARROW_INPUT) or {}).get("selected_options")
    names = tuple(str(o.get("value", "")) for o in picked or [] if isinstance(o, dict))
    return GrantScope(seconds, tuple(dict.fromkeys(names)))


def granted_text(call: CallRecord) -> str:
    """What a card adds to its decision line about the grant the call made or used ('': no
    grant): e.g. `(always approve: this channel, 4h, delete_logs where path = /x, until
    14:05 UTC)`, or `by the grant of @bob (until 14:05 UTC)`."""
    if not call.granted:
        return ""
    try:
        note = json.loads(call.granted)
        by, until, made = str(note["by"]), float(note["until"]), float(note["made"])
        narrow = note.get("narrow") or {}
    except (ValueError, KeyError, TypeError):
        return ""
    if note.get("used"):
        return f" through the grant of {person(by)}{_where(narrow)}, until {until_text(until)}"
    return (
        f" (always approve: this channel, {human(round(until - made))}, "
        f"`{inline(call.tool)}`{_where(narrow)}, until {until_text(until)})"
    )


def home_grants(views: list[GrantView]) -> list[Block]:
    """The App Home's Grants section (nothing when the viewer sees no grant): each grant,
    with Revoke where the viewer may revoke it (the button carries only the grant's id)."""
    if not views:
        return []
    blocks: list[Block] = [HeaderBlock(text="Grants")]
    for view in views[:HOME_GRANTS]:
        grant = view.grant
        text = (
            f"`{inline(grant.tool or grant.sticky)}` of agent "
            f"*{inline(grant.sticky.partition('::')[0], 60)}*{_where(grant.narrow)} in "
            f"<#{grant.channel}>: approved without a card, by the grant of {person(grant.user)}, "
            f"until {until_text(grant.until)}"
        )
        blocks.append(SectionBlock(text=md(text)))
        if view.revocable and grant.grant_id:
            confirm = ConfirmObject(
                title="Revoke this grant?",
                text="Its calls will wait for a decision again.",
                confirm="Revoke",
                deny="Keep it",
            )
            button = ButtonElement(
                text="Revoke", action_id=GRANT_REVOKE, value=grant.grant_id, style="danger",
                confirm=confirm,
            )  # fmt: skip
            blocks.append(ActionsBlock(block_id=f"grant:{grant.grant_id}", elements=[button]))
    if len(views) > HOME_GRANTS:
        blocks.append(
            ContextBlock(elements=[md(f"…and {len(views) - HOME_GRANTS} more: `/agent grants`.")])
        )
    return blocks
