"""Every workflow declared in `contracts.workflow_api` matches the class the worker registers: the
same name, the same input and result models, and the same updates, signals and queries with the
same names and types. A declaration that drifted would type-check in its caller (a parent
workflow, an activity, the CLI) and fail at run time."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest
from temporalio import workflow

import workflows
from contracts import workflow_api

REGISTERED = {str(workflow._Definition.must_from_class(cls).name): cls for cls in workflows.ALL}
DECLARED = [
    cls
    for _, cls in inspect.getmembers(workflow_api, inspect.isclass)
    if workflow._Definition.from_class(cls) is not None and cls.__module__ == workflow_api.__name__
]


def _types(fn: Any) -> tuple[list[Any], Any]:
    hints = typing.get_type_hints(fn)
    params = [hints[p] for p in inspect.signature(fn).parameters if p != "self"]
    return params, hints.get("return")


def _handlers(cls: type) -> dict[tuple[str, str], Any]:
    """(kind, message name) -> the method, for every update, signal and query of `cls`."""
    defn = workflow._Definition.must_from_class(cls)
    found: dict[tuple[str, str], Any] = {}
    for kind, handlers in (("update", defn.updates), ("signal", defn.signals), ("query", defn.queries)):
        for name, handler in handlers.items():
            if name is not None:
                found[(kind, name)] = handler.fn
    return found


def test_every_registered_workflow_is_declared() -> None:
    declared = {str(workflow._Definition.must_from_class(cls).name) for cls in DECLARED}
    assert declared == set(REGISTERED)


@pytest.mark.parametrize("declaration", DECLARED, ids=lambda c: c.__name__)
def test_a_declaration_matches_its_workflow(declaration: type) -> None:
    name = str(workflow._Definition.must_from_class(declaration).name)
    real = REGISTERED[name]
    declared_run = workflow._Definition.must_from_class(declaration).run_fn
    real_run = workflow._Definition.must_from_class(real).run_fn
    assert _types(declared_run) == _types(real_run), f"{name}.run"
    real_handlers = _handlers(real)
    for key, fn in _handlers(declaration).items():
        assert key in real_handlers, f"{name} has no {key[0]} {key[1]!r}"
        assert _types(fn) == _types(real_handlers[key]), f"{name}: {key[0]} {key[1]!r}"


async def test_a_declaration_is_never_run() -> None:
    """Calling one raises: it is a contract, not an implementation a worker could register."""
    with pytest.raises(NotImplementedError, match="declaration"):
        await workflow_api.HostRebootWorkflow().run(None)  # type: ignore[arg-type]
