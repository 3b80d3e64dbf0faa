"""The simulated API refuses what a real one refuses: no token -> 401, a service account without a
grant -> 403 with a Kubernetes Status; and kubectl's imperative commands (protobuf bodies) work."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from deploy_support import run_kubectl
from sim_support import RunningSim, running_sim

from simulators.kube import protobuf

SECRETS = "/api/v1/namespaces/default/secrets"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("auth") / "sim", hosts=1, dpus_per_host=1) as running:
        yield running


def api(sim: RunningSim) -> httpx.Client:
    """The API over HTTPS, verifying the certificate the kubeconfig carries."""
    cluster = yaml.safe_load(sim.kubeconfig.read_text())["clusters"][0]["cluster"]
    ca = sim.state_dir / "ca.pem"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    return httpx.Client(base_url=cluster["server"], verify=ssl.create_default_context(cafile=ca), timeout=10)


def test_requests_without_a_valid_token_are_401_and_change_nothing(sim: RunningSim) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sneaky"}}
    with api(sim) as http:
        for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic YTpi"}):
            refused = http.post(SECRETS, json=secret, headers=headers)
            assert refused.status_code == 401
            assert refused.json() == {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
            }  # fmt: skip
        assert http.get("/apis", headers={}).status_code == 401
        assert http.get("/version").status_code == 200  # public, as on a real server
        listed = http.get(SECRETS, headers=sim.headers).json()
    assert "sneaky" not in [s["metadata"]["name"] for s in listed["items"]]


def test_a_service_account_gets_exactly_what_its_role_binds(sim: RunningSim, tmp_path: Path) -> None:
    run_kubectl(sim, "create", "namespace", "team")
    run_kubectl(sim, "create", "serviceaccount", "reader", "-n", "team")
    run_kubectl(sim, "create", "secret", "generic", "bmc-a", "--from-literal=password=s3cret", "-n", "team")
    run_kubectl(sim, "create", "secret", "generic", "bmc-b", "--from-literal=password=other", "-n", "team")
    run_kubectl(sim, "create", "role", "read-a", "--verb=get", "--resource=secrets", "--resource-name=bmc-a",
                "-n", "team")  # fmt: skip
    run_kubectl(sim, "create", "rolebinding", "read-a", "--role=read-a", "--serviceaccount=team:reader",
                "-n", "team")  # fmt: skip
    token = run_kubectl(sim, "create", "token", "reader", "-n", "team").strip()
    headers = {"Authorization": f"Bearer {token}"}
    with api(sim) as http:
        got = http.get("/api/v1/namespaces/team/secrets/bmc-a", headers=headers)
        assert got.status_code == 200
        assert base64.b64decode(got.json()["data"]["password"]) == b"s3cret"
        other = http.get("/api/v1/namespaces/team/secrets/bmc-b", headers=headers)
        listing = http.get("/api/v1/namespaces/team/secrets", headers=headers)
        write = http.delete("/api/v1/namespaces/team/secrets/bmc-a", headers=headers)
    assert (other.status_code, listing.status_code, write.status_code) == (403, 403, 403)
    assert other.json()["reason"] == "Forbidden"
    assert other.json()["message"] == (
        'secrets "bmc-b" is forbidden: User "system:serviceaccount:team:reader" cannot get resource '
        '"secrets" in API group "" in the namespace "team"'
    )
    assert run_kubectl(sim, "get", "secret", "bmc-a", "-n", "team", "-o", "name") == "secret/bmc-a\n"
    denied = [e for e in sim.audit() if e["user"] == "system:serviceaccount:team:reader" and not e["allowed"]]
    assert {(e["verb"], e["resource"]) for e in denied} == {("get", "secrets"), ("list", "secrets"),
                                                            ("delete", "secrets")}  # fmt: skip


def test_protobuf_bodies_of_other_kinds_are_415() -> None:
    with pytest.raises(protobuf.ProtobufError, match="not a Kubernetes protobuf envelope"):
        protobuf.decode(b'{"kind": "Secret"}')
    # k8s\0 + Unknown{typeMeta{apiVersion "apps/v1", kind "Deployment"}, raw ""}
    type_meta = b"\x0a\x07apps/v1\x12\x0aDeployment"
    body = protobuf.MAGIC + b"\x0a" + bytes([len(type_meta)]) + type_meta + b"\x12\x00"
    with pytest.raises(protobuf.ProtobufError, match=r"Deployment \(apps/v1\) is not accepted"):
        protobuf.decode(body)
