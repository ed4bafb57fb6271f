"""A paused run's checkpoint as Redis keeps it: one string (layout 2), or a hash (layout 1,
still read so runs paused before the upgrade resume)."""

from __future__ import annotations

from bot.store.records import Snapshot
from bot.store.scripts import text

# A snapshot string: SNAPSHOT_TAG, the SDK version, NUL, the agent fingerprint, NUL, the state.
SNAPSHOT_TAG = b"S2\x00"


def encode_snapshot(snapshot: Snapshot) -> bytes:
    return b"\x00".join(
        (
            SNAPSHOT_TAG[:-1],
            snapshot.sdk_version.encode(),
            snapshot.fingerprint.encode(),
            snapshot.state,
        )
    )


def decode_snapshot(blob: bytes) -> Snapshot:
    _, sdk_version, fingerprint, state = blob.split(b"\x00", 3)
    return Snapshot(state=state, sdk_version=text(sdk_version), fingerprint=text(fingerprint))


def stored_snapshot(blob: bytes | None, raw: dict[bytes, bytes]) -> Snapshot | None:
    """The snapshot from what a GET of the state string and an HGETALL of the layout 1 hash
    returned (the string wins), or None when neither holds one."""
    if blob is not None:
        return decode_snapshot(blob)
    if not raw or b"state" not in raw:
        return None
    return Snapshot(
        state=raw[b"state"],  # type: ignore[arg-type]
        sdk_version=text(raw.get(b"sdk_version", b"")),
        fingerprint=text(raw.get(b"fingerprint", b"")),
    )
