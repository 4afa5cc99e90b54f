"""The worker's side of a run: the engine's slices, leases, how a pass is written, sweeps, the runtime's ports."""
