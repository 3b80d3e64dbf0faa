"""The bundled site is healthy by default (issue 38 item 6): every host BMC of the generated
site's rotation serves its vendor's UpdateService and FirmwareInventory (simulators/redfish/
BEHAVIOUR.md H1-H7), so `metalflow host versions` shows each host BMC's firmware, never
`unknown` or `-`, and names no error."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from cli_support import METALFLOW
from sim_support import RunningSim, running_sim

from simulators.redfish.host import PROFILES
from simulators.site import DEFAULT_ROTATION


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("vendors"), hosts=len(DEFAULT_ROTATION), dpus_per_host=1,
                     initialised=True) as sim:  # fmt: skip
        yield sim


def test_host_versions_shows_every_host_bmc_firmware_of_the_bundled_site(sim: RunningSim) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "METALFLOW_"))}
    env |= {"METALFLOW_SITE_FILE": str(sim.site_file), "KUBECONFIG": str(sim.kubeconfig),
            "METALFLOW_INVENTORY": "site"}  # fmt: skip
    argv = [METALFLOW, "host", "versions"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.startswith("host-")}
    assert len(rows) == len(DEFAULT_ROTATION), done.stdout
    for host in sim.site["hosts"]:
        firmware = PROFILES[host["bmc"]["profile"]].firmware
        assert firmware, f"profile {host['bmc']['profile']} serves no FirmwareInventory"
        # The column shows the BMC's own member (the first the profile lists), whatever its id.
        assert rows[host["id"]][-2] == firmware[0].version, done.stdout
        assert rows[host["id"]][-1] in ("-", "?"), done.stdout  # MAINTENANCE (`?`: Temporal not asked)
    assert "unknown" not in done.stdout and "UpdateService" not in done.stdout + done.stderr, done.stdout


def test_the_rotation_has_no_profile_without_an_inventory() -> None:
    """The profiles with no FirmwareInventory (no source found for their vendor's member ids)
    are only chosen by name in a site file; `host versions` says why for them."""
    assert {name for name, profile in PROFILES.items() if not profile.firmware}.isdisjoint(DEFAULT_ROTATION)
