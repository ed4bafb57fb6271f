"""The digest that binds a decision to the exact call a reviewer was shown.

It covers the agent, the tool, the canonical JSON arguments, the run id, the call id and the
policy version in force when the call was posted. The approval message shows a short form; the
audit trail records the whole.
"""

from __future__ import annotations

import hashlib
import json

SHORT = 10


def canonical_arguments(arguments: str) -> str:
    """JSON arguments with sorted keys and no spacing; anything else as it is."""
    try:
        return json.dumps(
            json.loads(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    except (ValueError, TypeError):
        return arguments


def call_digest(
    *, agent: str, tool: str, arguments: str, run_id: str, call_id: str, policy_version: str
) -> str:
    payload = json.dumps(
        [agent, tool, canonical_arguments(arguments), run_id, call_id, policy_version],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def short(digest: str) -> str:
    return digest[:SHORT]
