"""The runtime's tests need no Django: run them with `pytest -p no:django tests/runtime`.

Only makes the repository root importable, so `runtime` resolves however
pytest was started.
"""
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
