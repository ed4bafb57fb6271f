"""A tool rule's `during:`: the hours and days, on a named clock, in which it applies.

    during: {hours: "19:00-07:00", days: [mon, tue, wed, thu, fri], timezone: Europe/Berlin}

It is judged at the moment the call was requested (its pause), never at the moment of a click
or a reminder: a call routed to the night's on-call at 06:55 stays theirs at 07:05, and every
re-judging of it (a decision, a timer, a changed policy) gives the same answer. A window that
wraps past midnight belongs to the day it starts on: `fri` with `19:00-07:00` is Friday evening
to Saturday 07:00. Times are local to `timezone` (an IANA name; UTC by default), so daylight
saving time moves with it. A call whose request time is unknown is outside every window (the
rule does not apply: fail closed, like a condition that cannot be read).
"""

from __future__ import annotations

import re
from datetime import datetime
from functools import cached_property
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
Day = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_HOURS = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-4]):([0-5][0-9])\Z")


def _minutes(hours: str) -> tuple[int, int]:
    """`"HH:MM-HH:MM"` as minutes of the day (the end may be 24:00)."""
    found = _HOURS.match(hours)
    if found is None:
        raise ValueError(f'{hours!r} is not HH:MM-HH:MM (e.g. "19:00-07:00")')
    h1, m1, h2, m2 = (int(g) for g in found.groups())
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if end > 24 * 60:
        raise ValueError(f"{hours!r} ends after 24:00")
    if start == end % (24 * 60):
        raise ValueError(f"{hours!r} starts where it ends; leave `hours` out for the whole day")
    return start, end


class During(BaseModel):
    """The window of a rule: `hours` (local, may wrap past midnight), `days`, `timezone`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hours: str | None = None
    days: list[Day] | None = Field(default=None, min_length=1)
    timezone: str = "UTC"

    @field_validator("hours")
    @classmethod
    def _hours(cls, value: str | None) -> str | None:
        if value is not None:
            _minutes(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"{value!r} is not a time zone this machine knows (an IANA name such as "
                "Europe/Berlin or America/New_York)"
            ) from None
        return value

    @model_validator(mode="after")
    def _something(self) -> During:
        if self.hours is None and self.days is None:
            raise ValueError("during: give `hours`, `days` or both")
        return self

    @cached_property
    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def holds(self, at: Any) -> bool:
        """Whether the instant `at` (Unix seconds) is inside the window."""
        if isinstance(at, bool) or not isinstance(at, int | float) or at <= 0:
            return False
        local = datetime.fromtimestamp(at, self._zone)
        minute, day = local.hour * 60 + local.minute, local.weekday()
        if self.hours is not None:
            start, end = _minutes(self.hours)
            if start < end:
                if not start <= minute < end:
                    return False
            elif minute < end:
                day = (day - 1) % 7  # the part after midnight belongs to the day before
            elif minute < start:
                return False
        return self.days is None or DAYS[day] in self.days
