"""The layout of workflows/ (docs/ARCHITECTURE.md section 3) holds: a reader tells a workflow from
a rule by its file name.

- Only a file named `workflow.py` defines a workflow (`@workflow.defn`), and each package under
  `workflows/` but `parts/` holds exactly one such file, registered in `workflows.ALL`.
- `workflows/parts/` defines none: its pieces are shared by several workflows.
- Each workflow's package is named in the import contracts of pyproject.toml, so its inner
  layering (runbook > parts > state > rules) is checked by `lint-imports`.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import workflows

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"


def _defines_a_workflow(path: Path) -> list[str]:
    """The classes of `path` decorated with `workflow.defn`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute) and target.attr == "defn":
                    found.append(node.name)
    return found


def _packages() -> list[str]:
    return sorted(p.name for p in WORKFLOWS.iterdir() if (p / "__init__.py").exists() and p.name != "parts")


def test_only_a_workflow_py_defines_a_workflow() -> None:
    wrong = {
        str(path.relative_to(ROOT)): classes
        for path in WORKFLOWS.rglob("*.py")
        if path.name != "workflow.py" and (classes := _defines_a_workflow(path))
    }
    assert wrong == {}, f"workflows defined outside a workflow.py: {wrong}"


def test_every_package_is_one_registered_workflow() -> None:
    registered = {cls.__module__ for cls in workflows.ALL}
    for package in _packages():
        runbook = WORKFLOWS / package / "workflow.py"
        assert runbook.exists(), f"workflows/{package}/ has no workflow.py"
        assert len(_defines_a_workflow(runbook)) == 1, f"workflows/{package}/workflow.py: one workflow each"
        assert f"workflows.{package}.workflow" in registered, f"workflows/{package} is not in workflows.ALL"
    assert len(registered) == len(_packages())


def test_every_package_is_under_the_inner_contracts() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    inner = next(c for c in contracts if c.get("containers"))
    packages = [f"workflows.{p}" for p in _packages()]
    assert sorted(inner["containers"]) == packages
    across = next(c for c in contracts if "workflows.parts" in c.get("layers", []))
    assert sorted(m.strip() for m in across["layers"][0].split("|")) == packages
