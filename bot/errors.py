"""The root of the bot's own exceptions, so a caller can tell the bot's refusals and failures
from anything a library raised (`except ApprovalBotError`)."""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)


class ApprovalBotError(Exception):
    """Something the bot itself raised: a refused transition, a bad configuration, a service
    that cannot be reached, a control-flow signal of the engine."""


def cause_of(exc: BaseException, kind: type[E] | tuple[type[E], ...]) -> E | None:
    """The exception of type `kind` in `exc` or in what it was raised from (`__cause__`, else
    `__context__`), wherever a library wrapped it; None when there is none."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
