"""deploy/ renders with `kubectl kustomize`, every object is valid against the Kubernetes API
schema, the pieces fit together (probes, ports, ConfigMaps, ServiceAccount, non-root), the RBAC
objects pass `kubectl apply --dry-run=server` on the simulated site, and the Dockerfile's
commands match the repository and the wheel it installs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from deploy_support import DEPLOY, OVERLAYS, REPO, rbac_objects, render, run_kubectl
from kubernetes import client as k8s
from sim_support import running_sim

from metalflow.runtime.observability import ADDRESS_ENV

MODEL_PACKAGES = {"v1": "V1", "apps/v1": "V1", "rbac.authorization.k8s.io/v1": "V1"}
_api = k8s.ApiClient()


def as_model(obj: dict[str, Any]) -> Any:
    """The official client's model of `obj` (its classes are generated from the API's OpenAPI)."""
    prefix = MODEL_PACKAGES.get(obj["apiVersion"])
    assert prefix is not None, f"{obj['kind']} {obj['metadata']['name']}: unexpected {obj['apiVersion']}"
    return _api._ApiClient__deserialize(obj, prefix + obj["kind"])  # type: ignore[attr-defined]


def without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_empty(v) for k, v in value.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


@pytest.mark.parametrize("folder", [DEPLOY / "base", *OVERLAYS], ids=lambda p: p.name)
def test_every_object_is_valid_against_the_api_schema(folder: Path) -> None:
    objects = render(folder)
    assert {o["kind"] for o in objects} >= {
        "Deployment",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
    }
    for obj in objects:
        # Deserialising checks required fields and types; a field the schema does not know (a
        # typo, a wrong nesting level) is dropped, so the round trip must give the object back.
        model = as_model(obj)
        assert without_empty(_api.sanitize_for_serialization(model)) == without_empty(obj), (
            f"{obj['kind']} {obj['metadata']['name']} has fields the {obj['apiVersion']} schema does not know"
        )


@pytest.mark.parametrize("folder", OVERLAYS, ids=lambda p: p.name)
def test_the_deployment_fits_the_rest_of_the_install(folder: Path) -> None:
    objects = render(folder)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    (deployment,) = by_kind["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] in {sa["metadata"]["name"] for sa in by_kind["ServiceAccount"]}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    config_maps = {c["metadata"]["name"] for c in by_kind["ConfigMap"]}
    assert {ref["configMapRef"]["name"] for ref in container["envFrom"]} <= config_maps
    assert {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v} <= config_maps
    # Secrets are only referenced, and optional, so an install without them still starts.
    for env in container.get("env", []):
        assert "value" in env or env["valueFrom"]["secretKeyRef"]["optional"] is True
    # The probes and the Service reach the port the worker's metrics address binds.
    settings = next(c for c in by_kind["ConfigMap"] if c["metadata"]["name"].startswith("metalflow-settings"))
    port = int(settings["data"][ADDRESS_ENV].rpartition(":")[2])
    (metrics_port,) = [p for p in container["ports"] if p["name"] == "metrics"]
    assert metrics_port["containerPort"] == port
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Worker versioning, where an overlay turns it on: the build id is the image's tag.
    if "METALFLOW_BUILD_ID" in settings["data"]:
        assert container["image"].rpartition(":")[2] == settings["data"]["METALFLOW_BUILD_ID"]
        assert settings["data"]["METALFLOW_DEPLOYMENT_NAME"]
    (service,) = by_kind["Service"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    # Every binding binds the worker's ServiceAccount to a Role (in its namespace) or a
    # ClusterRole of the install; nothing is bound cluster-wide.
    roles = {("Role", r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind["Role"]}
    roles |= {("ClusterRole", None, r["metadata"]["name"]) for r in by_kind["ClusterRole"]}
    assert "ClusterRoleBinding" not in by_kind
    for binding in by_kind["RoleBinding"]:
        ref = binding["roleRef"]
        scope = binding["metadata"]["namespace"] if ref["kind"] == "Role" else None
        assert (ref["kind"], scope, ref["name"]) in roles
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "metalflow"}
        ]


def test_rbac_objects_pass_a_server_dry_run_on_the_simulated_site(tmp_path: Path) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=1) as sim:
        # As on a real server, a dry-run Namespace does not exist for the objects that follow it.
        run_kubectl(sim, "create", "namespace", "metalflow")
        for folder in OVERLAYS:
            out = run_kubectl(sim, "apply", "--dry-run=server", "-f", "-", stdin=rbac_objects(render(folder)))
            assert "role.rbac.authorization.k8s.io/metalflow-worker created (server dry run)" in out
        # A dry run changes nothing.
        assert "metalflow-worker" not in run_kubectl(sim, "get", "roles", "-A")


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_dockerfile_copies_what_the_repository_has_and_installs_the_wheel(tmp_path: Path) -> None:
    instructions = dockerfile_instructions()
    stages = [arg for op, arg in instructions if op == "FROM"]
    assert len(stages) == 2 and stages[0].endswith(" AS build"), "multi-stage: build, then runtime"
    runtime = instructions[[op for op, _ in instructions].index("FROM", 1) :]
    # The build stage's context, exactly what its COPY lines take from the repository.
    context = tmp_path / "src"
    context.mkdir()
    for op, arg in instructions:
        if op == "COPY" and not arg.startswith("--from"):
            *sources, _ = arg.split()
            for source in sources:
                assert (REPO / source).exists(), f"COPY {source}: not in the repository"
                if (REPO / source).is_dir():
                    shutil.copytree(
                        REPO / source, context / source, ignore=shutil.ignore_patterns("__pycache__")
                    )
                else:
                    shutil.copy(REPO / source, context / source)
    # The runtime stage installs only the build stage's wheels, then drops root.
    assert any(op == "COPY" and arg.startswith("--from=build /wheels") for op, arg in runtime)
    assert any(op == "RUN" and "--no-index --find-links /wheels metalflow" in arg for op, arg in runtime)
    user = [arg for op, arg in runtime if op == "USER"]
    assert user and not user[-1].startswith(("0", "root"))
    deployment = next(o for o in render(DEPLOY / "base") if o["kind"] == "Deployment")
    assert user[-1].split(":")[0] == str(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    )
    (entrypoint,) = [arg for op, arg in runtime if op == "ENTRYPOINT"]
    assert entrypoint == '["python", "-m", "worker"]'
    exposed = {int(arg) for op, arg in runtime if op == "EXPOSE"}
    assert exposed == {9464}
    # The build stage's command, run here on that context: the wheel holds the worker and packages.
    (build_run,) = [arg for op, arg in instructions[: len(instructions) - len(runtime)] if op == "RUN"]
    assert re.fullmatch(r"python -m pip wheel --no-cache-dir --wheel-dir /wheels \.", build_run)
    wheel_dir = tmp_path / "wheels"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir",
         str(wheel_dir), str(context)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (wheel,) = wheel_dir.glob("metalflow-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "worker.py" in names
    for package in ("metalflow", "workflows", "activities"):
        assert f"{package}/__init__.py" in names
    assert "metalflow/runtime/observability.py" in names
