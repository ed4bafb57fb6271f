"""The digest that binds a decision to the exact call a reviewer was shown.

It covers the agent, the tool, the canonical JSON arguments as shown (and, for calls posted since
display copies may be stored cut, the SHA-256 of the whole arguments), the run id, the call id
and the policy version in force when the call was posted. The approval message shows a short
form; the audit trail records the whole.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from bot.engine.approvals import canonical_arguments

if TYPE_CHECKING:
    from bot.store.records import CallRecord

SHORT = 10


def call_digest(
    *,
    agent: str,
    tool: str,
    arguments: str,
    run_id: str,
    call_id: str,
    policy_version: str,
    arguments_sha: str = "",
    edited_sha: str = "",
) -> str:
    """`arguments` is the text the reviewer is shown (as stored); with `arguments_sha` (calls
    stored with a display copy that may be cut) the digest also covers the hash of the whole
    arguments, which the resume checks against the call in the snapshot."""
    bound = [canonical_arguments(arguments)]
    if arguments_sha:
        bound.append("sha256:" + arguments_sha)
    if edited_sha:  # an edited call: a decision binds the reviewer's arguments too
        bound.append("edited:" + edited_sha)
    payload = json.dumps(
        [agent, tool, *bound, run_id, call_id, policy_version],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def short(digest: str) -> str:
    return digest[:SHORT]


def digest_of(call: CallRecord) -> str:
    """The digest of a stored call, as it is now: a decision applies only while it equals the
    digest recorded when the call was posted (`call.digest`)."""
    return call_digest(
        agent=call.agent,
        tool=call.tool,
        arguments=call.arguments,
        arguments_sha=call.arguments_sha,
        edited_sha=call.edited_sha,
        run_id=call.run_id,
        call_id=call.call_id,
        policy_version=call.policy_version,
    )
