"""The HTTP edge in front of Bolt: a request is authenticated before its body is parsed at all,
and a signed body that Slack would never send is answered 400 with one WARNING line, never a
500.

Bolt parses the body itself and reads it with plain indexing (`body["actions"][0]`,
`payload["team"].get("id")`, ...), so a JSON array, `payload=`, `actions: []`, an `event` that is
a string or a `team` that is a list raise inside it. Here a signed body is parsed once and its
shape checked against what Slack sends, as far as Bolt and the bot's listeners read it (the
`Shape` rules below); Bolt then gets the body parsed here (`bolt_request`), so it never parses
it again (its own parser takes any form that merely contains the word "payload", a command's
text included, for an interaction and loses the command). The fuzz test
(`tests/test_intake_fuzz.py`) sends arbitrary shapes to the real app to keep this class closed."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_internals import build_async_context
from slack_bolt.request.async_request import AsyncBoltRequest

from bot.slack.blocks import REJECT_MODAL

log = logging.getLogger(__name__)

MAX_AGE_SECONDS = 60 * 5
# Interaction types whose `actions` Bolt indexes (`body["actions"][0]`).
ACTION_TYPES = frozenset({"block_actions", "interactive_message", "attachment_actions"})
VIEW_TYPES = frozenset({"view_submission", "view_closed"})
# What the Events API sends as a JSON body; interactions come as a form's `payload`.
EVENT_TYPES = frozenset({"event_callback", "url_verification", "app_rate_limited"})


@dataclass(frozen=True)
class Refusal:
    """Why a request is not passed to Bolt: 401 (not from Slack) or 400 (malformed)."""

    status: int
    reason: str


@dataclass(frozen=True)
class Admitted:
    """A request that may go to Bolt, with its body as parsed here."""

    body: dict[str, Any]
    """The form fields of a slash command, the `payload` object of an interaction, or the
    JSON object of an Events API request; empty for Slack's `ssl_check`."""


class Malformed(ValueError):
    """A part of a signed body that is not as Slack sends it (the message says which)."""


def _signed(secret: str, body: bytes, timestamp: str, signature: str) -> bool:
    base = b"v0:" + timestamp.encode("utf-8", "replace") + b":" + body
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


def authenticate(
    secret: str, body: bytes, headers: Any, now: float | None = None
) -> Refusal | None:
    """Slack's request signature (HMAC-SHA256 over `v0:<timestamp>:<body>`, 5-minute window),
    checked on the raw bytes before anything reads them."""
    timestamp = str(headers.get("X-Slack-Request-Timestamp") or "")
    signature = str(headers.get("X-Slack-Signature") or "")
    if not timestamp or not signature or not _signed(secret, body, timestamp, signature):
        return Refusal(401, "missing or invalid signature")
    if not timestamp.isdigit():
        return Refusal(400, "signed, but the timestamp header is not a number")
    if abs((now if now is not None else time.time()) - int(timestamp)) > MAX_AGE_SECONDS:
        return Refusal(401, "stale timestamp")
    return None


# What Slack sends, as far as Bolt and the listeners read it ----------------------------------

Check = Callable[[Any, str], None]


def _text(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise Malformed(f"`{where}` is not a string")


def _optional_text(value: Any, where: str) -> None:
    if value is not None and not isinstance(value, str):
        raise Malformed(f"`{where}` is not a string")


def _object(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise Malformed(f"`{where}` is not an object")


def _who(value: Any, where: str) -> None:
    """`team`, `user`, `channel`, `enterprise`: an id, or an object whose ids are strings."""
    if value is None or isinstance(value, str):
        return
    _object(value, where)
    for key in ("id", "team_id", "enterprise_id"):
        _optional_text(value.get(key), f"{where}.{key}")


def _fields(obj: Mapping[str, Any], where: str, rules: Mapping[str, Check]) -> None:
    """Each present field of `obj` that has a rule must pass it."""
    for key, rule in rules.items():
        if key in obj:
            rule(obj[key], f"{where}.{key}" if where else key)


def _authorizations(value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, list):
        raise Malformed(f"`{where}` is not a list")
    for number, item in enumerate(value):
        _object(item, f"{where}[{number}]")
        _fields(item, f"{where}[{number}]", IDENTITY)


# Bolt reads these fields of any body, and of an event, to build its context.
IDENTITY: dict[str, Check] = {
    "team": _who,
    "user": _who,
    "channel": _who,
    "enterprise": _who,
    "team_id": _optional_text,
    "user_id": _optional_text,
    "channel_id": _optional_text,
    "enterprise_id": _optional_text,
    "user_team": _optional_text,
    "thread_ts": _optional_text,
    "authorizations": _authorizations,
    "message": lambda value, where: _event_part(value, where),
    "previous_message": lambda value, where: _event_part(value, where),
    "item": lambda value, where: _event_part(value, where),
    "assistant_thread": lambda value, where: _event_part(value, where),
    "function_data": _object,
    "function_execution_id": _optional_text,
    "bot_access_token": _optional_text,
}


def _event_part(value: Any, where: str) -> None:
    """An object Bolt reads ids from (a message, its previous version, a reaction's item)."""
    if value is None:
        return
    _object(value, where)
    _fields(value, where, IDENTITY)


def _event(value: Any, where: str) -> None:
    _object(value, where)
    _text(value.get("type"), f"{where}.type")
    _fields(value, where, IDENTITY)
    _fields(
        value,
        where,
        {key: _optional_text for key in ("text", "ts", "subtype", "bot_id", "tab", "channel_type")},
    )


def _action(value: Any, where: str) -> None:
    _object(value, where)
    _text(value.get("action_id"), f"{where}.action_id")
    _fields(value, where, {key: _optional_text for key in ("value", "block_id", "type")})


def _actions(value: Any, where: str) -> None:
    if not isinstance(value, list) or not value:
        raise Malformed(f"`{where}` is not a non-empty list")
    for number, item in enumerate(value):
        _action(item, f"{where}[{number}]")


def _state(value: Any, where: str) -> None:
    """A view's `state.values`: block id -> action id -> an input's object."""
    _object(value, where)
    values = value.get("values", {})
    _object(values, f"{where}.values")
    for block, inputs in values.items():
        _object(inputs, f"{where}.values.{block}")
        for action, element in inputs.items():
            _object(element, f"{where}.values.{block}.{action}")
            _optional_text(element.get("value"), f"{where}.values.{block}.{action}.value")


def _own_form(value: Any, where: str) -> None:
    """The bot's own Reject form carries its call in `private_metadata`: a JSON object."""
    meta = _json_object(value if isinstance(value, str) else "", f"`{where}`")
    _text(meta.get("approval_id"), f"{where}.approval_id")
    _optional_text(meta.get("channel"), f"{where}.channel")
    if not isinstance(meta.get("always", False), bool):
        raise Malformed(f"`{where}.always` is not true or false")


def _view(value: Any, where: str) -> None:
    _object(value, where)
    if value.get("callback_id") == REJECT_MODAL:
        _own_form(value.get("private_metadata"), f"{where}.private_metadata")
    _fields(
        value,
        where,
        {
            "id": _optional_text,
            "type": _optional_text,
            "callback_id": _optional_text,
            "private_metadata": _optional_text,
            "team_id": _optional_text,
            "app_installed_team_id": _optional_text,
            "state": _state,
        },
    )


RULES: dict[str, Check] = {
    **IDENTITY,
    "actions": _actions,
    "view": _view,
    "event": _event,
    "container": _object,
    "trigger_id": _optional_text,
    "response_url": _optional_text,
    "callback_id": _optional_text,
    "api_app_id": _optional_text,
    "event_id": _optional_text,
    "challenge": _optional_text,
}


def _slack_object(data: dict[str, Any], events: bool) -> None:
    """An interaction payload (`events` false) or an Events API body (`events` true)."""
    kind = data.get("type")
    _text(kind, "type")
    if (kind in EVENT_TYPES) != events:
        sent = "JSON body" if events else "`payload`"
        raise Malformed(f"a {sent} of type {kind!r}, which Slack does not send that way")
    if kind in ACTION_TYPES:
        _actions(data.get("actions"), "actions")
    if kind in VIEW_TYPES:
        _view(data.get("view"), "view")
        _text(data["view"].get("callback_id"), "view.callback_id")
    if kind == "event_callback":
        _event(data.get("event"), "event")
    _fields(data, "", RULES)


def _json_object(text: str | bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Malformed(f"{what} is not valid JSON") from exc
    if not isinstance(value, dict):
        raise Malformed(f"{what} is not a JSON object")
    return value


def parse(body: bytes, content_type: str) -> dict[str, Any]:
    """A signed body as Slack sends it: a JSON object (the Events API), a form with one
    `payload` JSON object (interactions), or a form of text fields (slash commands). Raises
    `Malformed` naming the first part that is not."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed("the body is not UTF-8") from exc
    if content_type.startswith("application/json"):
        data = _json_object(text, "the body")
        _slack_object(data, events=True)
        return data
    fields = parse_qsl(text, keep_blank_values=True)
    payloads = [value for key, value in fields if key == "payload"]
    if not payloads:
        return dict(fields)
    if len(payloads) > 1 or len(fields) > 1:
        raise Malformed("a form with `payload` and other fields")
    payload = _json_object(payloads[0], "`payload`")
    _slack_object(payload, events=False)
    return payload


def ssl_check(body: bytes, content_type: str) -> dict[str, str] | None:
    """Slack's `ssl_check=1` request (which Slack may send unsigned), as a form: a tiny one of
    nothing but `ssl_check` and `token`."""
    if content_type.startswith("application/json") or len(body) > 512:
        return None
    try:
        form = dict(parse_qsl(body.decode("ascii")))
    except UnicodeDecodeError:
        return None
    return form if form.get("ssl_check") == "1" and set(form) <= {"ssl_check", "token"} else None


def admit(secret: str | None, body: bytes, headers: Any, content_type: str) -> Admitted | Refusal:
    """The parsed body when the request may go to Bolt; otherwise what to answer (logged here,
    once, as a WARNING)."""
    if (form := ssl_check(body, content_type)) is not None:
        return Admitted(form)  # Slack's certificate check: Bolt answers 200 and does nothing else
    refusal = authenticate(secret, body, headers) if secret is not None else None
    if refusal is None:
        try:
            return Admitted(parse(body, content_type))
        except Malformed as malformed:
            refusal = Refusal(400, str(malformed))
    log.warning("refused a request to /slack/events (%d): %s", refusal.status, refusal.reason)
    return refusal


def bolt_request(raw: bytes, admitted: Admitted, query: str, headers: Any) -> AsyncBoltRequest:
    """Bolt's request for an admitted body: the raw text (Bolt checks its signature too) with
    the body parsed here, so Bolt does not parse it again."""
    request = AsyncBoltRequest(body="", query=query, headers=headers)
    request.raw_body = raw.decode("utf-8")  # admitted bodies are UTF-8
    request.body = admitted.body
    request.context = build_async_context(AsyncBoltContext({}), admitted.body)
    return request
