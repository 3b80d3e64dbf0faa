"""The floors of docs/ARCHITECTURE.md, checked in fresh interpreters so nothing else is loaded."""

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


def _product_layer(loaded: set[str], layer: str) -> set[str]:
    return {m for m in loaded if m == layer or m.startswith(f"{layer}.")}


def test_workflows_import_nothing_from_activities() -> None:
    # The errors both layers share live in contracts.errors, and the activities workflows call are
    # declared in contracts.activity_api: both contracts, so no exception is left.
    assert _product_layer(_modules_after_import("workflows"), "activities") == set()


def test_contracts_import_neither_layer() -> None:
    loaded = _modules_after_import("contracts.errors, contracts.names, contracts.models.host")
    assert _product_layer(loaded, "activities") | _product_layer(loaded, "workflows") == set()


def test_the_worker_runtime_loads_no_dev_stack_and_no_cli() -> None:
    """docs/ARCHITECTURE.md: a production worker carries no dev stack (the lifeline and port
    helpers it needs live in metalflow.runtime)."""
    loaded = _modules_after_import("metalflow.runtime.worker")
    assert _product_layer(loaded, "metalflow.devstack") | _product_layer(loaded, "metalflow.cli") == set()


def test_drivers_load_no_activity_or_workflow() -> None:
    loaded = _modules_after_import("drivers.redfish.power, drivers.kube, drivers.inventory, drivers.dpf")
    assert _product_layer(loaded, "activities") | _product_layer(loaded, "workflows") == set()
    assert _product_layer(loaded, "metalflow") == set()
