"""Edit, then approve: a reviewer fixes a call's arguments instead of bouncing it.

The SDK has no public way to change a pending call's arguments (`RunState.approve` takes the
item as the model proposed it), so an edit is (a) a rejection of the original call whose message
names the edited arguments, plus (b) a one-shot approval bound to (agent, tool, canonical digest
of the edited arguments) that settles the agent's re-proposed call without a new card
(`Runs.apply_edits`, use_edit.lua). The original never runs; the model's transcript says what
happened; a call that is not exactly the edited one gets a card like any other.

Who may edit is exactly who may approve (`Decisions.check`); an edit counts as the editor's
approval and, under a quorum, resets the count. The arguments are checked against the tool's
`params_json_schema`, taken from the live agent definition in the registry (never from the
client), with the `jsonschema` package (a dependency of the SDK's MCP support)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema

from bot.engine.approvals import NO_ARGUMENTS, arguments_sha, canonical_arguments
from bot.engine.arguments import NonFiniteNumber, NotFinite, Reading, loads_json, read_json
from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.decisions.decide import Decisions
from bot.service.digest import digest_of
from bot.service.judgement import Allowed, Attempt, Refused, Way
from bot.service.oversight.advised import without_advice
from bot.service.policy.conditions import encode_subject, subject_of
from bot.service.policy.gate import subject_of_call
from bot.service.ports import Actor
from bot.service.replies import Code, Reply, already_text, said
from bot.store.parts.edits import EditRecord
from bot.store.records import (
    SHOWN_ARGUMENTS,
    AlreadyDecided,
    CallRecord,
    Decided,
    DecideResult,
    Gone,
    Rerouted,
    RunRecord,
    Voted,
)
from bot.store.runs import now

log = logging.getLogger(__name__)

# The kinds of call an Edit can be offered for (by default only function tools, whose
# params_json_schema checks an edit; the others when a rule sets `allow_edit: true`): shell
# commands, a patch's diff and hosted MCP arguments are edited as text, and checked for what can
# be checked without a schema. Each is rejected with a message to the model naming the edit,
# which the SDK delivers for every one of them (a shell call's and a patch's rejection output,
# a hosted MCP approval response's `reason`). Local MCP tools are not (yet) among them.
EDITABLE_KINDS = ("function", "shell", "apply_patch", "hosted_mcp")
# What the one text input of a non-function call's Edit form holds.
TEXT_LABELS = {
    "shell": "Commands (one a line)",
    "apply_patch": "Patch (the diff)",
    "hosted_mcp": "Arguments (JSON)",
}
FieldKind = Literal["string", "number", "integer", "boolean", "enum"]
# Slack's limits: a text input holds 3,000 characters, a select 100 options of 150 characters.
MAX_TEXT = 3000
MAX_OPTIONS = 100
MAX_OPTION = 150
MAX_NAME = 200
WHOLE = ""  # the key of an error about the whole arguments (the JSON text, or the form)
NOT_FINITE = "Enter a finite number: JSON has no NaN or Infinity, and the tool would receive one."


@dataclass(frozen=True)
class EditField:
    """One argument of a flat schema, as the Edit form shows it."""

    name: str
    """The parameter's name (from the tool's schema)."""
    kind: FieldKind
    """How it is entered: text, a number, true/false, or one of the schema's values."""
    value: str
    """The pre-fill: the current value as text ("" when absent); enum and boolean: JSON."""
    required: bool
    """Listed in the schema's `required`."""
    options: tuple[str, ...] = ()
    """enum and boolean: the values to choose from, each as JSON text."""
    description: str = ""
    """The parameter's description in the schema (plain text)."""


@dataclass(frozen=True)
class EditForm:
    """What the Edit modal needs: the call, and either per-field inputs or one JSON text."""

    call: CallRecord
    fields: tuple[EditField, ...]
    """Per-field inputs (a flat schema of strings, numbers, booleans and enums); empty: the
    whole arguments are edited as one JSON text (`json_text`)."""
    json_text: str
    """The current arguments, pretty JSON (a shell call: its commands; a patch: its diff)."""
    label: str = "Arguments (JSON)"
    """What the one text input holds (`TEXT_LABELS`)."""


@dataclass(frozen=True)
class EditErrors:
    """What is wrong with a submitted edit, per field (`WHOLE`: the JSON text or the form as a
    whole); nothing was decided."""

    errors: dict[str, str]
    """Field name -> what to fix, in plain words."""


# What the Slack layer hands over: per-field texts by name (None: left empty), or the JSON text.
Entered = dict[str, str | None] | str


def patch_parts(text: str) -> tuple[str, str]:
    """A patch call's display text (`<operation> <path>` then its diff) as (header, diff)."""
    header, _, diff = text.partition("\n")
    return header, diff


def edit_message(call: CallRecord) -> str:
    """What the model receives as the result of the original call (for a hosted MCP call: as
    the reason of its rejection): it was not run, and the edited call is approved once if
    proposed exactly."""
    if call.kind == "shell":
        return (
            f"Not run as proposed: the reviewer ({call.edited_by}) edited the commands of this "
            f"shell call. The edited call is approved once: to run it, call {call.tool} again "
            "with exactly these commands (one a line), nothing else:\n"
            f"{call.edited_arguments}\nAny other call needs a new approval."
        )
    if call.kind == "apply_patch":
        header, diff = patch_parts(call.edited_arguments)
        return (
            f"Not applied as proposed: the reviewer ({call.edited_by}) edited this patch. The "
            f"edited patch is approved once: to apply it, call {call.tool} again with the same "
            f"operation ({header}) and exactly this diff:\n{diff}\n"
            "Any other call needs a new approval."
        )
    if call.kind == "hosted_mcp":
        server, _, name = call.tool.partition("/")
        return (
            f"Not run as proposed: the reviewer ({call.edited_by}) edited the arguments of this "
            f"call. The edited call is approved once: to run it, call the tool {name} of MCP "
            f"server {server} again with exactly these arguments: "
            f"{canonical_arguments(call.edited_arguments)} Any other call needs a new approval."
        )
    return (
        f"Not run as proposed: the reviewer ({call.edited_by}) edited the arguments of this "
        f"call. The edited call is approved once: to run it, call {call.tool} again with "
        f"exactly these arguments: {canonical_arguments(call.edited_arguments)} "
        "Any other call needs a new approval."
    )


_EDITED = re.compile(r"call (\S+) again with exactly these arguments: (\{.*\}) Any other call")


def edited_call_in(text: str) -> tuple[str, dict[str, Any]] | None:
    """The (tool, arguments) an `edit_message` asks for, or None (the offline demo model reads
    it the way a real model reads the sentence)."""
    match = _EDITED.search(text)
    if match is None:
        return None
    try:
        arguments = json.loads(match.group(2))
    except ValueError:
        return None
    return (match.group(1), arguments) if isinstance(arguments, dict) else None


def _field(name: str, schema: Any, value: Any, required: bool) -> EditField | None:
    """The input for one property of a flat schema; None when it needs the JSON text."""
    if not isinstance(schema, dict) or len(name) > MAX_NAME:
        return None
    description = str(schema.get("description") or "")
    present = value is not None
    enum = schema.get("enum")
    if isinstance(enum, list):
        options = tuple(json.dumps(v, ensure_ascii=False) for v in enum)
        if not options or len(options) > MAX_OPTIONS or any(len(o) > MAX_OPTION for o in options):
            return None
        shown = json.dumps(value, ensure_ascii=False) if present else ""
        return EditField(name, "enum", shown, required, options, description)
    kind = schema.get("type")
    if kind == "boolean":
        shown = json.dumps(value) if isinstance(value, bool) else ""
        return EditField(name, "boolean", shown, required, ("true", "false"), description)
    if kind in ("string", "number", "integer"):
        if present and not isinstance(value, str | int | float):
            return None
        shown = value if isinstance(value, str) else (json.dumps(value) if present else "")
        if len(shown) > MAX_TEXT:
            return None
        return EditField(name, kind, shown, required, (), description)
    return None


def form_fields(schema: dict[str, Any], arguments: dict[str, Any]) -> tuple[EditField, ...]:
    """Per-field inputs for a flat object schema (every property a string, number, integer,
    boolean or enum), in the schema's order; () when the arguments need the JSON text."""
    properties = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(properties, dict) or not properties:
        return ()
    if any(name not in properties for name in arguments):
        return ()
    required = set(schema.get("required") or ())
    fields = []
    for name, prop in properties.items():
        made = _field(str(name), prop, arguments.get(name), name in required)
        if made is None:
            return ()
        fields.append(made)
    return tuple(fields)


def _parse_fields(
    fields: tuple[EditField, ...], entered: dict[str, str | None]
) -> dict[str, Any] | EditErrors:
    """The arguments the per-field inputs give, or what is wrong with them."""
    arguments: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for f in fields:
        raw = entered.get(f.name)
        if raw is None or (raw == "" and f.kind != "string"):
            if f.required:
                errors[f.name] = "Required."
            continue
        if f.kind == "string":
            arguments[f.name] = raw
            continue
        if f.kind in ("enum", "boolean") and raw not in f.options:
            errors[f.name] = "Choose one of the listed values."
            continue
        try:
            value = loads_json(raw)
        except NonFiniteNumber:
            errors[f.name] = NOT_FINITE
            continue
        except ValueError:
            value = None
        if f.kind == "integer" and (type(value) is not int):
            errors[f.name] = "Enter a whole number."
        elif f.kind == "number" and (type(value) not in (int, float)):
            errors[f.name] = "Enter a number."
        else:
            arguments[f.name] = value
    return EditErrors(errors) if errors else arguments


def _where(error: jsonschema.ValidationError, names: set[str]) -> str:
    """The field a schema error is about (`WHOLE` when it is about the arguments as a whole)."""
    if error.path and str(error.path[0]) in names:
        return str(error.path[0])
    if error.validator == "required" and isinstance(error.validator_value, list):
        missing = [n for n in error.validator_value if n not in (error.instance or {})]
        if missing and str(missing[0]) in names:
            return str(missing[0])
    return WHOLE


def schema_errors(
    schema: dict[str, Any], arguments: Any, names: set[str] | None = None
) -> EditErrors | None:
    """`arguments` checked against the tool's JSON schema: None when valid, else the errors,
    per field when `names` (the form's fields) can place them."""
    validator_cls = jsonschema.validators.validator_for(schema)
    try:
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError:
        return EditErrors({WHOLE: "The tool's schema cannot be used to check an edit."})
    errors: dict[str, str] = {}
    for error in sorted(validator_cls(schema).iter_errors(arguments), key=str):
        where = _where(error, names or set())
        path = "/".join(str(p) for p in error.path)
        text = error.message if where or not path else f"{path}: {error.message}"
        errors[where] = f"{errors[where]} {text}" if where in errors else text
    return EditErrors({k: v[:2000] for k, v in errors.items()}) if errors else None


def _edited_text(call: CallRecord, current: str, entered: str) -> str | EditErrors:
    """The edited display text of a shell call (its commands, trimmed) or a patch (its header
    kept, the diff replaced, ending as the original diff did), or what is wrong with it."""
    if call.kind == "shell":
        commands = entered.strip()
        return commands if commands else EditErrors({WHOLE: "Enter at least one command."})
    header, original = patch_parts(call.edited_arguments or call.arguments)
    diff = entered.strip("\n")
    if not diff.strip():
        return EditErrors({WHOLE: "Enter the diff to apply (reject the call to apply nothing)."})
    if original.endswith("\n"):
        diff += "\n"
    return f"{header}\n{diff}"


class _RoutedAnew(Exception):
    """edit.lua edited nothing: the call was routed anew (`CallRecord.routed`) after the
    editor's judgement read it."""


class Edits:
    """The Edit button and its modal, on a pending call."""

    def __init__(self, core: ServiceCore, decisions: Decisions) -> None:
        self.core = core
        self.store = core.store
        self.decisions = decisions

    async def _editable(
        self, actor: Actor, approval_id: str, version: str = ""
    ) -> tuple[CallRecord, RunRecord, dict[str, Any] | None, dict[str, Any] | str] | Reply:
        """Everything that must hold before an edit: the checks of Approve (the same people,
        the same refusals), then that this call may be edited and what it edits is known: a
        function tool's schema and JSON arguments; a hosted MCP call's JSON arguments (no
        schema: the server's tools are not known here); a shell call's commands; a patch's
        diff (text)."""
        checked = await self.decisions.check(
            actor, approval_id, Attempt(Way.EDIT, version=version), audited_as="edit"
        )
        if isinstance(checked, Reply):
            return checked
        call, run = checked
        reply: Reply | None = None
        function = call.kind == "function"
        schema = (
            self.core.engine.tool_schema(run.agent_name, call.agent, call.tool)
            if function
            else None
        )
        current = call.edited_arguments or call.arguments
        arguments: Any = None
        if call.kind in ("function", "hosted_mcp"):
            try:
                arguments = json.loads(current)
            except ValueError:
                arguments = None
        elif call.kind == "shell":
            arguments = current
        elif call.kind == "apply_patch":
            arguments = patch_parts(current)[1]
        if call.kind not in EDITABLE_KINDS:  # (the judgement asked the rule in force)
            reply = Reply(
                False,
                said(
                    "Editing is not allowed for tool {tool}: approve or reject the call as "
                    "proposed.",
                    tool=Code(call.tool),
                ),
            )
        elif call.arguments_chars > len(call.arguments) or not isinstance(arguments, dict | str):
            reply = Reply(
                False, "These arguments are too long (or not a JSON object) to edit in Slack."
            )
        elif isinstance(arguments, str) and len(arguments) > MAX_TEXT:
            reply = Reply(False, f"This text is longer than Slack's {MAX_TEXT:,}-character input.")
        elif isinstance(arguments, str) and not arguments.strip():
            reply = Reply(False, "This call has nothing to edit (a patch that deletes a file).")
        elif function and schema is None:
            reply = Reply(
                False,
                said(
                    "The bot does not know the parameters of tool {tool} (it is not a function "
                    "tool of a registered agent), so its arguments cannot be edited.",
                    tool=Code(call.tool),
                ),
            )
        else:
            snapshot = await self.store.load_snapshot(run.run_id)
            changed = (
                self.core.engine.definitions_changed(run.agent_name, snapshot)
                if snapshot is not None
                else ["the run's stored state is missing"]
            )
            if changed:
                reply = Reply(
                    False,
                    "This call cannot be edited: " + "; ".join(changed) + ". Approve or reject it.",
                )
        if reply is not None:
            await self.core.audit(
                AuditKind.REFUSED, call=call, actor=actor, decision="edit", detail=reply.text
            )
            return reply
        return call, run, schema, arguments

    async def edit_form(self, actor: Actor, approval_id: str) -> EditForm | Reply:
        """Check an Edit click before its modal opens: only for a call this person could
        approve, that the policy lets them edit."""
        checked = await self._editable(actor, approval_id)
        if isinstance(checked, Reply):
            return checked
        call, _, schema, arguments = checked
        if isinstance(arguments, str):  # shell commands, a patch's diff
            return EditForm(call, (), arguments, TEXT_LABELS[call.kind])
        pretty = json.dumps(arguments, indent=2, ensure_ascii=False)
        if schema is None:  # hosted MCP: JSON, checked to be an object
            return EditForm(call, (), pretty, TEXT_LABELS[call.kind])
        return EditForm(call, form_fields(schema, arguments), pretty)

    async def submit_edit(
        self, actor: Actor, approval_id: str, entered: Entered, *, version: str = ""
    ) -> Reply | EditErrors:
        """Apply a submitted edit: the arguments are read against the tool's schema (errors go
        back to the form, nothing decided); then one compare-and-swap records them, counts the
        editor's approval, and with a quorum of one decides the call. `version`: the version of
        the call the form was opened on: after another edit, the form is out of date, and
        nothing is replaced. A call routed anew between the judgement's read and the edit
        (edit.lua: nothing edited) is read and judged again, once."""
        try:
            return await self._submit(actor, approval_id, entered, version)
        except _RoutedAnew:
            log.info("%s was routed anew after its edit's read: judged again", approval_id)
        try:
            return await self._submit(actor, approval_id, entered, version)
        except _RoutedAnew:
            return Reply(False, Rerouted().why)

    async def _submit(
        self, actor: Actor, approval_id: str, entered: Entered, version: str
    ) -> Reply | EditErrors:
        checked = await self._editable(actor, approval_id, version)
        if isinstance(checked, Reply):
            return checked
        call, run, schema, current = checked
        if isinstance(current, str):
            if not isinstance(entered, str):
                return Reply(False, "This form is out of date: click Edit on the card again.")
            made = _edited_text(call, current, entered)
            if isinstance(made, EditErrors):
                return made
            return await self._changed(actor, call, run, made)
        fields = form_fields(schema, current) if schema is not None else ()
        if fields and isinstance(entered, dict):
            parsed = _parse_fields(fields, entered)
        elif not fields and isinstance(entered, str):
            try:
                parsed = loads_json(entered)
            except NonFiniteNumber:
                parsed = EditErrors({WHOLE: NOT_FINITE})
            except ValueError as exc:
                parsed = EditErrors({WHOLE: f"Not valid JSON: {exc}"})
            if not isinstance(parsed, dict | EditErrors):
                parsed = EditErrors({WHOLE: "The arguments must be a JSON object."})
        else:
            return Reply(False, "This form is out of date: click Edit on the card again.")
        if isinstance(parsed, EditErrors):
            return parsed
        if schema is not None:
            invalid = schema_errors(schema, parsed, {f.name for f in fields})
            if invalid is not None:
                return invalid
            # What the tool would receive, read as the agent's own calls are (the same parser).
            reading = self.core.engine.receive(
                run.agent_name, call.agent, call.tool, json.dumps(parsed)
            )
            if isinstance(reading, NotFinite):
                name = reading.where.split(".")[1] if reading.where.count(".") else WHOLE
                where = name if name in {f.name for f in fields} else WHOLE
                said = NOT_FINITE if where else f"{NOT_FINITE} ({reading.where})"
                return EditErrors({where: said})
        else:
            reading = read_json(json.dumps(parsed))
        return await self._changed(
            actor, call, run, json.dumps(parsed, indent=2, ensure_ascii=False), reading
        )

    async def _changed(
        self, actor: Actor, call: CallRecord, run: RunRecord, pretty: str,
        reading: Reading = NO_ARGUMENTS,
    ) -> Reply | EditErrors:  # fmt: skip
        """Apply an edit that changes something, within the bounds of a stored call, and that
        its editor could approve as edited (the judgement of the edit, on what the tool would
        receive: `reading` for JSON arguments)."""
        if (
            canonical_arguments(pretty) == canonical_arguments(call.arguments)
            and not call.edited_sha
        ):
            return EditErrors({WHOLE: "Nothing changed: use Approve for the call as proposed."})
        if canonical_arguments(pretty) == canonical_arguments(call.edited_arguments or "null"):
            return EditErrors({WHOLE: "Nothing changed since the last edit: use Approve."})
        if len(pretty) > SHOWN_ARGUMENTS:
            return EditErrors({WHOLE: f"At most {SHOWN_ARGUMENTS:,} characters of arguments."})
        subject = self._edited_subject(call, pretty, reading)
        attempt = Attempt(Way.EDIT, version=call.version, edited=subject)
        judged = await self.decisions.judgement.settle(actor, run, call, attempt)
        if isinstance(judged, Refused):
            refused = await self.decisions.refused(actor, call, attempt, judged, "edit")
            return EditErrors({WHOLE: refused.text})
        if isinstance(judged, Allowed):
            call = await self.decisions.quorum_in_force(call, judged.rule)
        return await self._apply(actor, call, run, pretty)

    @staticmethod
    def _edited_subject(call: CallRecord, pretty: str, reading: Reading) -> dict[str, Any]:
        """What the policy reads of the call as edited: the arguments as the tool would read
        them, a shell call's commands; a patch keeps its file and kind."""
        if call.kind == "shell":
            return subject_of("shell", NO_ARGUMENTS, encode_subject({"command": pretty}))
        if call.kind == "apply_patch":  # (the advice was on the patch before the edit)
            return without_advice(subject_of_call(call))
        return subject_of(call.kind, reading)

    async def _apply(self, actor: Actor, call: CallRecord, run: RunRecord, pretty: str) -> Reply:
        sha = arguments_sha(pretty)
        edited = dataclasses.replace(call, edited_sha=sha, edited_arguments=pretty)
        record = EditRecord(
            approval_id=call.approval_id, agent=call.agent, tool=call.tool, sha=sha,
            pause=call.pause, by=actor.user_id, team=actor.team_id, at=now(),
            required=call.required, original_digest=call.original_digest or call.digest,
            digest=digest_of(edited),
        )  # fmt: skip
        owner = self.core.new_owner()

        def audited(pipe: Any, result: DecideResult) -> None:
            """The edit (both digests, the editor) and the vote or decision it counts as."""
            self.core.audit_in(
                pipe, AuditKind.EDITED, call=call, actor=actor, decision="edit",
                detail=f"digest {record.original_digest} -> {record.digest}",
                text=canonical_arguments(pretty)[:1000],  # the edited arguments: free text
            )  # fmt: skip
            if isinstance(result, Voted):
                kind, said_ = AuditKind.APPROVAL_VOTE, f"{result.votes} of {result.required}"
            else:
                kind, said_ = AuditKind.DECIDED, f"approved with edits (digest {record.digest})"
            self.core.audit_in(
                pipe, kind, call=edited, actor=actor, decision="approve_edited", detail=said_
            )

        result = await self.store.edit(
            call.approval_id,
            expected_digest=call.digest,
            record=record,
            arguments=pretty,
            owner=owner,
            routed=str(call.routed),
            after=audited,
        )
        if isinstance(result, Rerouted):  # nothing edited: `submit_edit` judges again
            raise _RoutedAnew
        if isinstance(result, AlreadyDecided):
            return Reply(False, already_text(result))
        if isinstance(result, Gone):
            return Reply(False, result.why)
        if isinstance(result, Decided) and result.resume:
            self.core.spawn(
                self.core.enqueue("resume", run.run_id, owner), name=f"resume-{run.run_id}"
            )
        return Reply(True)
