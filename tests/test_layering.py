"""The layering of ARCHITECTURE.md, checked in fresh interpreters so nothing else is loaded."""

from __future__ import annotations

import json
import subprocess
import sys


def _modules_after_import(module: str) -> set[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout))


def test_workflows_load_no_io_clients() -> None:
    loaded = _modules_after_import("workflows")
    assert {"kubernetes", "httpx", "aiohttp"}.isdisjoint(loaded)


def test_simulators_import_nothing_of_the_product() -> None:
    loaded = _modules_after_import("simulators.app")
    assert {"metalflow", "activities", "workflows"}.isdisjoint(loaded)
