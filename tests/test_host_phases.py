"""`host list --phase` takes the phases hosts can be in (metalflow/cli/host_phases.py), and only them.

The list is read from the requests' table (`contracts.host_requests`): each row names the phases
its child workflow shows. Here the rows are held to the workflows that own the words, each
child's package found from its row: every phase its code enters (read from its source, the way a
reviewer would) and every phase its recorded histories show must be its row's, and every word of
a row must be entered by its child; a refused phase is refused before anything connects. No
server: under a second.
"""

from __future__ import annotations

import ast
import base64
import importlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_metalflow
from temporalio import workflow

import workflows
from contracts.host_requests import ENTITY_REQUESTS, EntityRequest
from metalflow.cli.host_phases import EARLY_ENDINGS, ENDINGS, ENTITY_PHASES, KNOWN_PHASES, OPERATION_PHASES

ROOT = Path(__file__).resolve().parent.parent
# How each workflow shows a phase (the phase is the first argument, or the second of
# `_read_versions`; `finish` is the kernel's planned end).
PHASE_CALLS = {
    "enter": 0,
    "enter_phase": 0,
    "finish": 0,
    "_wait_for_dpf": 0,
    "await_decision": 0,
    "_read_versions": 1,
}


def _package_of(workflow_type: str) -> str:
    """The package under workflows/ of a registered workflow type (e.g. `host_reset`)."""
    (cls,) = [c for c in workflows.ALL if workflow._Definition.must_from_class(c).name == workflow_type]
    return cls.__module__.split(".")[1]


# The workflows of an entity's operations, read from the requests' table: a new row is held here
# without an edit. Each package, with the rows whose child it is.
OPERATIONS: dict[str, list[EntityRequest[Any]]] = {}
for _row in ENTITY_REQUESTS:
    OPERATIONS.setdefault(_package_of(_row.child), []).append(_row)
OPERATION_TYPES = {row.child for row in ENTITY_REQUESTS}


def _sources(name: str) -> list[tuple[str, Path]]:
    """The modules of `workflows.<name>` (a workflow's package: its workflow, state and rules; or
    one module such as the kernel), each as (dotted name, file)."""
    package = ROOT / "workflows" / name
    if not package.is_dir():
        return [(f"workflows.{name}", ROOT / "workflows" / f"{name}.py")]
    return [(f"workflows.{name}.{path.stem}", path) for path in sorted(package.glob("*.py"))]


def _entered(name: str) -> tuple[set[str], set[str]]:
    """The phases `workflows.<name>` enters: literals and module constants, and the variables it
    passes instead (resolved by the tests below)."""
    words, variables = set(), set()
    for dotted, path in _sources(name):
        module = importlib.import_module(dotted)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
            position = PHASE_CALLS.get(called)
            if position is None or len(node.args) <= position:
                continue
            argument = node.args[position]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                words.add(argument.value)
            elif isinstance(argument, ast.Name) and isinstance(getattr(module, argument.id, None), str):
                words.add(getattr(module, argument.id))
            elif isinstance(argument, ast.Name):
                variables.add(argument.id)
            else:
                where = path.relative_to(ROOT)
                raise AssertionError(f"{where}:{node.lineno}: a phase this test cannot read")
    return words, variables


def _kernel_endings() -> set[str]:
    """The final phases `kernel.ending` gives a run that ends early, read from its source."""
    ending = ast.parse((ROOT / "workflows" / "kernel.py").read_text())
    (function,) = [n for n in ast.walk(ending) if isinstance(n, ast.FunctionDef) and n.name == "ending"]
    return {
        n.value.elts[0].value
        for n in ast.walk(function)
        if isinstance(n, ast.Return)
        and isinstance(n.value, ast.Tuple)
        and isinstance(n.value.elts[0], ast.Constant)
    }


def test_every_phase_an_operation_enters_is_its_rows() -> None:
    variables: dict[str, set[str]] = {}
    kernel_words, _ = _entered("kernel")  # the kernel's own phases (none but its parameters)
    endings = _kernel_endings()
    assert endings == set(EARLY_ENDINGS)
    for package, rows in OPERATIONS.items():
        entered, variables[package] = _entered(package)
        if package == "removal":  # its delete verb, a variable
            removal = (ROOT / "workflows" / "removal" / "workflow.py").read_text()
            assert 'verb = "force-deleting" if force else "deleting"' in removal
            entered |= {"force-deleting", "deleting"}
        declared = {phase for row in rows for phase in (*row.phases, row.ended)}
        assert entered - declared == set(), f"phases of workflows/{package} missing from its row"
        assert declared - entered == set(), f"phases of the row no code of workflows/{package} enters"
        assert {row.ended for row in rows} <= entered
    # The variables: the wrappers' own parameter (`phase`) and removal's delete verb; anything new
    # must be read here too.
    assert {package: names for package, names in variables.items() if names} == {
        "host_operation": {"phase"},
        "firmware": {"phase"},
        "removal": {"verb"},
    }
    every = (
        kernel_words
        | endings
        | {p for rows in OPERATIONS.values() for r in rows for p in (*r.phases, r.ended)}
    )
    assert every == OPERATION_PHASES
    assert ENDINGS <= OPERATION_PHASES


def test_the_entity_phases_are_the_entitys() -> None:
    from workflows.host.state import AWAITING_APPROVAL, IDLE

    source = (ROOT / "workflows" / "host" / "state.py").read_text()
    assert 'return f"running {self.current.record.operation}"' in source  # one per operation
    assert {IDLE, AWAITING_APPROVAL} | {
        phase for phase in ENTITY_PHASES if phase.startswith("running ")
    } == ENTITY_PHASES
    started = {kind.operation for kind in ENTITY_REQUESTS}  # each row's handler starts its operation
    for phase in ENTITY_PHASES - {IDLE, AWAITING_APPROVAL}:
        operation = phase.removeprefix("running ")
        assert operation in started, f"the entity starts no {operation}"


def test_every_phase_in_the_recorded_histories_is_known() -> None:
    seen: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests" / "histories").glob("*.json")):
        events = json.loads(path.read_text())["events"]
        kind = events[0]["workflowExecutionStartedEventAttributes"]["workflowType"]["name"]
        for event in events:
            upserted = event.get("upsertWorkflowSearchAttributesEventAttributes")
            phase = upserted and upserted["searchAttributes"]["indexedFields"].get("Phase")
            if phase:
                seen.setdefault(kind, set()).add(json.loads(base64.b64decode(phase["data"])))
    assert seen["HostWorkflow"] <= ENTITY_PHASES, seen["HostWorkflow"]
    for kind in OPERATION_TYPES:
        rows = [row for row in ENTITY_REQUESTS if row.child == kind]
        declared = EARLY_ENDINGS | {phase for row in rows for phase in (*row.phases, row.ended)}
        assert seen.get(kind, set()) - declared == set(), f"{kind}'s histories show phases its row lacks"
    shown = set().union(*(seen.get(kind, set()) for kind in OPERATION_TYPES))
    assert {"rebooting-host", "waiting-until-gone", "powering-host-off"} <= shown  # the histories were read


@pytest.fixture
def silent_temporal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[socket.socket]:
    """A TCP listener standing in for Temporal's address: a command that connects shows up in
    its backlog. The state dir is empty, so no client config elsewhere is read."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    for variable in ("TEMPORAL_CONFIG_FILE", "TEMPORAL_PROFILE", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setenv("METALFLOW_STATE_DIR", str(tmp_path))
    yield listener
    listener.close()


def _connected(listener: socket.socket) -> bool:
    try:
        listener.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.mark.parametrize("phase", ["Idle", "running", "rebooting", "idle;rm", "monitoring\x1b[2J"])
def test_an_unknown_phase_is_refused_with_the_known_ones_before_connecting(
    silent_temporal: socket.socket, phase: str
) -> None:
    refused = run_metalflow("host", "list", "--phase", phase)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "unknown phase '" in refused.stderr and "\x1b" not in refused.stderr
    # The known phases are listed, whatever a new request adds between them.
    assert "idle, running " in refused.stderr and "running firmware" in refused.stderr
    assert "rebooting-host" in refused.stderr
    assert not _connected(silent_temporal)


def test_every_known_phase_is_accepted() -> None:
    from metalflow.cli import host_list

    assert all(host_list._phase(phase) == phase for phase in KNOWN_PHASES)


def test_a_known_phase_does_connect_to_the_address(silent_temporal: socket.socket) -> None:
    """The control of the test above: the same command with a phase that exists reaches the
    listener (then fails once the listener hangs up), so "no connection" there means something.
    Its own process: a Temporal command ends its process when done."""
    command = subprocess.Popen(
        [str(Path(sys.executable).parent / "metalflow"), "host", "list", "--phase", "idle"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for _ in range(600):
            if _connected(silent_temporal):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("host list --phase idle never connected to TEMPORAL_ADDRESS")
        silent_temporal.close()
        _, stderr = command.communicate(timeout=120)
    finally:
        command.kill()
    assert command.returncode == 3 and "unknown phase" not in stderr, stderr  # Temporal unreachable
