"""The policy in force, reloaded from its file when the file changes (no restart needed).

An invalid file on reload keeps the last good policy and says so in the logs. The version is a
digest of the file's text; every pending call records the version it was posted under.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from bot.service.policy.rules import Policy, PolicyError, parse_policy

log = logging.getLogger(__name__)

CHECK_EVERY_SECONDS = 1.0


def policy_version(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class VersionedPolicy:
    policy: Policy
    version: str


class PolicySource:
    """Gives the current policy; looks at the file at most every `check_every` seconds."""

    def __init__(
        self,
        current: VersionedPolicy,
        path: Path | None = None,
        *,
        check_every: float = CHECK_EVERY_SECONDS,
    ) -> None:
        self._current = current
        self.path = path
        self.check_every = check_every  # a setting (`policy_check_seconds`): tests make it short
        self._checked = time.monotonic()
        self._stamp = self._file_stamp()

    @classmethod
    def from_text(cls, text: str) -> PolicySource:
        return cls(VersionedPolicy(parse_policy(text), policy_version(text)))

    @classmethod
    def from_file(cls, path: Path, *, check_every: float = CHECK_EVERY_SECONDS) -> PolicySource:
        from bot.service.policy.rules import load_policy

        policy = load_policy(path)
        text = path.read_text(encoding="utf-8")
        return cls(VersionedPolicy(policy, policy_version(text)), path, check_every=check_every)

    def _file_stamp(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    def current(self) -> VersionedPolicy:
        if self.path is not None and time.monotonic() - self._checked >= self.check_every:
            self.reload()
        return self._current

    def reload(self) -> bool:
        """Re-read the file if it changed; returns True when a new policy took effect."""
        self._checked = time.monotonic()
        stamp = self._file_stamp()
        if self.path is None or stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            text = self.path.read_text(encoding="utf-8")
            policy = parse_policy(text, source=str(self.path))
        except (OSError, PolicyError) as exc:
            problems = exc.problems if isinstance(exc, PolicyError) else [str(exc)]
            log.error(
                "policy file %s is invalid; keeping the last good policy (version %s): %s",
                self.path,
                self._current.version,
                "; ".join(problems),
            )
            return False
        version = policy_version(text)
        if version == self._current.version:
            return False
        log.info("policy reloaded from %s: version %s", self.path, version)
        self._current = VersionedPolicy(policy, version)
        return True
