"""Where the bot is installed: installations, OAuth states, forgetting a workspace."""
