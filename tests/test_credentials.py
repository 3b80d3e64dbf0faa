"""Credentials by reference: the activity resolves them; no secret in inputs, output or errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sim_support import running_sim

from contracts.errors import CredentialsUnavailable
from contracts.models.inventory import CredentialRef, EnvCredentials, SecretRef
from drivers.credentials import CredentialResolver

SECRET_SITE = {
    "name": "secret-site",
    "hosts": [
        {
            "id": "host-001",
            "bmc": {
                "profile": "powercycle",
                "credentials": {"secret": {"namespace": "dpf-operator-system", "name": "host-001-bmc"}},
            },
            "dpus": [{"id": "host-001-dpu-0"}],
        }
    ],
}


async def test_a_bmc_reached_with_credentials_from_a_kubernetes_secret(tmp_path: Path) -> None:
    site_file = tmp_path / "site-in.yaml"
    site_file.write_text(yaml.safe_dump(SECRET_SITE))
    with running_sim(tmp_path / "sim", site_file=site_file) as sim:
        ref = CredentialRef(secret=SecretRef(namespace="dpf-operator-system", name="host-001-bmc"))
        found = await CredentialResolver(kubeconfig=sim.kubeconfig).resolve(ref)
        assert found.username and found.password
        assert found.password not in repr(found)

        # The operator's view: the same reference, resolved by `metalflow bmc check`.
        env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig)}
        shown = subprocess.run(
            [sys.executable, "-m", "metalflow", "bmc", "check", "host-001", "--site", str(sim.site_file)],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert "On" in shown.stdout
        assert found.password not in shown.stdout + shown.stderr

        missing = CredentialRef(secret=SecretRef(namespace="dpf-operator-system", name="no-such-secret"))
        with pytest.raises(CredentialsUnavailable, match="no-such-secret.*does not exist"):
            await CredentialResolver(kubeconfig=sim.kubeconfig).resolve(missing)


async def test_unresolvable_references_name_the_reference_never_a_value(tmp_path: Path) -> None:
    unset = CredentialRef(env=EnvCredentials(username="BMC_USER_X", password="BMC_PASS_X"))
    with pytest.raises(CredentialsUnavailable, match="BMC_USER_X/BMC_PASS_X"):
        await CredentialResolver(env={"BMC_USER_X": "admin"}).resolve(unset)

    creds = tmp_path / "bmc.json"
    creds.write_text(json.dumps({"username": "admin"}))  # no password
    with pytest.raises(CredentialsUnavailable) as raised:
        await CredentialResolver().resolve(CredentialRef(file=str(creds)))
    assert str(creds) in str(raised.value)

    resolved = await CredentialResolver(env={"U": "admin", "P": "s3cr3t-value"}).resolve(
        CredentialRef(env=EnvCredentials(username="U", password="P"))
    )
    assert (resolved.username, resolved.password) == ("admin", "s3cr3t-value")
    assert "s3cr3t-value" not in repr(resolved) and "s3cr3t-value" not in str(resolved)
