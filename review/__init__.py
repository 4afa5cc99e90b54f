"""Review: what a person (or code, or the runtime) concluded about a run: scores, comments, incidents."""
