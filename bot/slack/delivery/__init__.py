"""Making Slack show what Redis holds: projector, streams, thread status, App Home."""
