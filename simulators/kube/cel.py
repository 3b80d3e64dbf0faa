"""The CRDs' `x-kubernetes-validations` CEL rules, evaluated on every write as a real API server
does (after schema validation and defaulting).

Each rule is evaluated with `self` bound to the value at its schema node (every item of an array,
every value of a map). Transition rules (those naming `oldSelf`) run only on updates, where the
old object has a value at the same path (list items correlate by index only for
`x-kubernetes-list-type: map`; other lists are not correlated, as on a real server), unless the
rule sets `optionalOldSelf: true`, when they always run with `oldSelf` an optional value. A
failed rule, or one that cannot be evaluated (a missing field not guarded by `has()`), rejects the
write with 422 naming the field path and the rule's message (`reason` and `fieldPath` honoured).

Library: `common-expression-language` (Python bindings of the Rust cel implementation): it
compiles and evaluates all 24 rules of the vendored DPF and Grove CRDs, including optionals
(`oldSelf.hasValue()`), `exists_one`, `matches` and string extensions, is actively released and
much more used than the pure-Python `cel-python`, which has no optional values.

Cost: rules are compiled once per rule text; a write evaluates only the rules on the paths its
object has (a DPU: eight rules, tens of microseconds each).
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

from simulators.kube.store import Object, ResourceType, invalid_error

# `import cel` imports the package's interactive CLI too (typer, prompt_toolkit, rich, pygments):
# a third of a simulated site's start (0.26 of 0.8 s of CPU, measured 2026-11-29), paid by every
# site a test or `metalflow dev` starts, for a REPL nobody runs here. A placeholder `cel.cli`
# while the package imports keeps the bindings (`cel.compile`, `cel.OptionalValue`) and skips it;
# it is removed again, so a later `import cel.cli` gets the real one.
_NO_REPL = types.ModuleType("cel.cli")
if "cel" not in sys.modules:
    sys.modules["cel.cli"] = _NO_REPL
try:
    import cel  # noqa: E402
finally:
    if sys.modules.get("cel.cli") is _NO_REPL:
        del sys.modules["cel.cli"]

_REASONS = {
    "FieldValueRequired": "FieldValueRequired",
    "FieldValueDuplicate": "FieldValueDuplicate",
    "FieldValueForbidden": "FieldValueForbidden",
}
_MISSING = object()
_Cause = tuple[str, str, str]  # field, reason, message


@dataclass(frozen=True)
class _Rule:
    rule: str
    message: str
    reason: str
    field_path: str
    optional_old_self: bool

    @property
    def transition(self) -> bool:
        return "oldSelf" in self.rule


class RuleValidator:
    """Evaluates the rules of each type's schema; callable as the store's `validate_rules`."""

    def __init__(self) -> None:
        self._programs: dict[str, Any] = {}

    def _program(self, rule: str) -> Any:
        if rule not in self._programs:
            self._programs[rule] = cel.compile(rule)
        return self._programs[rule]

    def __call__(self, rt: ResourceType, obj: Object, old: Object | None) -> None:
        if not rt.schema:
            return
        errors: list[_Cause] = []
        self._walk(rt.schema, obj, old if old is not None else _MISSING, "", errors)
        if errors:
            raise invalid_error(rt, str(obj.get("metadata", {}).get("name", "")), errors)

    def _walk(
        self, schema: Object, value: Any, old: Any, path: str, errors: list[tuple[str, str, str]]
    ) -> None:
        for raw in schema.get("x-kubernetes-validations") or ():
            rule = _Rule(
                rule=str(raw["rule"]),
                message=str(raw.get("message") or f"failed rule: {raw['rule']}"),
                reason=_REASONS.get(str(raw.get("reason", "")), "FieldValueInvalid"),
                field_path=str(raw.get("fieldPath") or ""),
                optional_old_self=bool(raw.get("optionalOldSelf")),
            )
            self._check(rule, value, old, path, errors)
        if isinstance(value, dict):
            properties = schema.get("properties") or {}
            for key, child in value.items():
                sub = properties.get(key)
                if sub is None and isinstance(schema.get("additionalProperties"), dict):
                    sub = schema["additionalProperties"]
                if isinstance(sub, dict):
                    old_child = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
                    self._walk(sub, child, old_child, f"{path}.{key}" if path else key, errors)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            by_key = _correlate(schema, old)
            for index, item in enumerate(value):
                old_item = by_key(item) if by_key is not None else _MISSING
                self._walk(schema["items"], item, old_item, f"{path}[{index}]", errors)

    def _check(
        self, rule: _Rule, value: Any, old: Any, path: str, errors: list[tuple[str, str, str]]
    ) -> None:
        context: dict[str, Any] = {"self": value}
        if rule.transition:
            if rule.optional_old_self:
                context["oldSelf"] = (
                    cel.OptionalValue.none() if old is _MISSING else cel.OptionalValue.of(old)
                )
            elif old is _MISSING:
                return  # a create, or nothing to compare with: transition rules do not apply
            else:
                context["oldSelf"] = old
        field = path + rule.field_path if rule.field_path.startswith(".") else path
        field = field.lstrip(".") or "<root>"
        try:
            passed = self._program(rule.rule).execute(context)
        except Exception as err:  # a runtime error rejects the write, as on a real server
            errors.append((field, "FieldValueInvalid", f"Invalid value: {_type_name(value)}: "
                                                       f"rule evaluation failed: {err}"))  # fmt: skip
            return
        if passed is not True:
            errors.append((field, rule.reason, f"Invalid value: {_type_name(value)}: {rule.message}"))


def _correlate(schema: Object, old: Any) -> Any:
    """For a map-list, a function from a new item to the old item with the same keys."""
    keys = schema.get("x-kubernetes-list-map-keys") or ()
    if schema.get("x-kubernetes-list-type") != "map" or not keys or not isinstance(old, list):
        return None
    index = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}

    def lookup(item: Any) -> Any:
        return index.get(tuple(item.get(k) for k in keys), _MISSING) if isinstance(item, dict) else _MISSING

    return lookup


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return f'"{value}"' if isinstance(value, str) else str(value).lower()
