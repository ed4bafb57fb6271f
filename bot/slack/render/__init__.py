"""Everything the bot draws in Slack, one module per kind of message, over shared pieces.

Kinds: `card` (a call waiting for approval, and its outcome; `card_context` the call's why and
what), `question` (the agent's `ask_human`), `run_message` (the run's own message, its thread's
status line, a follow-up turn's progress), `output` (the answer in the run's thread), `notices`
(reminders, reviews, thread notes, a reply that may reject), `modals` (Reject, typed
confirmation, Edit), `details` (Show all, Show conversation), `grants` (Always approve's form,
the Home's grants) and `overview` (`/agent list`, `/agent status`, the App Home, the
requester's message).

Shared pieces beneath them: `base` (mrkdwn within Block Kit's limits, links, dates, people,
timers) and `controls` (the buttons a card and the App Home share). The ids of the controls are
in `bot.slack.blocks`, which the listeners import too. All untrusted text goes through
`bot.slack.text`.
"""
