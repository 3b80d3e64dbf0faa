"""The site file is validated as a whole (drivers/site_file.py), and unknown things are refused
before anything is sent: a table of bad site files through the real loader (in one process) and
through `metalflow bmc check` / `metalflow host ...` (subprocesses: exit status, first line,
nothing changed: no entity workflow, no connection to a BMC), the worker's reload keeping the last
valid file, and the host CLI's inventory check against a real dev server.

Every BMC endpoint in these files is a listener of the test's own that counts connections, so
"no BMC request" is observed, not assumed."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import METALFLOW, command_env, entity_exists, run_console_script, run_in_few_processes
from temporalio.client import Client

from contracts.errors import InvalidInput
from drivers.inventory import Inventory, bmc_from_site
from drivers.settings import Settings
from drivers.site_file import SiteFileCache, SiteFileError, load_site


class CountingBMC:
    """A TCP listener standing in for every BMC: it only counts who connects."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def bmc() -> AsyncIterator[CountingBMC]:
    counting = CountingBMC()
    counting.server = await asyncio.start_server(counting._accept, "127.0.0.1", 0)
    try:
        yield counting
    finally:
        counting.server.close()


def good_site(endpoint: str) -> dict[str, Any]:
    """Two hosts with two DPUs each, every BMC at `endpoint`."""

    def bmc() -> dict[str, Any]:
        return {"endpoint": endpoint, "credentials": {"file": "/nonexistent/creds.json"}}

    return {
        "name": "lab",
        "hosts": [
            {
                "id": f"host-00{n}",
                "bmc": bmc(),
                "dpus": [{"id": f"host-00{n}-dpu-{d}", "model": "BF3", "bmc": bmc()} for d in (0, 1)],
            }
            for n in (1, 2)
        ],
    }


def _edit(change: Any) -> Any:
    def apply(site: dict[str, Any]) -> dict[str, Any]:
        site = copy.deepcopy(site)
        change(site)
        return site

    return apply


def _set(site: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = site
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    node[int(last) if last.isdigit() else last] = value


def _pop(site: dict[str, Any], path: str) -> None:
    *parents, last = path.split(".")
    node: Any = site
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    del node[last]


# (what is wrong, the edit of a good site, the problem lines the loader must report)
BAD_SITES: list[tuple[str, Any, list[str]]] = [
    ("duplicate host id", _edit(lambda s: _set(s, "hosts.1.id", "host-001")),
     ["hosts[1].id: duplicate host id 'host-001' (also hosts[0])"]),
    ("DPU under two hosts", _edit(lambda s: _set(s, "hosts.1.dpus.0.id", "host-001-dpu-0")),
     ["hosts[1].dpus[0].id: DPU 'host-001-dpu-0' is also under another host (hosts[0].dpus[0])"]),
    ("DPU twice under one host", _edit(lambda s: _set(s, "hosts.0.dpus.1.id", "host-001-dpu-0")),
     ["hosts[0].dpus[1].id: DPU 'host-001-dpu-0' is listed twice under this host (also hosts[0].dpus[0])"]),
    ("DPU id that is a host id", _edit(lambda s: _set(s, "hosts.0.dpus.1.id", "host-002")),
     ["hosts[0].dpus[1].id: DPU id 'host-002' is also a host id"]),
    ("mistyped credentials", _edit(lambda s: s["hosts"][0]["bmc"].update(
        credentails=s["hosts"][0]["bmc"].pop("credentials"))),
     ["hosts[0].bmc.credentials: missing", "hosts[0].bmc.credentails: unknown key (a typo?)"]),
    ("unknown host key", _edit(lambda s: _set(s, "hosts.1.rack", "r01")),
     ["hosts[1].rack: unknown key (a typo?)"]),
    ("unknown top-level key", _edit(lambda s: _set(s, "hostz", [])), ["hostz: unknown key (a typo?)"]),
    ("unknown DPU model", _edit(lambda s: _set(s, "hosts.1.dpus.1.model", "BF9")),
     ["hosts[1].dpus[1].model: unknown DPU model 'BF9': use one of BF3, BF4"]),
    ("ftp endpoint", _edit(lambda s: _set(s, "hosts.0.bmc.endpoint", "ftp://10.0.0.1")),
     ["hosts[0].bmc.endpoint: not an http(s) URL of a BMC (e.g. https://10.1.2.42): 'ftp://10.0.0.1'"]),
    ("endpoint without scheme", _edit(lambda s: _set(s, "hosts.0.dpus.0.bmc.endpoint", "10.0.0.1")),
     ["hosts[0].dpus[0].bmc.endpoint: not an http(s) URL of a BMC (e.g. https://10.1.2.42): '10.0.0.1'"]),
    ("endpoint with credentials", _edit(lambda s: _set(s, "hosts.0.bmc.endpoint", "https://u:p@10.0.0.1")),
     ["hosts[0].bmc.endpoint: a BMC endpoint holds no user or password (name them under `credentials`): "
      "'https://[redacted]@10.0.0.1'"]),
    ("bad auth", _edit(lambda s: _set(s, "hosts.1.bmc.auth", "kerberos")),
     ["hosts[1].bmc.auth: 'kerberos' is not one of 'session', 'basic' or 'auto'"]),
    ("two credential sources", _edit(lambda s: _set(s, "hosts.0.bmc.credentials.env",
                                                   {"username": "U", "password": "P"})),
     ["hosts[0].bmc.credentials: a credential reference names exactly one of file, env, secret"]),
    ("no credential source", _edit(lambda s: _set(s, "hosts.0.bmc.credentials", {})),
     ["hosts[0].bmc.credentials: a credential reference names exactly one of file, env, secret"]),
    ("unknown credential key", _edit(lambda s: _set(s, "hosts.0.bmc.credentials.env",
                                                   {"username": "U", "pasword": "P"})),
     ["hosts[0].bmc.credentials.env.password: missing",
      "hosts[0].bmc.credentials.env.pasword: unknown key (a typo?)"]),
    ("host without BMC", _edit(lambda s: _pop(s, "hosts.1.bmc")), ["hosts[1].bmc: missing"]),
    ("host without id", _edit(lambda s: _pop(s, "hosts.0.id")), ["hosts[0].id: missing"]),
    ("hosts not a list", _edit(lambda s: _set(s, "hosts", "host-001")),
     ["hosts: Input should be a valid list"]),
    ("every problem at once", _edit(lambda s: (_set(s, "hosts.1.id", "host-001"),
                                              _set(s, "hosts.0.dpus.0.model", "BF2"),
                                              _set(s, "hosts.1.bmc.endpoint", "file:///etc/passwd"))),
     ["hosts[0].dpus[0].model: unknown DPU model 'BF2': use one of BF3, BF4",
      "hosts[1].bmc.endpoint: not an http(s) URL of a BMC (e.g. https://10.1.2.42): 'file:///etc/passwd'",
      "hosts[1].id: duplicate host id 'host-001' (also hosts[0])"]),
]  # fmt: skip


def _write(path: Path, site: Any) -> Path:
    path.write_text(site if isinstance(site, str) else yaml.safe_dump(site, sort_keys=False))
    return path


def test_the_loader_lists_every_problem_with_its_path(tmp_path: Path) -> None:
    problems = []
    for what, edit, expected in BAD_SITES:
        path = _write(tmp_path / "site.yaml", edit(good_site("http://10.0.0.1")))
        try:
            load_site(path)
        except SiteFileError as err:
            count = len(expected)
            headline = f"the site file {path} is not valid ({count} problem{'s' if count > 1 else ''})"
            if err.problems != expected or err.message.splitlines()[0] != headline:
                problems.append(f"{what}: {err.message!r}")
            if "pydantic" in err.message or "For further information" in err.message:
                problems.append(f"{what}: a pydantic dump: {err.message!r}")
        else:
            problems.append(f"{what}: accepted")
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    ("text", "headline"),
    [
        ("hosts: [\n", "is not YAML at line 2, column 1"),
        ("- just\n- a list\n", "is not a mapping (name, namespace, hosts)"),
    ],
)
def test_a_file_that_is_not_a_site_says_so(tmp_path: Path, text: str, headline: str) -> None:
    path = _write(tmp_path / "site.yaml", text)
    with pytest.raises(SiteFileError) as raised:
        load_site(path)
    assert raised.value.message == f"the site file {path} {headline}" or headline in raised.value.message
    assert raised.value.message.startswith(f"the site file {path} ")


def test_the_simulated_sites_own_keys_are_known(tmp_path: Path) -> None:
    site = good_site("http://10.0.0.1")
    site["workloads"] = [{"name": "inference"}]
    site["hosts"][0]["bmc"] |= {"profile": "multi-system", "group": "g1", "system": "host-001"}
    site["hosts"][0]["dpus"][0] |= {"firmware": "32.43.1014", "serial": "MT1"}
    loaded = load_site(_write(tmp_path / "site.yaml", site))
    assert [h.id for h in loaded.hosts] == ["host-001", "host-002"]


async def test_the_worker_keeps_the_last_valid_site_file_and_takes_a_fixed_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path / "site.yaml", good_site("http://10.0.0.1"))
    inventory = Inventory(Settings(site_file=path))
    assert (await inventory.resolve("host-001")).bmc.endpoint == "http://10.0.0.1"
    _write(path, good_site("http://10.0.0.9"))  # same size, likely the same mtime tick: still seen
    assert (await inventory.resolve("host-001")).bmc.endpoint == "http://10.0.0.9"
    _write(path, good_site("http://10.0.0.1"))
    assert (await inventory.resolve("host-001")).bmc.endpoint == "http://10.0.0.1"

    broken = good_site("http://10.0.0.66")
    broken["hosts"][1]["id"] = "host-001"  # the edit in progress would send host-001 to host-002's BMC
    _write(path, broken)
    with caplog.at_level(logging.ERROR, logger="metalflow.site_file"):
        kept = await inventory.resolve("host-001")
        assert (await inventory.bmc_access("host-002")) is not None
    assert kept.bmc.endpoint == "http://10.0.0.1"
    assert [r.getMessage() for r in caplog.records] == [
        f"the site file {path} is not valid (1 problem): hosts[1].id: duplicate host id 'host-001' "
        "(also hosts[0]); keeping the last valid site file"
    ]

    fixed = good_site("http://10.0.0.2")
    fixed["hosts"].append({**copy.deepcopy(fixed["hosts"][0]), "id": "host-003", "dpus": []})
    _write(path, fixed)
    assert (await inventory.resolve("host-003")).bmc.endpoint == "http://10.0.0.2"
    assert (await inventory.bmc_access("host-001-dpu-1")) is not None

    path.unlink()  # gone: keep serving the last valid content
    assert (await inventory.resolve("host-003")).host_id == "host-003"


def test_bmc_lookup_by_id_finds_hosts_and_dpus(tmp_path: Path) -> None:
    site_dict = good_site("http://10.0.0.1")
    site_dict["hosts"][1]["bmc"]["endpoint"] = "http://10.0.0.2"
    site_dict["hosts"][1]["dpus"][1]["bmc"]["endpoint"] = "http://10.0.0.3"
    del site_dict["hosts"][0]["dpus"][1]["bmc"]
    _write(tmp_path / "site.yaml", site_dict)
    site = load_site(tmp_path / "site.yaml")
    host = bmc_from_site(site, "host-002")
    dpu = bmc_from_site(site, "host-002-dpu-1")
    assert host is not None and host.endpoint == "http://10.0.0.2"
    assert dpu is not None and dpu.endpoint == "http://10.0.0.3"
    assert bmc_from_site(site, "host-001-dpu-1") is None  # a DPU without a BMC of its own
    assert bmc_from_site(site, "host-009") is None


def test_one_cache_per_file_and_check_refuses_a_file_broken_now(tmp_path: Path) -> None:
    path = _write(tmp_path / "site.yaml", good_site("http://10.0.0.1"))
    cache = SiteFileCache.shared(path)
    assert SiteFileCache.shared(tmp_path / "." / "site.yaml") is cache  # the worker's check and inventory
    assert SiteFileCache.shared(tmp_path / "other.yaml") is not cache
    assert len(cache.check().hosts) == 2
    _write(path, "hosts: [{id: h1}]\n")
    assert len(cache.site().hosts) == 2  # operations keep the last valid site
    with pytest.raises(SiteFileError, match=r"is not valid \(1 problem\)"):
        cache.check()  # a worker starting refuses it


def test_a_site_file_never_valid_is_refused(tmp_path: Path) -> None:
    cache = SiteFileCache(tmp_path / "absent.yaml")
    with pytest.raises(SiteFileError, match="cannot read the site file"):
        cache.site()
    _write(cache.path, "hosts: [{id: h1}]\n")
    with pytest.raises(InvalidInput, match=r"is not valid \(1 problem\)"):
        cache.site()


# Subprocess rows: the real entry points refuse a bad site file before touching anything.
ENTRY_ROWS: list[tuple[str, list[str]]] = [
    ("duplicate host id", ["bmc", "check", "host-001", "--site", "{site}"]),
    ("DPU under two hosts", ["bmc", "power", "host-002", "cycle", "--site", "{site}"]),
    ("mistyped credentials", ["host", "provision", "host-001"]),
    ("unknown DPU model", ["host", "reprovision", "host-002", "--dpus", "host-002-dpu-1"]),
    ("bad auth", ["host", "reboot", "host-002"]),
    ("every problem at once", ["host", "assign", "host-001", "inst-1"]),
]


async def test_the_cli_refuses_a_bad_site_file_and_touches_nothing(
    client: Client, tmp_path: Path, bmc: CountingBMC
) -> None:
    began = datetime.now(UTC)
    edits = {what: edit for what, edit, _ in BAD_SITES}
    paths = [
        _write(tmp_path / f"site-{n}.yaml", edits[what](good_site(bmc.endpoint)))
        for n, (what, _) in enumerate(ENTRY_ROWS)
    ]
    outcomes = await run_in_few_processes(
        [
            ([a.replace("{site}", str(path)) for a in args], {"METALFLOW_SITE_FILE": str(path)})
            for (_, args), path in zip(ENTRY_ROWS, paths, strict=True)
        ],
        command_env(client, tmp_path),
        per_process=3,
    )
    problems = []
    for (what, args), (code, out, err), path in zip(ENTRY_ROWS, outcomes, paths, strict=True):
        prog = "metalflow bmc" if args[0] == "bmc" else "metalflow"
        first = err.splitlines()[0] if err else ""
        if code != 2 or out or not first.startswith(f"{prog}: the site file {path} is not valid ("):
            problems.append(f"{what} {args[:2]}: exit {code}, stdout {out!r}, stderr {err!r}")
        if "Traceback" in err:
            problems.append(f"{what}: traceback")
    assert problems == [], "\n".join(problems)
    assert bmc.connections == 0, "a command reached a BMC through a site file it should have refused"
    for host in ("host-001", "host-002"):
        assert not await entity_exists(client, host, since=began)


async def test_unknown_things_are_refused_before_any_workflow_starts(
    client: Client, tmp_path: Path, bmc: CountingBMC
) -> None:
    began = datetime.now(UTC)
    site = _write(tmp_path / "site.yaml", good_site(bmc.endpoint))
    env = command_env(client, tmp_path) | {"METALFLOW_SITE_FILE": str(site)}
    rows: list[tuple[list[str], str]] = [
        (["host", "provision", "host-999"], f"unknown host 'host-999': not in the site file {site}"),
        (["host", "reprovision", "host-999", "--wait"], "unknown host 'host-999'"),
        (["host", "reboot", "host-999"], "unknown host 'host-999'"),
        (["host", "firmware", "host-999", "--version", "1.0", "--image", "https://f.example/x.bfb"],
         "unknown host 'host-999'"),
        (["host", "remove", "host-999"], "unknown host 'host-999'"),
        (["host", "assign", "host-999", "inst-1"], "unknown host 'host-999'"),
        (["host", "release", "host-999", "inst-1"], "unknown host 'host-999'"),
        (["host", "provision", "host-001", "--dpus", "host-002-dpu-0"],
         "host-002-dpu-0 is not a DPU of host-001 (it is a DPU of host-002); "
         "its DPUs: host-001-dpu-0, host-001-dpu-1"),
        (["host", "reprovision", "host-001", "--dpus", "host-001-dpu-0,host-001-dpu-7"],
         "host-001-dpu-7 is not a DPU of host-001; its DPUs: host-001-dpu-0, host-001-dpu-1"),
        (["host", "remove", "host-002", "--dpus", "host-001-dpu-1"],
         "host-001-dpu-1 is not a DPU of host-002"),
        (["host", "firmware", "host-002", "--version", "1.0", "--image", "https://f.example/x.bfb",
          "--dpus", "host-002-dpu-9"], "host-002-dpu-9 is not a DPU of host-002"),
    ]  # fmt: skip
    results = await run_in_few_processes(
        [([*args, "--task-queue", "nobody-polls-this"], {}) for args, _ in rows], env
    )
    problems = []
    # exit 2: an unknown host or DPU (README's exit-status table)
    for (args, words), (code, out, err) in zip(rows, results, strict=True):
        lines = err.splitlines()
        if code != 2 or out or len(lines) != 1 or not lines[0].startswith(f"metalflow: {words}"):
            problems.append(f"{args}: exit {code}, stdout {out!r}, stderr {err!r}")
    assert problems == [], "\n".join(problems)
    for host in ("host-999", "host-001", "host-002"):
        assert not await entity_exists(client, host, since=began), f"a refused request created host/{host}"
    assert bmc.connections == 0

    # The same host and DPUs spelled right pass the check and reach Temporal (nobody polls there).
    code, _, err = await run_console_script(["host", "provision", "host-001", "--dpus", "host-001-dpu-1",
                               "--task-queue", "nobody-polls-this"], env)  # fmt: skip
    assert code == 3 and "no worker polls task queue 'nobody-polls-this'" in err, err


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"METALFLOW_SITE_FILE": "{tmp}/absent.yaml"}, "cannot read the site file {tmp}/absent.yaml"),
        ({"KUBECONFIG": "{tmp}/absent-kubeconfig"},
         "no usable Kubernetes configuration ({tmp}/absent-kubeconfig)"),
        ({"TEMPORAL_CONFIG_FILE": "{tmp}/absent.toml"},
         "cannot read the Temporal config file {tmp}/absent.toml"),
        ({"TEMPORAL_CONFIG_FILE": "{tmp}/bad.toml"},
         "the Temporal config file {tmp}/bad.toml is not valid TOML"),
    ],
)  # fmt: skip
async def test_the_worker_refuses_to_start_without_what_it_needs(
    tmp_path: Path, change: dict[str, str], words: str
) -> None:
    site = _write(tmp_path / "site.yaml", good_site("http://10.0.0.1"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))  # fmt: skip
    (tmp_path / "bad.toml").write_text("[profile.default\naddress = 1\n")
    env = _env_base() | {
        "METALFLOW_SITE_FILE": str(site),
        "KUBECONFIG": str(kubeconfig),
        "TEMPORAL_ADDRESS": "127.0.0.1:9",
    }
    env |= {key: value.replace("{tmp}", str(tmp_path)) for key, value in change.items()}
    # Not worker_support.worker_process: the script's own exit status and stderr are under test,
    # as a user who starts it with a missing file sees them.
    process = await asyncio.create_subprocess_exec(
        str(Path(METALFLOW).parent / "python"), "worker.py", cwd=Path(__file__).resolve().parent.parent,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    lines = err.decode().splitlines()
    assert process.returncode == 2, (out, err)
    expected = f"worker: configuration error: {words.replace('{tmp}', str(tmp_path))}"
    assert len(lines) == 1 and lines[0].startswith(expected), lines


def _env_base() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "METALFLOW_", "KUBE", "OTEL_"))
    }
