"""The chaos suite runs only when asked for (`-m chaos`, or CHAOS=1): it needs root to create
a PostgreSQL cluster and takes minutes."""
import os

import pytest


def pytest_collection_modifyitems(config, items):
    if "chaos" in (config.getoption("-m") or "") or os.environ.get("CHAOS") == "1":
        return
    skip = pytest.mark.skip(reason="the chaos suite runs with -m chaos (or CHAOS=1)")
    for item in items:
        if "chaos" in item.keywords:
            item.add_marker(skip)
