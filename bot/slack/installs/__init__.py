"""Where the bot is installed: OAuth distribution, what Slack says, each token."""
