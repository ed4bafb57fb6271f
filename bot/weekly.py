"""A time of the week, in UTC, as a setting says it (`APPROVAL_BOT_REVIEW_DIGEST`): when
something weekly is due."""

from __future__ import annotations

from dataclasses import dataclass

DAY = 86400.0
WEEK = 7 * DAY
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
FULL = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NAMES = {name: n for n in range(7) for name in (DAYS[n], FULL[n])}
WEEKLY = "mon 09:00"  # what `weekly` means


@dataclass(frozen=True)
class Weekly:
    """A time of the week, in UTC."""

    weekday: int  # 0: Monday
    minute: int  # of the day

    def last(self, now: float) -> float:
        """The latest time of this schedule at or before `now` (Unix seconds)."""
        today = now // DAY * DAY
        weekday = (int(now // DAY) + 3) % 7  # 1 January 1970 was a Thursday
        at = today - ((weekday - self.weekday) % 7) * DAY + self.minute * 60
        return at if at <= now else at - WEEK

    def __str__(self) -> str:
        return f"{DAYS[self.weekday]} {self.minute // 60:02d}:{self.minute % 60:02d}"


def parse_schedule(text: str) -> Weekly | None:
    """`off` (None), `weekly` (Monday 09:00 UTC) or `DAY HH:MM` in UTC (`fri 16:30`);
    ValueError says what is accepted."""
    said = " ".join(text.strip().lower().split())
    if said in ("", "off"):
        return None
    day, _, hour = (WEEKLY if said == "weekly" else said).partition(" ")
    hours, _, minutes = hour.partition(":")
    if not (
        day in NAMES
        and hours.isdigit()
        and int(hours) < 24
        and len(minutes) == 2
        and minutes.isdigit()
        and int(minutes) < 60
    ):
        raise ValueError(
            "use off, weekly (Monday 09:00 UTC) or a day and a UTC time, e.g. fri 16:30"
        )
    return Weekly(NAMES[day], int(hours) * 60 + int(minutes))
