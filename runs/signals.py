"""What runs tells the apps above it, which it never imports: a decision on an approval has committed."""
from django.dispatch import Signal

# Sent (robustly) once an approval's decision has committed, with approval_id and channel.
approval_decided = Signal()
