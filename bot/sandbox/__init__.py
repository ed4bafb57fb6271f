"""The sandbox: try the bot in a browser, with no Slack app and no model key (see `server`)."""
