"""Rules of the house that no linter holds by itself.

- **No product file over 550 lines** (contracts, drivers, activities, workflows, metalflow): a
  file that grows past that is two ideas (issue 34; split it by role).
- **A state or rule module is pure** (docs/ARCHITECTURE.md section 3): the modules named in the
  pyproject contract "A state or rule module imports no Temporal" import no Temporal, no kernel,
  no part but the DPF barrier rules, no client of ours, no clock, no randomness and no I/O, and
  call no clock. `lint-imports` checks their direct imports of `temporalio` only: it must allow
  indirect ones, since the contracts they read define Temporal's error types; this test closes
  what that leaves open (a state that reached Temporal through the kernel, `importlib`, or read
  `datetime.now()`).
- **A test sends an update as the product does** (`contracts.with_start.execute_update`): Temporal
  drops an update whose workflow task failed (a task timed out on a loaded worker, the deadlock
  detector) with FAILED_PRECONDITION, and the product sends it again; a test calling
  `handle.execute_update` itself failed CI on that (test_host_operation_v26, the abort of a parked
  reprovision), a failure no user of the CLI would see.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("contracts", "drivers", "activities", "workflows", "metalflow")
MAX_LINES = 550

IMPURE_MODULES = (
    "temporalio", "workflows.kernel", "workflows.parts", "contracts.host_entity", "contracts.activity_api",
    "contracts.workflow_api", "contracts.converter", "drivers", "activities", "metalflow", "simulators",
    "time", "random", "secrets", "uuid", "socket", "os", "subprocess", "asyncio", "threading", "importlib",
    "httpx", "kubernetes", "aiohttp",
)  # fmt: skip
ALLOWED_PARTS = (
    "workflows.parts.dpf_barrier",
    "workflows.parts.host_power",
    "workflows.parts.boot_generation",
)  # pure themselves
IMPURE_CALLS = {"now", "utcnow", "today", "monotonic", "perf_counter", "uuid4", "__import__", "urandom"}


def test_no_product_file_is_over_550_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for folder in PRODUCT
        for path in (ROOT / folder).rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these by role (runbook, state, parts): {long}"


def _pure_modules() -> list[Path]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    pure = next(c for c in contracts if c["name"].startswith("A state or rule module"))
    found = []
    for path in sorted((ROOT / "workflows").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if any(fnmatch.fnmatchcase(module, pattern) for pattern in pure["source_modules"]):
            found.append(path)
    return found


def _impurities(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from workflows.parts import dpf_barrier` is judged by what it takes, not its package.
            taken = [f"{node.module}.{alias.name}" for alias in node.names]
            whole = [] if any(p.startswith(f"{node.module}.") for p in ALLOWED_PARTS) else [node.module]
            names = [*whole, *taken]
        for name in names:
            if name.endswith(".workflow") or name.startswith("workflows.") and ".workflow." in name:
                found.append(f"line {node.lineno}: imports a runbook ({name})")
            elif any(name == m or name.startswith(f"{m}.") for m in IMPURE_MODULES) and not any(
                name == p or name.startswith(f"{p}.") for p in ALLOWED_PARTS
            ):
                found.append(f"line {node.lineno}: imports {name}")
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in IMPURE_CALLS:
                found.append(f"line {node.lineno}: calls {called}()")
    return found


def test_state_and_rule_modules_are_pure() -> None:
    modules = _pure_modules()
    assert len(modules) >= 8, "the pyproject contract names the state and rule modules"
    impure = {str(p.relative_to(ROOT)): found for p in modules if (found := _impurities(p))}
    assert impure == {}, f"a state or rule module reaches past pure code: {impure}"


def test_tests_send_updates_through_the_products_retry() -> None:
    raw = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"[\w)]\.execute_update\(", line)
    ]
    assert not raw, f"send updates with contracts.with_start.execute_update: {raw}"
