"""A fresh clone needs nothing beside it: the simulated site serves the DPF and Grove CRDs the
repository vendors (simulators/crds), from a clone and from an installed wheel alike."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from kubernetes import client as kube_client
from kubernetes import config as kube_config
from sim_support import running_sim

REPO = Path(__file__).resolve().parent.parent
VENDORED = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "simulators" / "crds").rglob("*.yaml"))
DPF_GROUP, DPF_VERSION, NAMESPACE = "provisioning.dpu.nvidia.com", "v1alpha1", "dpf-operator-system"


def _env() -> dict[str, str]:
    """The environment of a user who set nothing: no CRD folder, no PYTHONPATH."""
    return {k: v for k, v in os.environ.items() if k not in ("METALFLOW_CRDS", "PYTHONPATH")}


def _fresh_clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    assert not any((parent / "shared").exists() for parent in clone.parents), "a shared/ beside the clone"
    return clone


def _served_crd_folder(cwd: Path) -> Path:
    """Where `python -m simulators` started in `cwd` takes its CRDs from by default."""
    code = "from simulators.kube.crds import find_crd_dir; print(find_crd_dir())"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=_env(), capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def _dpus_listed_by_the_official_client(kubeconfig: Path) -> list[str]:
    api: Any = kube_config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        groups = {g.name for g in kube_client.ApisApi(api).get_api_versions().groups}
        assert {DPF_GROUP, "svc.dpu.nvidia.com", "grove.io", "scheduler.grove.io"} <= groups
        listed = kube_client.CustomObjectsApi(api).list_namespaced_custom_object(
            DPF_GROUP, DPF_VERSION, NAMESPACE, "dpus"
        )
        return sorted(item["metadata"]["name"] for item in listed["items"])
    finally:
        api.close()


def test_a_fresh_clone_without_shared_serves_the_vendored_crds(tmp_path: Path) -> None:
    clone = _fresh_clone(tmp_path)
    assert VENDORED and all((clone / name).is_file() for name in VENDORED)  # committed, not just on disk
    assert _served_crd_folder(clone) == clone / "simulators" / "crds"
    with running_sim(tmp_path / "state", initialised=True, hosts=2, cwd=clone, env=_env()) as sim:
        assert len(_dpus_listed_by_the_official_client(sim.kubeconfig)) == 4  # 2 hosts x 2 DPUs


def test_an_installed_wheel_carries_the_crds_and_serves_them(tmp_path: Path) -> None:
    clone = _fresh_clone(tmp_path)
    built = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--wheel-dir", str(built), str(clone)],
        check=True, timeout=300, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = built.glob("metalflow-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert set(VENDORED) | {"simulators/crds/README.md"} <= names
        installed = tmp_path / "site-packages"  # what `pip install` of the wheel would lay out
        archive.extractall(installed)
    assert _served_crd_folder(installed) == installed / "simulators" / "crds"
    with running_sim(tmp_path / "state", initialised=True, hosts=1, cwd=installed, env=_env()) as sim:
        assert len(_dpus_listed_by_the_official_client(sim.kubeconfig)) == 2


def test_a_crd_folder_that_is_not_one_is_refused_by_name(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "simulators", "serve", "--port", "0", "--crds", str(tmp_path)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert f"{tmp_path} (--crds) is not a CRD folder: it must hold dpf/ and grove/" in out.stderr
