"""The HTTP edge in front of Bolt: a request is authenticated before its body is parsed at all,
and a signed body that Slack would never send is answered 400 with a log line, never a 500.

Bolt parses the body before its own signature check runs, and some shapes (a JSON array, a
string, `payload=[]`, an `event` that is not an object, deeply nested JSON) raise inside it.
Everything that reaches Bolt from here is signed and shaped like one of Slack's requests."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

log = logging.getLogger(__name__)

MAX_AGE_SECONDS = 60 * 5


@dataclass(frozen=True)
class Refusal:
    """Why a request is not passed to Bolt: 401 (not from Slack) or 400 (malformed)."""

    status: int
    reason: str


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


def _json_object(text: str | bytes, what: str) -> dict[str, Any] | Refusal:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return Refusal(400, f"{what} is not valid JSON")
    if not isinstance(value, dict):
        return Refusal(400, f"{what} is not a JSON object")
    return value


def check_shape(body: bytes, content_type: str) -> Refusal | None:
    """A signed body must still be one of Slack's shapes: a form (a command, or a `payload`
    JSON object for interactions) or a JSON object (events), with an object as `event`."""
    if content_type.startswith("application/json"):
        data = _json_object(body, "the body")
        if isinstance(data, Refusal):
            return data
        if data.get("type") == "event_callback" and not isinstance(data.get("event"), dict):
            return Refusal(400, "an event_callback whose `event` is not an object")
        return None
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=False)
    except UnicodeDecodeError:
        return Refusal(400, "the form body is not UTF-8")
    if "payload" in form:
        payload = _json_object(form["payload"][0], "`payload`")
        if isinstance(payload, Refusal):
            return payload
    return None


def is_ssl_check(body: bytes, content_type: str) -> bool:
    """Slack's `ssl_check=1` request (which Slack may send unsigned): a tiny form of nothing but
    `ssl_check` and `token`."""
    if content_type.startswith("application/json") or len(body) > 512:
        return False
    try:
        form = parse_qs(body.decode("ascii"))
    except UnicodeDecodeError:
        return False
    return form.get("ssl_check") == ["1"] and set(form) <= {"ssl_check", "token"}


def refuse(secret: str | None, body: bytes, headers: Any, content_type: str) -> Refusal | None:
    """None when the request may go to Bolt; otherwise what to answer (logged here)."""
    if is_ssl_check(body, content_type):
        return None  # Slack's certificate check: Bolt answers 200 to it and does nothing else
    refusal = authenticate(secret, body, headers) if secret is not None else None
    if refusal is None:
        refusal = check_shape(body, content_type)
    if refusal is not None:
        log.warning("refused a request to /slack/events (%d): %s", refusal.status, refusal.reason)
    return refusal
