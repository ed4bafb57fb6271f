"""The audit trail and what is read from it: webhooks, attention, the weekly digest."""
