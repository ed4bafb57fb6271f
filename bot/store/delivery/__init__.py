"""What Slack must be brought up to date with, who must be told, how fast to call Slack."""
