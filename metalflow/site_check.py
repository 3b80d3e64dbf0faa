"""`metalflow site check`'s reading of the site, and the findings file operations consult.

Reads only (tests/test_site_check.py proves it from the simulated site's request logs):
- every BMC of the site file (host BMCs and DPU BMCs), at most `concurrency` at once, one
  connection (one session) each, given up after `timeout` seconds: the System (GETs: its reset
  types as `find_system` reads them, AllowableValues or ResetActionInfo; `LastResetTime`;
  `BootProgress` on a DPU) and whether the service root links an `UpdateService`;
- DPF: the served OpenAPI v3 schema of `provisioning.dpu.nvidia.com/v1alpha1` (does the DPU
  kind have `status.agentStatus`, `status.rebootStatus`) and of `svc.dpu.nvidia.com/v1alpha1`
  (DPUServiceTemplate `spec.security.privileged`); then every DPU, DPUDevice and DPUDeployment
  (three cluster-wide lists): the trust mode (`trust_mode`), the DPU agents' reboot-method
  discovery (`reboot_discovery`, dpf R4), the DPUDeployments' DPUSet
  strategies, and per DPU BMC whether DPF manages its credentials (`dpf_credentials`; dpf Z1);
- Grove: the resource list of `grove.io/v1alpha1` (PodCliqueSet, PodGangMap served), then every
  PodCliqueSet and PodGangMap (two cluster-wide lists): the PodCliqueSets whose scaling-group
  scale-out stays gated after an OnDelete template change (`gated_podcliquesets`); Grove's
  operator ConfigMap (one list by the chart's labels: its default scheduler profile,
  `grove_default_backend`) and so each PodCliqueSet's backend; where one runs under KAI, KAI's
  SchedulingShards (one list: stale-gang eviction, `kai_eviction`); where one runs under KAI or
  Volcano, Grove's pods (one list by label: those still naming a legacy PodGroup, `pcs_findings`).
  Grove BEHAVIOUR.md K1-K5. What the answers mean: metalflow/site_readings.py (pure).

The findings are kept in the state dir (`site-check.json`, or per other site file:
`findings_path`) and read by `metalflow host ...` at an operation's start (`load_findings`): one
small file, never the site.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Collection
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from contracts.errors import BMCAuthenticationFailed, MetalflowError
from contracts.models.grove import GROVE_GROUP, GROVE_VERSION, PART_OF_LABEL
from contracts.models.inventory import BMCAccess
from contracts.wording import iso_z
from drivers.credentials import CredentialResolver
from drivers.grove import anchor_hashes
from drivers.redfish.client import RedfishClient
from drivers.redfish.system import find_system, parse_time
from drivers.settings import Settings
from drivers.site_file import Site
from drivers.statedir import find_state_dir
from metalflow.site_readings import (
    GROUP_ANNOTATIONS,
    GROVE_CONFIG_SELECTOR,
    PROVISIONING,
    dpf_credentials,
    dpuset_strategies,
    grove_default_backend,
    kai_eviction,
    pcs_backend,
    pcs_findings,
    reboot_discovery,
    trust_mode,
)
from metalflow.site_verdicts import (
    KAI_BACKEND,
    BMCFinding,
    DPFFinding,
    GroveFinding,
    Reason,
    SiteFindings,
    Verdict,
    host_verdict,
)

FINDINGS_FILE = "site-check.json"
STALE_AFTER = timedelta(hours=24)  # an operation says that a check older than this is old
CLOCK_SLACK = timedelta(minutes=5)  # a check stamped later than now by more: a clock is off


def site_in_use() -> Path:
    """The site file operations use, as the settings name it (METALFLOW_SITE_FILE, else the
    state dir's site.yaml), without reading the rest of the settings."""
    named = os.environ.get("METALFLOW_SITE_FILE")
    return Path(named) if named else find_state_dir()[0] / "site.yaml"


def findings_path(site_file: Path | None = None) -> Path:
    """Where the findings of `site_file` (None: the site in use) are kept, in the state dir
    (`find_state_dir`): `site-check.json` for the state dir's own site.yaml, and
    `site-check-<12 hex of the sha256 of its absolute path>.json` for any other site file, so a
    check of another site never replaces the findings of the site in use."""
    return _kept_in(find_state_dir()[0], site_file or site_in_use())


def _kept_in(state: Path, site_file: Path) -> Path:
    site = site_file.absolute()
    if site == (state / "site.yaml").absolute():
        return state / FINDINGS_FILE
    return state / f"site-check-{hashlib.sha256(str(site).encode()).hexdigest()[:12]}.json"


def digest(site_file: Path) -> str:
    """The sha256 of the site file's content ("" when it cannot be read)."""
    try:
        return hashlib.sha256(site_file.read_bytes()).hexdigest()
    except OSError:
        return ""


def save_findings(path: Path, findings: SiteFindings) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(findings.to_json(), indent=2) + "\n")
    os.replace(temporary, path)


class FindingsUnreadable(Exception):
    """The kept findings exist but cannot be read (truncated, corrupt, unreadable): an operation
    is refused rather than run as if no check was kept (a gate that fails open protects nothing)."""


def load_findings(path: Path) -> SiteFindings | None:
    """The last check's findings, or None when no check was kept; `FindingsUnreadable` when the
    file is there but cannot be read."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise FindingsUnreadable(f"{path}: {err.strerror or err}") from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):  # valid JSON, but not the object a check keeps
            raise TypeError(f"a JSON {type(data).__name__}, not the object a site check keeps")
        findings = SiteFindings.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise FindingsUnreadable(f"{path}: {type(err).__name__}: {err}"[:300]) from None
    if parse_time(findings.checked_at) is None:  # its age could not be told: never taken as fresh
        raise FindingsUnreadable(
            f"{path}: checked_at {findings.checked_at[:40]!r} is not a time (a check keeps an ISO 8601 "
            "UTC time, e.g. 2026-11-29T07:00:00Z)"
        )
    if findings.site_file and (other := _other_site(path, findings)) is not None:
        raise FindingsUnreadable(f"{path}: {other}")
    return findings


def _other_site(path: Path, findings: SiteFindings) -> str | None:
    """Why findings kept at `path` are another site's (None: its own): kept for another site
    file (copied here), or naming another site than the site file they were made of (as it was
    then: one changed since is said as changed)."""
    checked = Path(findings.site_file)
    if _kept_in(path.parent, checked).absolute() != path.absolute():
        return f"the findings of the site file {checked}, not of the one this file is kept for"
    if findings.site_digest != digest(checked):
        return None  # changed since (or unreadable): an operation says the site file changed
    try:
        import yaml

        named = (yaml.safe_load(checked.read_text()) or {}).get("name", "site")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    if str(named) != findings.site:
        return f"the findings name site {findings.site[:60]!r}, but {checked} is site {str(named)[:60]!r}"
    return None


CLIP_HEAD, CLIP_TAIL = 160, 240  # an error's first line kept: its start and its end


def clip(text: str) -> str:
    """An error's first line, its middle cut when long: the start names the BMC and the request,
    the end what to do (`check the credentials in file /path/...`), so both are kept."""
    line = (text.splitlines() or [""])[0]
    if len(line) <= CLIP_HEAD + CLIP_TAIL + 5:
        return line
    return f"{line[:CLIP_HEAD]} ... {line[-CLIP_TAIL:]}"


async def _read_bmc(client: RedfishClient, access: BMCAccess, host_id: str, dpu: str | None,
                    timeout: float) -> BMCFinding:  # fmt: skip
    base: dict[str, Any] = {"bmc_id": access.bmc_id, "host_id": host_id, "dpu": dpu}
    try:
        async with asyncio.timeout(timeout), client.connect(access) as connection:
            system = await find_system(connection)
            # BootProgress is not in `System`: read the DPU's System once more (a host's: no).
            body = await connection.get(system.uri) if dpu is not None else {}
            root = await connection.service_root()
            return BMCFinding(
                **base,
                reset_types=system.allowed,
                last_reset_time=bool(system.last_reset_time),
                boot_progress=isinstance(body.get("BootProgress"), dict),
                update_service=isinstance(root.get("UpdateService"), dict),
            )
    except BMCAuthenticationFailed as err:
        return BMCFinding(**base, credentials_ok=False, error=clip(err.message))
    except TimeoutError:
        return BMCFinding(**base, reachable=False, error=f"no answer within {timeout:g} s")
    except MetalflowError as err:
        return BMCFinding(**base, reachable=False, error=clip(f"{type(err).__name__}: {err.message}"))
    except Exception as err:  # noqa: BLE001 - one BMC's failure is a finding, never the check's end
        return BMCFinding(**base, reachable=False, error=clip(f"{type(err).__name__}: {err}"))


async def read_bmcs(
    settings: Settings, site: Site, *, concurrency: int, timeout: float
) -> tuple[BMCFinding, ...]:
    """Every host and DPU BMC of `site`, `concurrency` at a time."""
    from drivers.inventory import host_from_site

    client = RedfishClient(
        CredentialResolver(settings.kubeconfig), max_in_flight=1, timeout_seconds=min(timeout, 10.0)
    )
    gate = asyncio.Semaphore(concurrency)
    jobs: list[tuple[BMCAccess, str, str | None]] = []
    for site_host in site.hosts:
        host = host_from_site(site, settings.site_file, site_host.id, settings.dpf_namespace)
        jobs.append((host.bmc, host.host_id, None))
        jobs += [(d.bmc, host.host_id, d.id) for d in host.dpus if d.bmc is not None]

    async def one(access: BMCAccess, host_id: str, dpu: str | None) -> BMCFinding:
        async with gate:
            return await _read_bmc(client, access, host_id, dpu, timeout)

    try:
        return tuple(await asyncio.gather(*(one(*job) for job in jobs)))
    finally:
        await client.aclose()


def _get(settings: Settings, path: str) -> Any:
    """One GET of the cluster's API at `path` (the caller's thread), the JSON answer."""
    from kubernetes import client as k8s

    from drivers.kube import load_configuration

    api: Any = k8s.ApiClient(load_configuration(settings))
    try:
        method, url, headers, body, _ = api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        response: Any = api.call_api(
            method, url, header_params=headers, body=body, _request_timeout=(5.0, 30.0)
        )
        response.read()
        if not 200 <= response.status < 300:
            raise k8s.ApiException(http_resp=response)
        return json.loads(response.data)
    finally:
        api.close()


def _schema(doc: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for name, schema in ((doc.get("components") or {}).get("schemas") or {}).items():
        if name.endswith(f".{kind}") and isinstance(schema, dict):
            return schema
    return None


def _props(schema: dict[str, Any] | None, *path: str) -> dict[str, Any]:
    node: Any = schema or {}
    for part in path:
        node = ((node or {}).get("properties") or {}).get(part) if isinstance(node, dict) else None
    return (node or {}).get("properties") or {} if isinstance(node, dict) else {}


def _status_of(err: Exception) -> int | None:
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None


async def read_dpf(settings: Settings) -> DPFFinding:
    try:
        doc = await asyncio.to_thread(_get, settings, "/openapi/v3/apis/provisioning.dpu.nvidia.com/v1alpha1")
    except Exception as err:  # noqa: BLE001 - a finding
        if (answered := _status_of(err)) == 404:
            return DPFFinding(dpu_served=False)
        unreachable = answered is None or answered >= 500  # none: no HTTP answer (refused, timed out)
        return DPFFinding(readable=False, error=clip(f"{type(err).__name__}: {err}"), unreachable=unreachable)
    dpu = _schema(doc, "DPU")
    if dpu is None:
        return DPFFinding(dpu_served=False)
    status = _props(dpu, "status")
    version = "26" if "rebootStatus" in status else "26.4-rc.3" if "agentStatus" in status else "25.10"
    privileged = False
    try:
        svc = await asyncio.to_thread(_get, settings, "/openapi/v3/apis/svc.dpu.nvidia.com/v1alpha1")
        privileged = "privileged" in _props(_schema(svc, "DPUServiceTemplate"), "spec", "security")
    except Exception:  # noqa: BLE001, S110 - no svc group: nothing to say about templates
        pass
    return DPFFinding(version=version, template_privileged=privileged)


async def read_dpf_objects(
    settings: Settings,
) -> tuple[str, str, tuple[str, ...], list[dict[str, Any]], str]:
    """(trust mode, why, DPUDeployment strategies, DPUDevices, the agents' reboot-method
    discovery): three lists; one that fails leaves its part unknown (a finding, never the check's
    end)."""

    async def items(path: str) -> list[dict[str, Any]] | str:
        try:
            return list((await asyncio.to_thread(_get, settings, path)).get("items") or [])
        except Exception as err:  # noqa: BLE001 - a finding
            return clip(f"{type(err).__name__}: {err}")

    dpus, devices, deployments = await asyncio.gather(
        items(f"{PROVISIONING}/dpus"),
        items(f"{PROVISIONING}/dpudevices"),
        items("/apis/svc.dpu.nvidia.com/v1alpha1/dpudeployments"),
    )
    mode, detail = trust_mode(dpus) if isinstance(dpus, list) else ("", f"DPUs not read: {dpus}")
    strategies = dpuset_strategies(deployments) if isinstance(deployments, list) else ()
    discovery = reboot_discovery(dpus) if isinstance(dpus, list) else ""
    return mode, detail, strategies, devices if isinstance(devices, list) else [], discovery


def gated_podcliquesets(pcs_items: list[dict[str, Any]], maps: list[dict[str, Any]]) -> tuple[str, ...]:
    """`namespace/name (replicas r, ...)` of each PodCliqueSet with scaling groups some of whose
    replicas' PodGangMap anchors carry another hash than its current one: a scaling-group
    scale-out there stays gated (simulators/grove/BEHAVIOUR.md G5; the rollout's own warning,
    workflows/rollout/views.py `gated_scale_out`, reads the same)."""
    by_pcs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for m in maps:
        meta = m.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(PART_OF_LABEL)
        if owner:
            by_pcs.setdefault((str(meta.get("namespace", "")), str(owner)), []).append(m)
    out = []
    for pcs in pcs_items:
        meta = pcs.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        groups = ((pcs.get("spec") or {}).get("template") or {}).get("podCliqueScalingGroups") or []
        current = str((pcs.get("status") or {}).get("currentGenerationHash") or "")
        if not groups or not current:
            continue
        anchors = anchor_hashes(by_pcs.get((ns, name), []))
        replicas = [r for r, h in anchors.items() if h and h != current]
        if replicas:
            out.append(f"{ns}/{name} (replica(s) {', '.join(map(str, replicas))})")
    return tuple(sorted(out))


async def _read_scheduling(settings: Settings, pcs_items: list[dict[str, Any]]) -> dict[str, Any]:
    """The scheduling half of the Grove finding (grove K1-K5): a read that fails is a finding
    (the backend or the eviction unknown, and why), never the check's end."""
    from urllib.parse import quote

    def why(err: Exception) -> str:
        return clip(f"{type(err).__name__}: {err}")

    try:
        cms = await asyncio.to_thread(
            _get, settings, f"/api/v1/configmaps?labelSelector={quote(GROVE_CONFIG_SELECTOR, safe='=,')}"
        )
        default, backend_detail = grove_default_backend(cms.get("items") or [])
    except Exception as err:  # noqa: BLE001 - a finding
        default, backend_detail = "", f"cannot list Grove's operator ConfigMaps: {why(err)}"
    backends = {pcs_backend(p, default) for p in pcs_items} | {default}
    eviction, eviction_detail = "", ""
    if KAI_BACKEND in backends:
        try:
            shards = await asyncio.to_thread(_get, settings, "/apis/kai.scheduler/v1/schedulingshards")
            eviction, eviction_detail = kai_eviction(shards.get("items") or [])
        except Exception as err:  # noqa: BLE001 - a finding
            eviction, eviction_detail = "unknown", f"cannot list KAI SchedulingShards: {why(err)}"
    pods: list[dict[str, Any]] = []
    if backends & set(GROUP_ANNOTATIONS):
        selector = quote("app.kubernetes.io/managed-by=grove-operator", safe="=")
        try:
            pods = (await asyncio.to_thread(_get, settings, f"/api/v1/pods?labelSelector={selector}")).get(
                "items"
            ) or []
        except Exception as err:  # noqa: BLE001 - a finding
            backend_detail += f"; Grove's pods not read ({why(err)}): legacy PodGroups not checked"
    return {
        "default_backend": default,
        "backend_detail": backend_detail,
        "kai_eviction": eviction,
        "kai_detail": eviction_detail,
        "podcliquesets": pcs_findings(pcs_items, default, pods),
    }


async def read_grove(settings: Settings) -> GroveFinding:
    base = f"/apis/{GROVE_GROUP}/{GROVE_VERSION}"
    try:
        listed = await asyncio.to_thread(_get, settings, base)
    except Exception as err:  # noqa: BLE001 - a finding
        if _status_of(err) == 404:
            return GroveFinding(pcs_served=False, podgangmap_served=False)
        return GroveFinding(readable=False, error=clip(f"{type(err).__name__}: {err}"))
    served = {r.get("name") for r in listed.get("resources") or [] if isinstance(r, dict)}
    found = GroveFinding(pcs_served="podcliquesets" in served, podgangmap_served="podgangmaps" in served)
    if not (found.pcs_served and found.podgangmap_served):
        return found
    try:  # two cluster-wide lists (reads): every PodCliqueSet and every PodGangMap
        pcs_items, maps = await asyncio.gather(
            asyncio.to_thread(_get, settings, f"{base}/podcliquesets"),
            asyncio.to_thread(_get, settings, f"{base}/podgangmaps"),
        )
    except Exception as err:  # noqa: BLE001 - a finding
        return GroveFinding(readable=False, error=clip(f"{type(err).__name__}: {err}"))
    gated = gated_podcliquesets(pcs_items.get("items") or [], maps.get("items") or [])
    return GroveFinding(gated=gated, **await _read_scheduling(settings, pcs_items.get("items") or []))


async def check_site(settings: Settings, site: Site, *, concurrency: int, timeout: float) -> SiteFindings:
    """Read the whole site once: BMCs, DPF and Grove at the same time."""
    bmcs, dpf, grove, (mode, detail, strategies, devices, discovery) = await asyncio.gather(
        read_bmcs(settings, site, concurrency=concurrency, timeout=timeout),
        read_dpf(settings),
        read_grove(settings),
        read_dpf_objects(settings),
    )
    if dpf.readable and dpf.dpu_served:
        dpf = replace(
            dpf, trust_mode=mode, trust_detail=detail, strategies=strategies, reboot_discovery=discovery
        )
        bmcs = _with_dpf_credentials(settings, site, bmcs, mode, devices)
    return SiteFindings(
        site=site.name,
        checked_at=iso_z(datetime.now(UTC)),
        bmcs=bmcs,
        dpf=dpf,
        grove=grove,
        site_file=str(settings.site_file.absolute()),
        site_digest=digest(settings.site_file),
    )


def _with_dpf_credentials(
    settings: Settings, site: Site, bmcs: tuple[BMCFinding, ...], mode: str, devices: list[dict[str, Any]]
) -> tuple[BMCFinding, ...]:
    """Each DPU BMC finding with who holds its credentials (dpf Z1)."""
    from urllib.parse import urlsplit

    from drivers.inventory import host_from_site

    dpus = {}
    for site_host in site.hosts:
        host = host_from_site(site, settings.site_file, site_host.id, settings.dpf_namespace)
        dpus.update({d.id: d for d in host.dpus})
    out = []
    for bmc in bmcs:
        dpu = dpus.get(bmc.dpu or "")
        if dpu is None:
            out.append(bmc)
            continue
        by, how = dpf_credentials(
            devices, mode, device_name=dpu.dpu_device_name(), serial=dpu.serial,
            bmc_host=urlsplit(dpu.bmc.endpoint).hostname or "" if dpu.bmc else "",
        )  # fmt: skip
        out.append(replace(bmc, credentials_by=by, dpf_credentials=how))
    return tuple(out)


def consult(
    host_id: str | None,
    capability: str | None,
    path: Path | None = None,
    *,
    pcs: str | None = None,
    dpus: Collection[str] | None = None,
    manual_reboot: bool = False,
) -> tuple[Verdict, SiteFindings] | None:
    """The kept verdict of `capability` for `host_id` (None: the site's own rules only, for a
    rollout or a campaign; a rollout's for PodCliqueSet `pcs`, `namespace/name`; on the host, the
    components the operation touches: `dpus` and `manual_reboot` as `host_verdict` takes them) and
    when it was checked, or None: no capability, or no check kept (an operation then runs as
    before). One small file read."""
    if capability is None:
        return None
    findings = load_findings(path or findings_path())
    if findings is None:
        return None
    verdict = host_verdict(findings, host_id, capability, pcs=pcs, dpus=dpus, manual_reboot=manual_reboot)
    return verdict, findings


def said_line(reason: Reason) -> str:
    """A reason as an operation says it: its words and its behaviour rows."""
    return reason.text + (f" [{', '.join(reason.rows)}]" if reason.rows else "")


def consult_words(
    host_id: str | None,
    capability: str | None,
    path: Path | None = None,
    now: datetime | None = None,
    *,
    pcs: str | None = None,
    dpus: Collection[str] | None = None,
    manual_reboot: bool = False,
) -> tuple[bool, list[str]]:
    """(refuse?, lines to say) for an operation on `host_id` needing `capability`. A check older
    than `STALE_AFTER` is still obeyed, and said to be old (run it again: the site may have moved)."""
    try:
        found = consult(host_id, capability, path, pcs=pcs, dpus=dpus, manual_reboot=manual_reboot)
    except FindingsUnreadable as err:
        return True, [
            f"the kept site check cannot be read ({err}): nothing was started; run `metalflow site "
            "check` again to keep new findings"
        ]
    if found is None:
        return False, []
    verdict, findings = found
    checked_at = findings.checked_at
    age = (now or datetime.now(UTC)) - (parse_time(checked_at) or datetime.now(UTC))
    hours = f"{age.total_seconds() / 3600:.0f} h old"
    stale = (
        [f"the site check of {checked_at} is {hours}: run `metalflow site check`"]
        if age > STALE_AFTER
        else []
    )
    if -age > CLOCK_SLACK:  # made "later" than now: a clock is off, and its age cannot be told
        stale.append(
            f"the site check of {checked_at} is {-age.total_seconds() / 3600:.1f} h in the future: this "
            "machine's clock or that of the machine that ran the check is off, so how old the "
            "findings are cannot be told; set the clock right and run `metalflow site check`"
        )
    if (
        host_id is not None
        and findings.site_digest
        and findings.site_digest != digest(Path(findings.site_file))
    ):
        stale.append(
            f"the site file {findings.site_file} changed since the site check of {checked_at} (hosts or "
            "BMCs changed since are judged as the check saw them): run `metalflow site check`"
        )
    if verdict.status == "ready":
        return False, stale
    lines = [said_line(r) for r in verdict.reasons if r.status == verdict.status]
    where = host_id or pcs or "the site"
    head = f"{verdict.capability} is {verdict.status} on {where} by the site check of {checked_at}" + (
        " (run `metalflow site check` again once fixed)" if verdict.status == "blocked" else ""
    )
    return verdict.status == "blocked", [head, *lines, *stale]
