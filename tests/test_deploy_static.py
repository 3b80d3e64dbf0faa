"""Static half of least privilege: every Kubernetes call in activities/ and drivers/ needs a verb the
Kustomize base grants, and the base grants nothing no call needs (the dynamic half runs the
flows under the base's token: tests/test_deploy_e2e.py, tests/test_deploy_grove.py).

Why parse the calls rather than keep a table of permissions: a table is one more thing to
update by hand and can drift from the code it describes; the calls cannot. It works because
every Kubernetes request goes through three narrow doors, and this test reads them as they are:
- `Kube` (drivers/kube.py): each method's verb is read from the `kubernetes` client call
  inside it (`patch_namespaced_custom_object` -> patch; `edit` calls `get` and `patch`);
- the watch streams (drivers/kube_streams.py): `list_objects` -> list, `watch_events` -> watch;
- `CoreV1Api(...).read_namespaced_secret`, `EventsV1Api(...).create_namespaced_event` and their
  siblings -> verb, the API's group and the resource by name.
The resource is the `Kind` a call passes, resolved without running anything: a module-level
constant or `kinds()[i]`, a loop over such, a parameter (through the calls of that function in
its module), or an attribute set from a constructor parameter (`_Stream(kind, ...).kind`). A
call whose kind is computed from data (`KINDS[body["kind"]]`) cannot be read this way: it is
named in `DATA_DRIVEN` with the kinds it can reach, and an entry no call uses fails the test.
A call the analysis does not understand fails the test with its file and line, so a new door
or a new idiom is noticed, never silently skipped. Namespaces are not checked here (a rule's
namespace is where it is bound); the end-to-end tests prove those.
Cost: parses the ~30 modules of activities/ and drivers/ and imports them (no servers); about a second.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_support import REPO, granted_by_base

from drivers import kube as kube_module
from drivers.campaign import POINTED
from drivers.kube import Kind

ACTIVITIES = REPO / "activities"
DRIVERS = REPO / "drivers"
DOORS = {"drivers/kube.py", "drivers/kube_streams.py"}
STREAM_VERBS = {"list_objects": ("list", 2), "watch_events": ("watch", 2)}
# The kubernetes client's method prefix -> the RBAC verb it sends.
CLIENT_VERBS = {"read": "get", "get": "get", "list": "list", "create": "create", "patch": "patch",
                "delete": "delete", "replace": "update",
                "delete_collection": "deletecollection"}  # fmt: skip
# The typed clients a driver may call directly, and the API group of their resources: Secrets
# (drivers/credentials.py) and the worker's Events (drivers/kube_events.py).
TYPED_APIS = {"CoreV1Api": "", "EventsV1Api": "events.k8s.io"}
# Kinds computed from object bodies: `_ensure` creates (and reads back) the site set-up objects
# (objects.site_setup_objects) and the registration bodies (dpunode_body, dpudevice_bodies), and
# converges (edit) only the registration bodies.
_SITE_SETUP = {"BFB", "DPUFlavor", "DPUServiceTemplate", "DPUServiceConfiguration", "DPUDeployment"}
DATA_DRIVEN = {
    ("activities/dpf/operations.py", "DPFActivities._ensure", "create"): _SITE_SETUP
    | {"DPUDevice", "DPUNode"},
    ("activities/dpf/operations.py", "DPFActivities._ensure", "get"): _SITE_SETUP | {"DPUDevice", "DPUNode"},
    ("activities/dpf/operations.py", "DPFActivities._ensure", "edit"): {"DPUDevice", "DPUNode"},
    # The object a DPUDeployment's value names, from the campaign's POINTED table
    # (tests/fast/test_campaign_targets_table.py holds that table to the campaign's target kinds).
    ("activities/campaign_deploy.py", "CampaignDeployments.point_campaign_deployment", "get"): {
        k.kind for k in POINTED.values()
    },
    ("drivers/campaign.py", "Fleet.read_deployments", "get"): {k.kind for k in POINTED.values()},
}
Permission = tuple[str, str, str]  # verb, API group, resource


def kube_method_verbs() -> dict[str, set[str]]:
    """Each public `Kube` method -> the verbs it sends, read from the client calls in its body
    and in the methods it calls."""
    tree = ast.parse((DRIVERS / "kube.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Kube")
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    direct: dict[str, set[str]] = {name: set() for name in methods}
    calls: dict[str, set[str]] = {name: set() for name in methods}
    for name, fn in methods.items():
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                match = re.fullmatch(r"([a-z]+)_namespaced_custom_object", node.func.attr)
                if match:
                    direct[name].add(CLIENT_VERBS[match.group(1)])
                elif isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                    if node.func.attr in methods:
                        calls[name].add(node.func.attr)

    def verbs(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        found = set(direct[name])
        for callee in calls[name] - seen:
            found |= verbs(callee, seen | {name})
        return found

    # Public methods only: the activities call those (a private helper's verbs are its callers').
    return {name: v for name in methods if not name.startswith("_") and (v := verbs(name))}


@dataclass
class Module:
    path: str
    tree: ast.Module
    namespace: dict[str, Any]
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        self.functions[f"{node.name}.{item.name}"] = item


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]


def _locals(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set(_params(fn))
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _kinds_in(value: Any) -> set[Kind]:
    if isinstance(value, Kind):
        return {value}
    if isinstance(value, tuple | list):
        return {v for v in value if isinstance(v, Kind)}
    return set()


_SAFE = (ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Constant, ast.Tuple, ast.List, ast.Call,
         ast.Load, ast.UnaryOp, ast.USub)  # fmt: skip


class Resolver:
    """Which `Kind`s an expression at a call site can be (an empty set: cannot tell)."""

    def __init__(self, module: Module) -> None:
        self.module = module

    def static(self, expr: ast.expr, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[Kind]:
        if {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} & _locals(fn):
            return set()
        # Only lookups and argument-less calls (`kinds()[2:]`) are evaluated: nothing with effects.
        for node in ast.walk(expr):
            if not isinstance(node, _SAFE) or (isinstance(node, ast.Call) and (node.args or node.keywords)):
                return set()
        try:
            value = eval(compile(ast.Expression(expr), self.module.path, "eval"), self.module.namespace)
        except Exception:
            return set()
        return _kinds_in(value)

    def resolve(
        self, expr: ast.expr, fn: ast.FunctionDef | ast.AsyncFunctionDef, depth: int = 0
    ) -> set[Kind]:
        if depth > 6:
            return set()
        if found := self.static(expr, fn):
            return found
        if isinstance(expr, ast.Name):
            return self._name(expr.id, fn, depth)
        if isinstance(expr, ast.IfExp):  # `BFB if ... else FLAVOR`: either kind may be called
            return self.resolve(expr.body, fn, depth + 1) | self.resolve(expr.orelse, fn, depth + 1)
        if isinstance(expr, ast.Attribute):
            return self._constructed(expr.attr, depth)
        return set()

    def _name(self, name: str, fn: ast.FunctionDef | ast.AsyncFunctionDef, depth: int) -> set[Kind]:
        found: set[Kind] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.For | ast.AsyncFor) and name in {
                n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)
            }:  # a loop: every kind its iterable holds
                for part in ast.walk(node.iter):
                    if isinstance(part, ast.expr):
                        found |= self.static(part, fn)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                found |= self.resolve(node.value, fn, depth + 1)
        if name in _params(fn):
            found |= self._arguments(fn, _params(fn).index(name), name, depth)
        return found

    def _arguments(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, index: int, name: str,
                   depth: int) -> set[Kind]:  # fmt: skip
        """The kinds the calls of `fn` in its module pass for its parameter `name`."""
        method = bool(_params(fn)) and _params(fn)[0] == "self"
        found: set[Kind] = set()
        for caller in self.module.functions.values():
            for node in ast.walk(caller):
                if not isinstance(node, ast.Call):
                    continue
                callee = (
                    node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                )
                if callee != fn.name:
                    continue
                position = index - (1 if method else 0)
                args = [k.value for k in node.keywords if k.arg == name]
                if not args and 0 <= position < len(node.args):
                    args = [node.args[position]]
                for arg in args:
                    found |= self.resolve(arg, caller, depth + 1)
        return found

    def _constructed(self, attr: str, depth: int) -> set[Kind]:
        """`x.attr` where a class of the module sets `attr` from a constructor parameter: its
        `__init__` assigns `self.attr = param`, or it is a dataclass with a field `attr`."""
        found: set[Kind] = set()
        for cls_name, cls in self.module.classes.items():
            fields = [
                n.target.id
                for n in cls.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            ]
            init = self.module.functions.get(f"{cls_name}.__init__")
            param, index = None, -1
            if init is not None:
                for node in ast.walk(init):
                    if (
                        isinstance(node, ast.Assign)
                        and any(isinstance(t, ast.Attribute) and t.attr == attr for t in node.targets)
                        and isinstance(node.value, ast.Name)
                        and node.value.id in _params(init)
                    ):
                        param = node.value.id
                        index = _params(init).index(param) - 1  # after self
            elif attr in fields and any("dataclass" in ast.unparse(d) for d in cls.decorator_list):
                param, index = attr, fields.index(attr)
            if param is None:
                continue
            for caller in self.module.functions.values():
                for call in ast.walk(caller):
                    if isinstance(call, ast.Call) and getattr(call.func, "id", "") == cls_name:
                        args = [k.value for k in call.keywords if k.arg == param]
                        if not args and 0 <= index < len(call.args):
                            args = [call.args[index]]
                        for arg in args:
                            found |= self.resolve(arg, caller, depth + 1)
        return found


def load(path: Path, source: str | None = None, namespace: dict[str, Any] | None = None) -> Module:
    relative = path.relative_to(REPO).as_posix()
    if namespace is None:
        namespace = vars(importlib.import_module(relative.removesuffix(".py").replace("/", ".")))
    return Module(relative, ast.parse(source if source is not None else path.read_text()), namespace)


def required_permissions(
    modules: list[Module],
) -> tuple[dict[Permission, list[str]], list[str], set[tuple[str, str, str]]]:
    """(permission -> the call sites needing it, calls not understood, DATA_DRIVEN entries used)."""
    kube_verbs = kube_method_verbs()
    by_kind = {k.kind: k for k in vars(kube_module).values() if isinstance(k, Kind)}
    from drivers.grove import kinds

    by_kind |= {k.kind: k for k in kinds()}
    needed: dict[Permission, list[str]] = {}
    unknown: list[str] = []
    used_entries: set[tuple[str, str, str]] = set()
    for module in modules:
        resolver = Resolver(module)
        for qualname, fn in module.functions.items():
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                where = f"{module.path}:{node.lineno} ({qualname})"
                func = node.func
                verbs: set[str] = set()
                kind_arg: ast.expr | None = None
                if (
                    isinstance(func, ast.Attribute)
                    and (
                        (isinstance(func.value, ast.Attribute) and func.value.attr == "kube")
                        or (isinstance(func.value, ast.Name) and func.value.id == "kube")  # a driver's
                    )
                    and func.attr in kube_verbs
                ):
                    verbs, kind_arg, method = kube_verbs[func.attr], node.args[1], func.attr
                elif isinstance(func, ast.Name) and func.id in STREAM_VERBS:
                    verb, position = STREAM_VERBS[func.id]
                    verbs, kind_arg, method = {verb}, node.args[position], func.id
                elif isinstance(func, ast.Attribute) and (
                    match := re.fullmatch(r"([a-z]+(?:_collection)?)_namespaced_([a-z_]+)", func.attr)
                ):
                    api = func.value.func if isinstance(func.value, ast.Call) else None
                    group = TYPED_APIS.get(getattr(api, "attr", ""))
                    if match.group(2) == "custom_object" or group is None:
                        unknown.append(f"{where}: {func.attr} outside Kube; go through drivers.kube.Kube")
                        continue
                    verb = CLIENT_VERBS.get(match.group(1), match.group(1))
                    needed.setdefault((verb, group, match.group(2) + "s"), []).append(where)
                    continue
                else:
                    continue
                kinds_found = resolver.resolve(kind_arg, fn)
                entry = (module.path, qualname, method)
                if not kinds_found and entry in DATA_DRIVEN:
                    used_entries.add(entry)
                    kinds_found = {by_kind[name] for name in DATA_DRIVEN[entry]}
                if not kinds_found:
                    unknown.append(f"{where}: cannot tell the kind of `{ast.unparse(kind_arg)}`")
                for kind in kinds_found:
                    for verb in verbs:
                        needed.setdefault((verb, kind.group, kind.plural), []).append(where)
    return needed, unknown, used_entries


def activity_modules() -> list[Module]:
    return [
        load(path)
        for path in sorted([*ACTIVITIES.rglob("*.py"), *DRIVERS.rglob("*.py")])
        if path.relative_to(REPO).as_posix() not in DOORS
    ]


def test_kube_methods_map_to_the_verbs_their_client_calls_send() -> None:
    verbs = kube_method_verbs()
    assert verbs == {"get": {"get"}, "list": {"list"}, "create": {"create"}, "patch": {"patch"},
                     "json_patch": {"patch"}, "delete": {"delete"}, "edit": {"get", "patch"}}  # fmt: skip


def test_the_base_grants_exactly_what_the_activities_call() -> None:
    needed, unknown, used_entries = required_permissions(activity_modules())
    assert unknown == [], "calls the static check cannot read:\n" + "\n".join(unknown)
    assert used_entries == set(DATA_DRIVEN), f"stale DATA_DRIVEN entries: {set(DATA_DRIVEN) - used_entries}"
    granted = granted_by_base()
    missing = {p: needed[p] for p in set(needed) - granted}
    assert missing == {}, f"activities need verbs deploy/base does not grant: {missing}"
    assert granted - set(needed) == set(), "deploy/base grants what no activity calls"
    # The rollout's calls are among those read (the analysis reaches Grove's doors too).
    assert ("deletecollection", "", "pods") in needed
    assert ("watch", "grove.io", "podcliquesets") in needed


def test_a_call_the_base_does_not_grant_is_reported() -> None:
    """The check can fail: an activity that scaled by creating PodGangs would need `create`."""
    import activities.grove.operations as grove_operations

    source = (
        "class Extra:\n"
        "    async def grow(self, key, ns, body):\n"
        "        return await self.kube.create(key, kinds()[1], ns, body)\n"
    )
    module = load(ACTIVITIES / "grove" / "extra.py", source, vars(grove_operations))
    needed, unknown, _ = required_permissions([module])
    assert unknown == []
    assert set(needed) == {("create", "scheduler.grove.io", "podgangs")}
    assert set(needed) - granted_by_base() == {("create", "scheduler.grove.io", "podgangs")}
