"""Learning from the audit trail, offline: reports, backtests of a candidate policy, suggested
rules. Nothing here decides a call or runs a tool: it reads what the trail kept and asks the
policy the same question the bot asks (`Policy.rule_for`)."""
