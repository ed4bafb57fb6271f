"""A run's long texts (its task, its calls' arguments), kept once each in a string key of their
own (layout 3, issue #17), so that the run and call hashes hold only short values.

Redis keeps a hash in its compact listpack encoding only while every value is at most
`hash-max-listpack-value` bytes (64 by default); one longer value turns the whole hash into a
hashtable, several times larger. A text within `HASH_VALUE_LIMIT` stays in its hash; a longer
one goes to its own key (`keys.task_key`, `keys.arguments_key`), compressed when that is
smaller, and is read in the same pipeline (or script) as its hash: no extra round trip.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

from bot.store.records import CallRecord, RunRecord
from bot.store.scripts import text

# Redis's default `hash-max-listpack-value`: the longest value a compact hash may hold.
HASH_VALUE_LIMIT = 64
# A stored text that starts with this is raw deflate (0xff never starts UTF-8 text).
_DEFLATED = b"\xff"


def fits_hash(value: str) -> bool:
    """Whether `value` may stay in its hash without changing the hash's encoding."""
    return len(value) * 4 <= HASH_VALUE_LIMIT or len(encoded(value)) <= HASH_VALUE_LIMIT


def encoded(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def pack_text(value: str) -> bytes:
    """A long text as its key stores it: raw deflate when that is smaller, else UTF-8."""
    raw = encoded(value)
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = _DEFLATED + packer.compress(raw) + packer.flush()
    return packed if len(packed) < len(raw) else raw


def unpack_text(blob: bytes) -> str:
    """A text as `pack_text` stored it (or as layout 2 stored a task: plain UTF-8)."""
    if blob.startswith(_DEFLATED):
        unpacker = zlib.decompressobj(-15)
        return text(unpacker.decompress(blob[1:]) + unpacker.flush())
    return text(blob)


def run_from(raw: Mapping[Any, Any], task: bytes | None, run_id: str) -> RunRecord | None:
    """A run from its hash and its task key as one pipeline read them (None: no such run). The
    key, when it exists, holds the whole task (layout 2 kept it only until the first pause,
    and a cut copy in the hash)."""
    if not raw:
        return None
    run = RunRecord.from_hash(raw, run_id)
    if task is not None:
        run.task = unpack_text(task)
    return run


def call_from(
    raw: Mapping[Any, Any], arguments: bytes | None, approval_id: str
) -> CallRecord | None:
    """A call from its hash and its arguments key as one pipeline read them (None: no such
    call). Layouts 1 and 2 kept the arguments in the hash (and have no such key)."""
    if not raw:
        return None
    call = CallRecord.from_hash(raw, approval_id)
    if arguments is not None:
        call.arguments = unpack_text(arguments)
    return call


def split_run(run: RunRecord) -> tuple[dict[str, str], bytes | None]:
    """A run's hash fields, and its task key's value when the task is too long for the hash."""
    return _split(run.to_hash(), "task", run.task)


def split_call(call: CallRecord) -> tuple[dict[str, str], bytes | None]:
    """A call's hash fields, and its arguments key's value when they are too long for it."""
    return _split(call.to_hash(), "arguments", call.arguments)


def _split(stored: dict[str, str], name: str, value: str) -> tuple[dict[str, str], bytes | None]:
    if fits_hash(value):
        return stored, None
    stored.pop(name, None)
    return stored, pack_text(value)
