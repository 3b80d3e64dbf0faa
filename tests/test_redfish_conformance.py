"""DMTF's Redfish Protocol Validator against one simulated BMC of every profile, host and DPU
(issue 8 item 9): 0 FAIL.

All BMCs are served in one simulator (in this process, over real HTTPS) and the validators run
in parallel, one process each. They run over https: the protocol allows HTTP basic auth and
session login only over https, so a BMC served over http fails those two assertions whatever it
does. The `basic-only` profile models a BMC without a SessionService, which the protocol
requires: its failures must be exactly the assertions about sessions, nothing else.
"""

from __future__ import annotations

import asyncio
import csv
import os
import sys
from pathlib import Path

from simulators.redfish.standalone import serve_bmcs
from simulators.site import BMC, DPU, HOST_BMC_PROFILES, Host, Site
from simulators.timings import timings_for

VALIDATOR = Path(sys.executable).with_name("rf_protocol_validator")
# What a BMC without a SessionService cannot pass: every assertion that needs one.
NO_SESSION_SERVICE = frozenset(
    {
        "PROTO_HTTP_SUPPORTED_METHODS",  # its only POST would be a session login
        "REQ_HEADERS_AUTHORIZATION",
        "REQ_POST_CREATE_TO_MEMBERS_PROP",
        "REQ_POST_CREATE_VIA_COLLECTION",
        "SEC_BASIC_AUTH_STANDALONE",
        "SEC_BOTH_AUTH_TYPES",
        "SEC_REQUIRE_LOGIN_SESSIONS",
        "SEC_SESSIONS_URI_LOCATION",
        "SEC_SUPPORT_BASIC_AUTH",
        "SEC_WRITE_REQUIRES_AUTH",
    }
)


async def _validate(url: str, user: str, password: str, ca: str, report_dir: Path) -> list[dict[str, str]]:
    # requests prefers REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE over the validator's --ca-bundle.
    env = {**os.environ, "REQUESTS_CA_BUNDLE": ca, "CURL_CA_BUNDLE": ca}
    process = await asyncio.create_subprocess_exec(
        str(VALIDATOR), "-r", url, "-u", user, "-p", password, "--ca-bundle", ca,
        "--avoid-http-redirect", "--report-dir", str(report_dir), "--report-type", "tsv",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    output, _ = await process.communicate()
    reports = list(report_dir.glob("*.tsv"))
    assert reports, output.decode(errors="replace")[-2000:]
    with reports[0].open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


async def test_every_profile_passes_the_dmtf_protocol_validator(tmp_path: Path) -> None:
    hosts = [Host(id=f"h-{profile}", bmc=BMC(profile=profile)) for profile in HOST_BMC_PROFILES]
    hosts[0].dpus.append(DPU(id="dpu-bf3"))
    bmc_ids = [h.id for h in hosts] + ["dpu-bf3"]
    async with serve_bmcs(Site(hosts=hosts), timings=timings_for("zero"), tls_everywhere=True) as sim:
        ca = str(sim.bmcs.ca_path)
        results = await asyncio.gather(
            *(_validate(sim.base(b), *sim.credentials[b], ca, tmp_path / b) for b in bmc_ids)
        )
    failures: dict[str, list[str]] = {}
    for bmc_id, rows in zip(bmc_ids, results, strict=True):
        assert sum(1 for r in rows if r["Result"] == "PASS") > 150, bmc_id  # the run really happened
        failed = sorted({r["Assertion"] for r in rows if r["Result"] == "FAIL"})
        allowed = NO_SESSION_SERVICE if bmc_id == "h-basic-only" else frozenset()
        unexpected = [f"{a}: {r['Message']}" for r in rows if r["Result"] == "FAIL" for a in [r["Assertion"]]
                      if a not in allowed]  # fmt: skip
        if unexpected:
            failures[bmc_id] = unexpected
        print(bmc_id, "FAIL:", failed)
    assert failures == {}
