"""People and channels from Slack (the service's directories), cached."""
