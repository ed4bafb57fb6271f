"""Which workspace the bot is working for right now, so that each Web API call carries that
workspace's token when the bot is installed in many (OAuth distribution).

Work for a workspace begins in few places, and each says so with `serving(...)`: a Slack
request (from its signed body, `bot.slack.app`), a run's messages (the projector, from the run's
record), a person's App Home, a private note, a directory lookup. Tasks started inside inherit
it (asyncio copies the context). A call made outside any, with many workspaces, has no token and
fails (`NotServing`): it can never go out with another workspace's token.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Team:
    """A workspace, as an installation is looked up: its team, its Grid org, and whether the
    installation is the whole org's (then the team does not matter)."""

    team_id: str
    enterprise_id: str = ""
    org_wide: bool = False


SERVING: ContextVar[Team | None] = ContextVar("serving", default=None)


@contextmanager
def serving(team_id: str, enterprise_id: str = "", org_wide: bool = False) -> Iterator[None]:
    """Inside: Web API calls use this workspace's token (see the module docstring)."""
    token = SERVING.set(Team(team_id, enterprise_id or "", org_wide))
    try:
        yield
    finally:
        SERVING.reset(token)
