"""Every phase's details of the workflows whose status prints them after "waiting for" (host
operations, firmware, removal: `waiting_for=self.details`) read as what it waits for, a noun
phrase, never a verb: issue 38 read "waiting for making sure the site's DPF objects ... exist"
and "waiting for deleting host-001-dpu-0 ...". Read from the source, so a new phase is covered."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "workflows"
# The runbooks whose `status` says `waiting_for=self.details`, and the parts that enter their phases.
READ_AFTER_WAITING_FOR = (
    "host_operation/workflow.py",
    "host_operation/reboot_round.py",
    "firmware/workflow.py",
    "removal/workflow.py",
)
NOT_VERBS = frozenset({"nothing", "something", "everything"})


def details_texts(path: Path) -> list[tuple[int, str]]:
    """The details given to `enter(phase, details)` and `show(details)` that are written out (a
    string, or an f-string with its placeholders as `{}`), by line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        index = {"enter": 1, "show": 0}.get(node.func.attr)
        if index is None or len(node.args) <= index:
            continue
        arg = node.args[index]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.append((node.lineno, arg.value))
        elif isinstance(arg, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values)
            found.append((node.lineno, str(text)))
    return found


def test_every_phase_wait_reads_after_waiting_for() -> None:
    verbs = []
    for name in READ_AFTER_WAITING_FOR:
        texts = details_texts(ROOT / name)
        assert texts, f"no phase details found in {name}: the test reads nothing"
        for line, text in texts:
            first = text.split(" ", 1)[0].lower()
            if first.endswith("ing") and first not in NOT_VERBS:
                verbs.append(f"{name}:{line}: waiting for {text}")
    assert verbs == []
