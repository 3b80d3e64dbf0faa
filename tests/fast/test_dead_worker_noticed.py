"""A worker killed holding an activity is noticed within a heartbeat timeout, never only at the
call's start-to-close: the short calls (inventory, Kubernetes, lease and Temporal requests) had
none, so a SIGKILLed worker held each for 30 s (a read) to 5 min (a campaign's requests) before
another worker retried it (tests/test_bmc_lease_one_step.py's kill after the grant: a 31 s wait
for `lease_host_bmc`'s retry).

Two halves of one rule: every activity preset of `workflows/` carries a heartbeat timeout (a
call's, at most `CALL_HEARTBEAT`; a long wait's, at most a minute), and every activity of
`activities/` heartbeats while it runs, so a slow call on a live worker is not cut by it."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import workflows
from workflows import kernel
from workflows.firmware.options import power_wait_options
from workflows.parts.power_cycle_options import power_cycle_options
from workflows.removal.workflow import devices_wait_options

ROOT = Path(__file__).resolve().parents[2]
A_CALL = timedelta(minutes=5)  # a start-to-close up to this is a call, not a wait
LONGEST_HEARTBEAT = timedelta(seconds=60)  # a firmware stage's (its BMC's task polls)
# The site's one DPF watch beats idle once a third of its 150 s (1,728 Actions a day per site, a
# price chosen in workflows/site_watch/workflow.py), and a starting worker takes a dead one's
# watch over at once (its probe), not after the timeout.
OWN_TAKEOVER = {"workflows.site_watch.workflow.SITE_WATCH"}

# Activities that heartbeat from their own loop (each pass, each flush): a stalled loop must stop
# beating, so a background beat would hide it.
OWN_LOOP = {"watch_pcs", "watch_site_dpf", "await_operation_end"}
BEATS = ("beats_while_running", "heartbeating(", "HeartbeatGate", "activity.heartbeat")


def presets() -> Iterator[tuple[str, Any]]:
    """Every module-level activity config of `workflows/`, and the option functions' results."""
    for module_info in pkgutil.walk_packages(workflows.__path__, "workflows."):
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if isinstance(value, dict) and "start_to_close_timeout" in value:
                yield f"{module_info.name}.{name}", value
    yield "power_cycle_options(120)", power_cycle_options(120)
    yield "power_wait_options(600)", power_wait_options(600)
    yield "devices_wait_options(600)", devices_wait_options(600)


def test_every_activity_preset_notices_a_dead_worker_within_its_heartbeat_timeout() -> None:
    found = dict(presets())
    assert {"workflows.kernel.INVENTORY", "workflows.kernel.KUBE_READ", "workflows.kernel.KUBE_WRITE"} <= set(
        found
    )
    wrong = []
    for name, config in sorted(found.items()):
        beat = config.get("heartbeat_timeout")
        limit = kernel.CALL_HEARTBEAT if config["start_to_close_timeout"] <= A_CALL else LONGEST_HEARTBEAT
        if beat is None or (beat > limit and name not in OWN_TAKEOVER):
            wrong.append(f"{name}: heartbeat {beat}, start-to-close {config['start_to_close_timeout']}")
    assert wrong == [], "a dead worker is noticed only at the start-to-close:\n" + "\n".join(wrong)


def activity_definitions() -> Iterator[tuple[str, ast.AsyncFunctionDef]]:
    for path in sorted((ROOT / "activities").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AsyncFunctionDef) and any(
                "activity.defn" in ast.unparse(d) for d in node.decorator_list
            ):
                yield f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node


def test_every_activity_heartbeats_while_it_runs() -> None:
    found = list(activity_definitions())
    assert len(found) > 40, found  # the scan reads the activities
    silent = [
        where
        for where, node in found
        if node.name not in OWN_LOOP and not any(beat in ast.unparse(node) for beat in BEATS)
    ]
    assert silent == [], "a slow call on a live worker would time out on its heartbeat:\n" + "\n".join(silent)


def test_the_own_loop_activities_beat_in_their_loop() -> None:
    sources = {node.name: ast.unparse(node) for _, node in activity_definitions()}
    assert OWN_LOOP <= set(sources)
    assert "activity.heartbeat" in sources["await_operation_end"]
