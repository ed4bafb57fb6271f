"""Slack's listeners, one file per kind of request (commands, actions, views, events).

Each module has `register(app, deps)`: `bot.slack.app.build_app` creates the app and calls them
with one `ListenerDeps`, the collaborators every listener receives (`deps.py`)."""
