"""What a card shows beside a pending call, so a reviewer can decide from the card alone: why (the
agent's own words, its reasoning summary), what the tool is (its description, its parameters'),
and the call rendered for its kind (a patch as a unified diff, shell commands with their working
directory and timeout, a hosted MCP call with its server, a function tool's arguments as
key/value lines). Long text is cut visibly; the whole is one click away ("Show all",
the call's details: `bot.slack.render.details`). All of it is untrusted: escaped here.
"""

from __future__ import annotations

import json

from slack_sdk.models.blocks import Block, ButtonElement, SectionBlock

from bot.slack.blocks import SHOW_ALL
from bot.slack.render.base import SECTION_LIMIT, md
from bot.slack.text import blockquote, clean, code_block, escape, inline, truncate
from bot.store.records import ArgumentField, CallContext, CallRecord, PatchOperation
from bot.untrusted import ZWSP

SAID_SHOWN = 600  # characters of the agent's words on the card
THOUGHT_SHOWN = 300
NO_REASON = "_the agent gave no reason_"


def shortened(text: str, limit: int) -> str:
    """Plain untrusted text cut to `limit` characters with a visible "…" (not escaped)."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def why_block(call: CallRecord, context: CallContext) -> SectionBlock:
    """The agent's own words (quoted: they cannot pass for the bot's), or that it gave none."""
    who = f"*Why* (agent *{inline(call.agent, 80)}*):"
    if context.said:
        text = f"{who}\n" + blockquote(shortened(context.said, SAID_SHOWN), SAID_SHOWN + 200)
    else:
        text = f"{who} {NO_REASON}"
    if context.thought:
        text += "\n_Its reasoning summary:_\n" + blockquote(
            shortened(context.thought, THOUGHT_SHOWN), THOUGHT_SHOWN + 200
        )
    return SectionBlock(text=md(text))


def description_text(call: CallRecord, context: CallContext) -> str:
    """The tool's description, one line, and its parameters' descriptions (the call's
    details modal shows them)."""
    parts = []
    if context.description:
        parts.append(f"`{inline(call.tool, 80)}`: {inline(context.description, 300)}")
    about = [f"_{inline(f.name, 60)}_: {inline(f.about, 150)}" for f in context.fields if f.about]
    if about:
        parts.append("Parameters: " + " · ".join(about))
    return "\n".join(parts)


def _value_line(name: str, value: str) -> str:
    """One `name: value` line; a value with line breaks is shown JSON-quoted, on one line."""
    if any(c in value for c in "\r\n\u2028\u2029"):
        value = json.dumps(value, ensure_ascii=False)
    return f"{name}: {value}"


def _fenced(lines: str, limit: int) -> tuple[str, bool]:
    """Untrusted lines as a code block of at most `limit` characters (no truncation note)."""
    body = escape(clean(lines)).replace("```", f"`{ZWSP}`{ZWSP}`")
    body, cut = truncate(body, limit - 6)
    return f"```{body}```", cut


VALUE_SHOWN = 160  # characters of one argument's value (the engine's cut, when it cut)


def fields_of(call: CallRecord, context: CallContext) -> tuple[ArgumentField, ...]:
    """A function tool's arguments by name: as stored beside the call, or (when nothing of
    them needed storing) read from its stored arguments, kept whole; empty when they are not
    a JSON object."""
    if context.fields or call.kind not in ("function", "mcp"):
        return context.fields
    if call.arguments_chars > len(call.arguments):
        return ()
    try:
        data = json.loads(call.arguments)
    except ValueError:
        return ()
    if not isinstance(data, dict):
        return ()
    found = []
    for name, value in data.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        shown = text if len(text) <= VALUE_SHOWN else text[: VALUE_SHOWN - 1] + "…"
        found.append(ArgumentField(str(name)[:60], shown, len(text)))
    return tuple(found)


def _fields_text(call: CallRecord, fields: tuple[ArgumentField, ...]) -> tuple[str, bool]:
    """One line per argument, long values cut (with a note naming them)."""
    lines = "\n".join(_value_line(f.name, f.value) for f in fields) or "(none)"
    block, cut = _fenced(lines, SECTION_LIMIT - 600)
    notes = [
        f"_(truncated: showing {len(f.value) - 1:,} of {f.chars:,} characters of "
        f"{inline(f.name, 60)})_"
        for f in fields
        if f.chars > len(f.value)
    ][:5]
    stored_cut = call.arguments_chars > len(call.arguments)
    try:
        total = len(json.loads(call.arguments)) if not stored_cut else len(fields)
    except (ValueError, TypeError):
        total = len(fields)
    if total > len(fields):
        notes.append(f"_(truncated: {total - len(fields):,} more arguments not shown)_")
    if cut:
        notes.append("_(truncated: not every argument is shown)_")
    if (notes or stored_cut) and not call.decided:
        notes.append("*Show all* opens the whole call.")
    shown = block + ("\n" + "\n".join(notes) if notes else "")
    return shown, bool(notes or stored_cut)


def unified_diff(arguments: str) -> str:
    """A patch's display text (`<operation> <path>` then the diff) as a unified diff: file
    headers first (`--- a/…`, `+++ b/…`; `/dev/null` for a created or deleted file)."""
    header, _, diff = arguments.partition("\n")
    operation, _, path = header.partition(" ")
    before = "/dev/null" if operation == "create_file" else f"a/{path}"
    after = "/dev/null" if operation == "delete_file" else f"b/{path}"
    return f"--- {before}\n+++ {after}\n{diff}".rstrip("\n")


EDITOR_KINDS = ("create_file", "update_file", "delete_file")  # what the SDK's editor applies
STEP_SHOWN = 120  # characters of one path in a patch's header
HEADER_SHOWN = 1000  # characters of a patch's header, its operations listed


def _step_text(step: PatchOperation) -> str:
    """One operation as the editor applies it, its paths in code spans (that they cannot
    leave): e.g. "update_file `docs/a.md`, moved to `ci.yml`"."""
    kind = step.kind if step.kind in EDITOR_KINDS else f"unknown `{inline(step.kind, 40)}`"
    text = f"{kind} `{inline(step.path or '?', STEP_SHOWN)}`"
    if step.move_to is not None:
        text += f", moved to `{inline(step.move_to, STEP_SHOWN)}`"
    return text


def patch_header(call: CallRecord, context: CallContext) -> tuple[str, bool]:
    """What the patch's editor will do, every operation named (escaped, cut): e.g. "3
    operations: delete_file `src/main.py`; update_file `docs/a.md`, moved to `ci.yml`; …",
    and whether some were left out (Show all lists them). A call stored without its
    operations (before they were kept) shows its display text's first line."""
    if not context.operations:
        return inline(call.arguments.partition("\n")[0], 300), False
    total = max(context.operations_total, len(context.operations))
    shown: list[str] = []
    room = HEADER_SHOWN
    for step in context.operations:
        text = _step_text(step)
        if len(text) + 2 > room:
            break
        shown.append(text)
        room -= len(text) + 2
    left = total - len(shown)
    listed = "; ".join(shown) + (f"; _and {left:,} more_" if left else "")
    return (listed if total == 1 else f"{total:,} operations: {listed}"), left > 0


def what_blocks(call: CallRecord, context: CallContext, limit: int) -> list[Block]:
    """The call for its kind, at most `limit` characters of code; a pending card whose call is
    shown cut gets the Show all button."""
    details = "  ·  ".join(f"*{escape(a)}:* `{inline(b, 300)}`" for a, b in context.details)
    cut = call.arguments_chars > len(call.arguments)
    if call.kind == "apply_patch":
        header, left_out = patch_header(call, context)
        text = f"*Patch:* {header}\n"
        text += code_block(unified_diff(call.arguments), limit - len(text), call.arguments_chars)
        cut = cut or left_out
    elif call.kind == "shell":
        text = "*Commands:*\n" + code_block(call.arguments, limit, call.arguments_chars)
        text += f"\n{details}" if details else ""
    elif call.kind == "hosted_mcp":
        text = (details + "\n" if details else "") + "*Arguments:*\n"
        text += code_block(call.arguments, limit, call.arguments_chars)
    elif fields_of(call, context):
        text, cut = _fields_text(call, fields_of(call, context))
    else:
        text = code_block(call.arguments, limit, call.arguments_chars)
    accessory = None
    if cut and not call.decided:
        accessory = ButtonElement(text="Show all", action_id=SHOW_ALL, value=call.approval_id)
    return [SectionBlock(text=md(text), accessory=accessory)]


def context_blocks(call: CallRecord, context: CallContext, limit: int) -> list[Block]:
    """Why, and the call: what replaces the bare arguments on a card."""
    return [why_block(call, context), *what_blocks(call, context, limit)]
