"""The root of the bot's own exceptions, so a caller can tell the bot's refusals and failures
from anything a library raised (`except ApprovalBotError`)."""

from __future__ import annotations


class ApprovalBotError(Exception):
    """Something the bot itself raised: a refused transition, a bad configuration, a service
    that cannot be reached, a control-flow signal of the engine."""
