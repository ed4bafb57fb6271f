"""Slack's Web API: the one client, its metering, the workspace served, private answers."""
