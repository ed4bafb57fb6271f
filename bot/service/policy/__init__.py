"""The policy: its file, its rules and conditions, and the rule it gives a stored call."""
