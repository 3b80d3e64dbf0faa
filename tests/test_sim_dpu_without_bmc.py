"""DPUs without a BMC: the simulated site serves none for them, which is how 10,000 hosts fit.

Every BMC service is one listening socket of the simulator's process, and the descriptor limit
(20,000 soft and hard on the benchmark machine) cannot hold 10,000 host BMCs and 10,000 DPU
BMCs; the 10,000-host benchmarks never use a DPU's BMC, so they serve DPUs with `bmc: null`.
These tests check that such a site is served and read as the product reads it, and that a site
whose BMCs cannot all listen is refused before anything binds, with an error naming the way out.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import httpx
import yaml
from sim_support import running_sim, sim_http

from drivers.site_file import Site as ProductSite
from simulators.redfish.standalone import serve_bmcs
from simulators.site import default_site, dump_site, load_site


async def test_a_generated_site_without_dpu_bmcs_serves_one_bmc_per_host_and_round_trips(
    tmp_path: Path,
) -> None:
    site = default_site(4, 2, dpu_bmcs=False)
    assert all(dpu.bmc is None for host in site.hosts for dpu in host.dpus)
    async with serve_bmcs(site) as running:
        assert sorted(running.bmcs.services) == [h.id for h in site.hosts]  # no DPU service
        assert running.bmcs.bmc_ids() == [h.id for h in site.hosts]
    # Written out and read back, a DPU without a BMC stays without one (not the default BMC).
    path = tmp_path / "site.yaml"
    path.write_text(dump_site(site))
    assert all(dpu.bmc is None for host in load_site(path).hosts for dpu in host.dpus)
    # The default generated site is unchanged: a BMC per DPU.
    assert all(dpu.bmc is not None for host in default_site(2, 2).hosts for dpu in host.dpus)


def test_the_site_serves_dpus_without_bmcs_and_the_product_reads_them(tmp_path: Path) -> None:
    site_file = tmp_path / "in.yaml"
    site_file.write_text(
        yaml.safe_dump(
            {
                "hosts": [
                    {"id": "host-001", "dpus": [{"id": "host-001-dpu-0", "bmc": None}]},
                    {"id": "host-002", "dpus": [{"id": "host-002-dpu-0"}]},  # a BMC: the default
                ]
            }
        )
    )
    with running_sim(tmp_path / "state", site_file=site_file, initialised=True) as sim:
        served = sim.site
        assert served["hosts"][0]["dpus"][0]["bmc"] is None
        assert served["hosts"][1]["dpus"][0]["bmc"]["endpoint"].startswith("http://127.0.0.1:")
        product = ProductSite.model_validate(served)  # the product's own loader takes it
        assert product.hosts[0].dpus[0].bmc is None
        assert product.hosts[1].dpus[0].bmc is not None
        # The simulator has no BMC for that DPU, and says so.
        missing = sim_http().get(f"{sim.url}/sim/bmcs/host-001-dpu-0/load")
        assert missing.status_code == 404 and "host-001-dpu-0" in missing.text
        assert sim_http().get(f"{sim.url}/sim/bmcs/host-002-dpu-0/load").status_code == 200
        # DPF's objects of that DPU were made (no BMC address to give them).
        devices = (
            sim_http()
            .get(
                f"{sim.url}/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpudevices",
                headers=sim.headers,
                timeout=10,
            )
            .json()["items"]
        )
        by_name = {d["metadata"]["name"]: d["spec"] for d in devices}
        assert "bmcIp" not in by_name["device-host-001-dpu-0"]
        # The host's own BMC still power-cycles it.
        host = sim.host("host-001")
        auth = _credentials(host)
        with httpx.Client(base_url=host["bmc"]["endpoint"], auth=auth, timeout=10) as bmc:
            systems = bmc.get("/redfish/v1/Systems").json()["Members"]
            system = systems[0]["@odata.id"]
            answer = bmc.post(f"{system}/Actions/ComputerSystem.Reset", json={"ResetType": "ForceRestart"})
            assert answer.status_code in (200, 202, 204), answer.text


def _credentials(host: dict[str, object]) -> tuple[str, str]:
    bmc = host["bmc"]
    assert isinstance(bmc, dict)
    data = json.loads(Path(bmc["credentials"]["file"]).read_text())
    return data["username"], data["password"]


def _serve_with_descriptor_limit(state_dir: Path, limit: int) -> subprocess.CompletedProcess[str]:
    def lower_limit() -> None:  # lowering a soft limit needs no privilege; only this child has it
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))

    args = [sys.executable, "-m", "simulators", "serve", "--port", "0", "--state-dir", str(state_dir)]
    return subprocess.run(
        [*args, "--hosts", "300", "--dpus-per-host", "2", "--timings", "zero"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lower_limit,  # noqa: PLW1509 - a plain setrlimit, no threads involved
    )


def test_a_site_whose_bmcs_cannot_all_listen_is_refused_before_binding_with_the_way_out(
    tmp_path: Path,
) -> None:
    # 300 hosts x (1 + 2 DPU BMCs) = 900 listeners: more than 1,500 descriptors hold with the
    # 1,000 the simulator keeps for connections.
    refused = _serve_with_descriptor_limit(tmp_path / "refused", 1_500)
    assert refused.returncode == 1, refused.stderr
    assert "900 BMC services" in refused.stderr and "--no-dpu-bmcs" in refused.stderr
    assert not (tmp_path / "refused" / "sim.json").exists()
