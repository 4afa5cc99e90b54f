"""A run's trace: the timeline, the JSON download, what an incident reviewer reads, exports, reconciliation."""
