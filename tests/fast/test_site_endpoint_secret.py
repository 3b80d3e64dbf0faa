"""Attack 41a MEDIUM-7: a site file whose BMC endpoint held credentials
(`http://admin:Secret@127.0.0.1:41901`) was refused, rightly, but the refusal echoed the URL
with its password into the worker's log and the CLI's stderr. The refusal now names the
problem and shows the endpoint with its user and password taken out, whatever its shape."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drivers.site_file import SiteFileError, parse_site

SECRET = "Secret"
SHAPES = (
    f"http://admin:{SECRET}@127.0.0.1:41901",  # the attacker's
    f"https://admin:{SECRET}@10.0.0.1/redfish",
    f"https://{SECRET}@10.0.0.1",  # a token as the user
    f"ftp://admin:{SECRET}@10.0.0.1",  # refused for its scheme too
    f"admin:{SECRET}@10.0.0.1",  # no scheme
    f"https://admin:{SECRET}{'x' * 120}@10.0.0.1",  # longer than the 80 characters echoed
    f"https://admin:p@ss{SECRET}@10.0.0.1",  # an @ in the password
    f"admin:a://{SECRET}@10.0.0.1",  # no scheme, a :// in the password
)


def site(endpoint: str) -> str:
    bmc = {"endpoint": endpoint, "credentials": {"file": "/nonexistent/creds.json"}}
    dpu = {"id": "host-001-dpu-0", "bmc": bmc}
    return yaml.safe_dump({"hosts": [{"id": "host-001", "bmc": bmc, "dpus": [dpu]}]})


@pytest.mark.parametrize("endpoint", SHAPES)
def test_an_endpoint_with_credentials_is_refused_without_echoing_them(endpoint: str) -> None:
    with pytest.raises(SiteFileError) as refused:
        parse_site(Path("site.yaml"), site(endpoint))
    err = refused.value
    assert SECRET not in str(err) and SECRET not in err.one_line(), err.one_line()
    assert [p.split(":")[0] for p in err.problems] == [
        "hosts[0].bmc.endpoint",
        "hosts[0].dpus[0].bmc.endpoint",
    ]
    for problem in err.problems:
        assert "[redacted]@" in problem and ("@10.0.0.1" in problem or "@127.0.0.1:41901" in problem), problem


def test_the_refusal_says_where_the_credentials_go() -> None:
    with pytest.raises(SiteFileError) as refused:
        parse_site(Path("site.yaml"), site(SHAPES[0]))
    assert refused.value.problems[0] == (
        "hosts[0].bmc.endpoint: a BMC endpoint holds no user or password (name them under "
        "`credentials`): 'http://[redacted]@127.0.0.1:41901'"
    )
