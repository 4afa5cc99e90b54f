"""Approvals in Slack: interactive request messages, signed interactions, linked accounts.

api (Web API calls through the egress guard), blocks (Block Kit of a request), signing (Slack's
v0 signatures and replays), interactions (a click decides),
linking (profile page codes and `/agentops link`), messages (updating what a message shows).
The slackapp:// channel's sender is notifications.senders.slack_app.
"""
