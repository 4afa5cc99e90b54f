"""What runs tells the apps above it, which it never imports: a decision on an approval has committed,
a run has finished (and its usage is in the rollup)."""
from django.dispatch import Signal

# Sent (robustly) once an approval's decision has committed, with approval_id and channel.
approval_decided = Signal()

# Sent (robustly) once a run's finish has committed, with run_id: its usage is counted by then.
run_finished = Signal()
