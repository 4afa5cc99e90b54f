"""Does planning earn its place? Planning vs direct execution on the same tasks.

suites (bundled task files, validated), runner (both modes through the production
controller, persisted as real runs), verdicts (pure), selectors/services (reads,
writes), export (JSON/CSV), charts (server-side SVG).
"""
