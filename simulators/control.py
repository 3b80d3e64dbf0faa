"""The simulator's own API under `/sim/`: health, violations, power logs, site, fault injection.

Read by `metalflow sim violations|power-log` and by tests; the fault injection endpoints let an
operator rehearse failures (a BMC that rejects the credentials or cannot be reached, a DPU in
`Error` or whose install fails, a DPU service down, a PodGang that never comes up, a Kubernetes
API outage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from simulators.dpf.model import LABEL_DPUDEVICE

if TYPE_CHECKING:
    from simulators.app import SimulatedSite

SITE_KEY: web.AppKey[SimulatedSite] = web.AppKey("simulated_site")


def add_control_routes(app: web.Application, site: SimulatedSite) -> None:
    app[SITE_KEY] = site
    app.router.add_get("/sim/health", _health)
    app.router.add_get("/sim/site", _site)
    app.router.add_get("/sim/violations", _violations)
    app.router.add_get("/sim/audit", _audit)
    app.router.add_get("/sim/hosts/{host_id}/power-log", _power_log)
    app.router.add_get("/sim/requests", _requests)
    app.router.add_get("/sim/timeline", _timeline)
    app.router.add_get("/sim/bmcs/{bmc_id}/load", _bmc_load)
    app.router.add_get("/sim/bmcs/{bmc_id}/requests", _bmc_requests)
    app.router.add_post("/sim/faults/dpus/{name}/{fault}", _dpu_fault)
    app.router.add_post("/sim/faults/dpu-bmcs/{dpu}/{fault}", _dpu_bmc_fault)
    app.router.add_post("/sim/faults/bmcs/{bmc_id}/{fault}", _bmc_fault)
    app.router.add_get("/sim/bmcs/{bmc_id}/faults", _bmc_faults)
    app.router.add_get("/sim/dpu-bmcs/{dpu}", _dpu_bmc)
    app.router.add_post("/sim/faults/podgangs/{name}/{fault}", _podgang_fault)
    app.router.add_post("/sim/faults/api/outage", _api_outage)
    app.router.add_post("/sim/faults/api/drop-watches", _drop_watches)
    app.router.add_post("/sim/faults/api/hold-writes", _hold_writes)
    app.router.add_get("/sim/faults/api/hold-writes", _hold_writes)
    app.router.add_get("/sim/sessions", _sessions)
    app.router.add_post("/sim/faults/api/restart", _api_restart)
    app.router.add_post("/sim/faults/api/compact", _api_compact)
    app.router.add_get("/sim/kube/watches", _open_watches)


def _problem(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _health(request: web.Request) -> web.Response:
    site = request.app[SITE_KEY]
    return web.json_response(
        {
            "status": "ok",
            "hosts": len(site.site.hosts),
            "faults": site.options.faults,
            "violations": len(site.violations),
        }
    )


async def _site(request: web.Request) -> web.Response:
    return web.json_response(request.app[SITE_KEY].site.model_dump(mode="json", exclude_none=True))


async def _audit(request: web.Request) -> web.Response:
    """RBAC decisions per user, verb, group and resource (see `simulators.kube.rbac`)."""
    return web.json_response(request.app[SITE_KEY].auth.audit_json())


async def _requests(request: web.Request) -> web.Response:
    """Requests per API and client (`simulators.measure`)."""
    return web.json_response(request.app[SITE_KEY].request_counts.as_json())


async def _timeline(request: web.Request) -> web.Response:
    """Reboots DPF asked for and resets the BMCs accepted, with the simulator's clock."""
    return web.json_response(request.app[SITE_KEY].timeline.as_json())


async def _violations(request: web.Request) -> web.Response:
    return web.json_response(request.app[SITE_KEY].violations.as_json())


async def _power_log(request: web.Request) -> web.Response:
    site = request.app[SITE_KEY]
    host_id = request.match_info["host_id"]
    if host_id not in {h.id for h in site.site.hosts}:
        return _problem(404, f"no host {host_id!r} in site {site.site.name!r}")
    return web.json_response(site.bmcs.power_log(host_id))


async def _bmc_load(request: web.Request) -> web.Response:
    """The BMC's peaks (see `BMCs.load`); a host's id names its (possibly shared) BMC."""
    site = request.app[SITE_KEY]
    bmc_id = request.match_info["bmc_id"]
    if bmc_id not in site.bmcs.bmc_ids():
        return _problem(404, f"no BMC {bmc_id!r} in site {site.site.name!r}")
    return web.json_response(site.bmcs.load(bmc_id))


async def _bmc_requests(request: web.Request) -> web.Response:
    """Every request the BMC answered, per `METHOD path` (see `BMCs.requests`)."""
    site = request.app[SITE_KEY]
    bmc_id = request.match_info["bmc_id"]
    if bmc_id not in site.bmcs.bmc_ids():
        return _problem(404, f"no BMC {bmc_id!r} in site {site.site.name!r}")
    return web.json_response(site.bmcs.requests(bmc_id))


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        data = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(
            text='{"error": "body is not JSON"}', content_type="application/json"
        ) from None
    return data if isinstance(data, dict) else {}


async def _dpu_fault(request: web.Request) -> web.Response:
    site = request.app[SITE_KEY]
    name, fault = _dpu_object(site, request.match_info["name"]), request.match_info["fault"]
    body = await _body(request)
    try:
        if fault == "error" and "reason" not in body:
            await site.dpf.inject_error(name, str(body.get("message", "injected by the simulator")))
        elif fault == "node-effect":
            await site.dpf.inject_node_effect(name)
        elif fault == "recover":
            await site.dpf.recover(name)
        else:
            await site.dpf.inject(name, fault, body)
    except LookupError as err:
        if not isinstance(err, KeyError):
            return _problem(404, str(err))
        return _problem(404, f"no DPU {err.args[0]!r}")
    except TypeError as err:  # the fault's body is wrong: nothing was changed
        return _problem(400, str(err))
    except ValueError as err:
        return _problem(409, str(err))
    return web.json_response({"dpu": request.match_info["name"], "object": name, "fault": fault})


async def _dpu_bmc_fault(request: web.Request) -> web.Response:
    """`paused` (the DPU stuck in its UEFI shell) or `reset` (its Arm reset by someone else)."""
    site, dpu, fault = request.app[SITE_KEY], request.match_info["dpu"], request.match_info["fault"]
    try:
        site.bmcs.dpu_fault(dpu, fault)
    except KeyError:
        return _problem(404, f"no DPU BMC {dpu!r}")
    except LookupError as err:
        return _problem(404, str(err))
    return web.json_response({"dpu": dpu, "fault": fault})


async def _bmc_fault(request: web.Request) -> web.Response:
    """A named fault of a host's or DPU's BMC (`BMCs.bmc_fault`): wrong-credentials,
    rotate-after-forceoff, unreachable, power-on-during-power-down, power-off-at-rest, or clear;
    answers the BMC's faults in force after it."""
    site, bmc_id, fault = request.app[SITE_KEY], request.match_info["bmc_id"], request.match_info["fault"]
    try:
        return web.json_response(await site.bmcs.bmc_fault(bmc_id, fault))
    except KeyError:
        return _problem(404, f"no BMC {bmc_id!r} in site {site.site.name!r}")
    except LookupError as err:
        return _problem(404, str(err))
    except ValueError as err:  # power-off-at-rest of a host not On at rest: nothing changed
        return _problem(409, str(err))


async def _bmc_faults(request: web.Request) -> web.Response:
    site, bmc_id = request.app[SITE_KEY], request.match_info["bmc_id"]
    try:
        return web.json_response(site.bmcs.bmc_faults(bmc_id))
    except KeyError:
        return _problem(404, f"no BMC {bmc_id!r} in site {site.site.name!r}")


async def _dpu_bmc(request: web.Request) -> web.Response:
    site, dpu = request.app[SITE_KEY], request.match_info["dpu"]
    try:
        return web.json_response(site.bmcs.dpu_state(dpu))
    except KeyError:
        return _problem(404, f"no DPU BMC {dpu!r}")


def _dpu_object(site: SimulatedSite, name: str) -> str:
    """The DPU object's name for `name`: that name, or the short DPU id every metalflow command
    takes (`host-001-dpu-0`, the DPU of DPUDevice `device-host-001-dpu-0`)."""
    items, _ = site.store.list(site.dpf.client.dpu, site.dpf.client.namespace)
    for obj in items:
        meta = obj["metadata"]
        if meta["name"] == name or (meta.get("labels") or {}).get(LABEL_DPUDEVICE) == f"device-{name}":
            return str(meta["name"])
    return name  # unknown: the fault says "no DPU"


async def _api_outage(request: web.Request) -> web.Response:
    """`{"down": true}`: every Kubernetes API request (watches already open stay open, idle)
    answers 503 until `{"down": false}`. The BMCs and this control API are not affected."""
    body = await _body(request)
    down = body.get("down")
    if not isinstance(down, bool):
        return _problem(400, 'body must be {"down": true} or {"down": false}')
    request.app[SITE_KEY].faults.api_down = down
    return web.json_response({"api": "down" if down else "up"})


async def _hold_writes(request: web.Request) -> web.Response:
    """`{"next": N}`: the next N Kubernetes API writes are accepted and not answered until
    `{"next": 0}`, which answers every held write (each is then served as usual). A GET (or a POST
    with no body) changes nothing. Answers `{"held": writes held now, "to_hold": writes still to
    hold}`. For rehearsing a slow API: what does a workflow do while its write hangs?"""
    faults = request.app[SITE_KEY].faults
    if request.method == "POST" and request.can_read_body:
        body = await _body(request)
        n = body.get("next")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return _problem(400, 'body must be {"next": N} with N a whole number >= 0 (0 releases)')
        if n == 0:
            faults.release_writes()
        else:
            faults.writes_to_hold = n
    return web.json_response({"held": faults.writes_held, "to_hold": faults.writes_to_hold})


async def _drop_watches(request: web.Request) -> web.Response:
    """Close every open watch of the API's clients at once (they must resume or relist)."""
    return web.json_response({"dropped": request.app[SITE_KEY].kube_api.drop_client_watches()})


async def _sessions(request: web.Request) -> web.Response:
    """Open Redfish sessions per BMC service (a client that never logs out leaves them open)."""
    bmcs = request.app[SITE_KEY].bmcs
    counts = {service: bmcs.open_sessions(service) for service in bmcs.services}
    return web.json_response({service: n for service, n in counts.items() if n})


async def _api_restart(request: web.Request) -> web.Response:
    """The Kubernetes API restarts on a renumbered store: open watches end and every object's
    resourceVersion goes backwards (`Store.restart_renumbered`); the objects stay as they are."""
    rv = request.app[SITE_KEY].store.restart_renumbered()
    return web.json_response({"api": "restarted", "resourceVersion": str(rv)})


async def _api_compact(request: web.Request) -> web.Response:
    """The watch history is compacted and open watches end: resuming watches get 410 Gone."""
    rv = request.app[SITE_KEY].store.compact()
    return web.json_response({"api": "compacted", "resourceVersion": str(rv)})


async def _open_watches(request: web.Request) -> web.Response:
    """Kubernetes watches open now, per resource (the audit counts requests; this counts streams)."""
    return web.json_response(request.app[SITE_KEY].store.open_watches())


async def _podgang_fault(request: web.Request) -> web.Response:
    site = request.app[SITE_KEY]
    name, fault = request.match_info["name"], request.match_info["fault"]
    try:
        if fault == "never-available":
            await site.grove.inject_never_available(name)
        elif fault == "fall-back":
            await site.grove.inject_fall_back(name)
        elif fault == "clear":
            await site.grove.clear_faults(name)
        else:
            return _problem(404, f"unknown PodGang fault {fault!r}; one of never-available, fall-back, clear")
    except KeyError as err:
        return _problem(404, f"no PodGang {err.args[0]!r}")
    return web.json_response({"podgang": name, "fault": fault})
