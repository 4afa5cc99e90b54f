#!/usr/bin/env python3
"""mypy with a baseline that can only shrink.

    .venv/bin/python tools/mypy_baseline.py           # fail if a file has more errors than tools/mypy-baseline.json
    .venv/bin/python tools/mypy_baseline.py --update  # write the current counts (refused if a file grew,
                                                      # unless there is no baseline yet)

mypy's configuration is in pyproject.toml: strict on the pure runtime, the Django and DRF plugins on
the rest. The baseline counts the errors each file had when it was taken; a change may fix some (then
--update locks the smaller numbers in) but never add one. Standard library only, besides mypy itself.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tools" / "mypy-baseline.json"
ERROR = re.compile(r"^(?P<path>[^:\s]+\.pyi?):\d+: error: ")


def mypy_errors() -> tuple[Counter[str], list[str]]:
    """Errors per file, and mypy's error lines."""
    # The Django plugin imports the settings, which refuse to load without a SECRET_KEY.
    env = {**os.environ, "SECRET_KEY": os.environ.get("SECRET_KEY") or "mypy-only",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if ERROR.match(line)]
    if result.returncode not in (0, 1) or (result.returncode == 1 and not lines):
        sys.exit(f"mypy did not run:\n{result.stdout}{result.stderr}")
    return Counter(ERROR.match(line)["path"] for line in lines), lines


def main(argv: list[str]) -> int:
    update = "--update" in argv
    counts, lines = mypy_errors()
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    grown = {path: n for path, n in counts.items() if n > baseline.get(path, 0)} if BASELINE.exists() else {}
    for path, n in sorted(grown.items()):
        print(f"{path}: {n} mypy errors, the baseline allows {baseline.get(path, 0)}:")
        print("\n".join("  " + line for line in lines if line.startswith(path + ":")))
    if grown:
        print(f"mypy: errors grew in {len(grown)} file(s); fix them (the baseline only shrinks).")
        return 1
    fixed = sum(baseline.values()) - sum(counts.values())
    if update:
        BASELINE.write_text(json.dumps(dict(sorted(counts.items())), indent=1) + "\n")
        print(f"mypy: baseline written, {sum(counts.values())} errors in {len(counts)} files.")
    elif fixed:
        print(f"mypy: {fixed} fewer errors than the baseline; lock them in with: "
              ".venv/bin/python tools/mypy_baseline.py --update")
    print(f"mypy: {sum(counts.values())} errors in {len(counts)} files, none beyond the baseline.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
