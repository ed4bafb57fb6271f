"""Fixtures of the tests that run the bot as real processes (the plugin gives the rest)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import POLICY


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackAPI]:
    """A running Slack stand-in for bot processes started by the test."""
    async with FakeSlackAPI() as api:
        yield api


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(POLICY)
    return path
