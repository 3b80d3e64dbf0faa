"""Helpers for the deploy tests: render the Kustomize overlays, give a worker only the base's
RBAC on the simulated site, and read a Prometheus text exposition."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_support import RunningSim

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
OVERLAYS = sorted(p.parent for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
# What the simulated API serves of a rendered install (Deployments and ConfigMaps it does not).
RBAC_KINDS = ("Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
WORKER_SA = ("metalflow", "metalflow-worker")


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        # `make test` installs it (`make kubectl-tool`): a missing one is a broken set-up, not a skip.
        pytest.fail(
            "kubectl is not installed: `make kubectl-tool` installs it "
            "(the deploy tests render with `kubectl kustomize`)"
        )
    return found


def render(folder: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize folder`, as objects."""
    done = subprocess.run([kubectl(), "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {folder} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def run_kubectl(sim: RunningSim, *args: str, stdin: str | None = None) -> str:
    """kubectl with the simulator's admin kubeconfig; fails the test on a non-zero exit."""
    done = subprocess.run(
        [kubectl(), "--kubeconfig", str(sim.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def granted_by_base(groups: set[str] | None = None) -> set[tuple[str, str, str]]:
    """(verb, API group, resource) of every rule of the base's Roles and ClusterRoles, in
    `groups` when given."""
    granted = set()
    for obj in render(DEPLOY / "base"):
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in obj["rules"]:
            for verb in rule["verbs"]:
                for group in rule["apiGroups"]:
                    if groups is None or group in groups:
                        granted.update((verb, group, resource) for resource in rule["resources"])
    return granted


def rbac_objects(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all([o for o in objects if o["kind"] in RBAC_KINDS])


def restricted_kubeconfig(sim: RunningSim, folder: Path, secret_names: list[str]) -> Path:
    """Apply the base's RBAC to the site, the BMC credential Role naming `secret_names` (as an
    overlay's patch does), and write a kubeconfig holding the worker's service-account token."""
    objects = render(DEPLOY / "base")
    for obj in objects:
        if obj["kind"] == "Role" and obj["metadata"]["name"] == "metalflow-bmc-credentials":
            obj["rules"][0]["resourceNames"] = secret_names
    run_kubectl(sim, "apply", "-f", "-", stdin=rbac_objects(objects))
    namespace, account = WORKER_SA
    token = run_kubectl(sim, "create", "token", account, "-n", namespace).strip()
    config = yaml.safe_load(sim.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path = folder / "worker-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match.group(1) != name:
            continue
        found = dict(_LABEL.findall(match.group(3) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(4))
    return total
