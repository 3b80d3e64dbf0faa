"""HTTP layer of the simulated BMCs: one catch-all route, dispatched over the Redfish tree.

Every BMC answers under `/bmc/<bmc-id>/redfish/v1/...`, and every link it returns carries that
prefix. Dispatching here (rather than one aiohttp route per resource) lets unknown resources and
wrong methods get Redfish error bodies (404 `ResourceMissingAtURI`, 405 `OperationNotAllowed`)
instead of aiohttp's plain text.

Per request, in order: find the BMC (404), ask the fault profile (500/503/409, which change
nothing), authenticate (401; the service root and session creation are open), check the method
(405), serve; then hold the response back by the profile's `response_delay("bmc")`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import dpu as dpu_resources
from . import messages
from .dpu import DPUBMC
from .host import HostBMC, apply_patch, check_if_match, etag_of

if TYPE_CHECKING:
    from . import BMCs


@dataclass(slots=True)
class Context:
    """The BMC a request is addressed to."""

    bmc_id: str
    prefix: str
    host: HostBMC | None
    dpu: DPUBMC | None
    request: web.Request
    params: tuple[str, ...]


Handler = Callable[["Redfish", Context], Awaitable[web.Response]]


@dataclass(frozen=True, slots=True)
class Resource:
    pattern: tuple[str, ...]  # "*" matches one path segment
    methods: dict[str, Handler]
    kinds: frozenset[str] = frozenset({"host", "dpu"})
    open_methods: frozenset[str] = frozenset()  # served without authentication
    reset_methods: frozenset[str] = frozenset()  # requests that are resets, for the fault profile


def _collection(uri: str, odata_type: str, name: str, members: list[str]) -> dict[str, Any]:
    return {
        "@odata.id": uri,
        "@odata.type": odata_type,
        "Name": name,
        "Members@odata.count": len(members),
        "Members": [{"@odata.id": member} for member in members],
    }


class Redfish:
    """The request handlers, bound to the BMCs they serve."""

    def __init__(self, bmcs: BMCs) -> None:
        self._bmcs = bmcs

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bmc/{bmc_id}/redfish{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        bmcs = self._bmcs
        bmc_id = request.match_info["bmc_id"]
        host, dpu = bmcs.host_bmc(bmc_id), bmcs.dpu_bmc(bmc_id)
        if host is None and dpu is None:
            return messages.not_found(request.path)
        prefix = f"/bmc/{bmc_id}"
        tail = request.match_info["tail"]
        if tail.strip("/") == "":
            return messages.json_response({"v1": f"{prefix}/redfish/v1/"})
        parts = tuple(tail.strip("/").split("/"))
        if parts[0] != "v1":
            return messages.not_found(request.path)
        found = _match(parts[1:], "host" if host is not None else "dpu")
        is_reset = found is not None and request.method in found[0].reset_methods
        fault = bmcs.faults.bmc_fault(bmc_id, is_reset=is_reset)
        if fault is not None:
            response = messages.fault_response(*fault)
        else:
            response = await self._serve(request, bmc_id, prefix, host, dpu, found)
        delay = bmcs.faults.response_delay("bmc")
        if delay > 0:
            await asyncio.sleep(delay)
        return response

    async def _serve(
        self,
        request: web.Request,
        bmc_id: str,
        prefix: str,
        host: HostBMC | None,
        dpu: DPUBMC | None,
        found: tuple[Resource, tuple[str, ...]] | None,
    ) -> web.Response:
        if found is None or request.method not in found[0].open_methods:
            refusal = self._bmcs.auth.check(bmc_id, request)
            if refusal is not None:
                return refusal
        if found is None:
            return messages.not_found(request.path)
        resource, params = found
        handler = resource.methods.get(request.method)
        if handler is None:
            return messages.method_not_allowed(request.method, sorted(resource.methods))
        return await handler(self, Context(bmc_id, prefix, host, dpu, request, params))

    # -- service root, sessions, tasks (every BMC) ------------------------------------------

    async def service_root(self, ctx: Context) -> web.Response:
        v1 = f"{ctx.prefix}/redfish/v1"
        body: dict[str, Any] = {
            "@odata.id": f"{v1}/",
            "@odata.type": "#ServiceRoot.v1_16_1.ServiceRoot",
            "Id": "RootService",
            "Name": "Root Service",
            "RedfishVersion": "1.17.0",
            "UUID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"metalflow-sim-bmc:{ctx.bmc_id}")),
            "Vendor": ctx.host.profile.manufacturer if ctx.host is not None else "NVIDIA",
            "Systems": {"@odata.id": f"{v1}/Systems"},
            "SessionService": {"@odata.id": f"{v1}/SessionService"},
            "TaskService": {"@odata.id": f"{v1}/TaskService"},
            "Links": {"Sessions": {"@odata.id": f"{v1}/SessionService/Sessions"}},
        }
        if ctx.dpu is not None:
            body["UpdateService"] = {"@odata.id": f"{v1}/UpdateService"}
        return messages.json_response(body)

    async def session_service(self, ctx: Context) -> web.Response:
        v1 = f"{ctx.prefix}/redfish/v1"
        return messages.json_response(
            {
                "@odata.id": f"{v1}/SessionService",
                "@odata.type": "#SessionService.v1_1_9.SessionService",
                "Id": "SessionService",
                "Name": "Session Service",
                "ServiceEnabled": True,
                "SessionTimeout": int(self._bmcs.timings.session_timeout_seconds),
                "Sessions": {"@odata.id": f"{v1}/SessionService/Sessions"},
            }
        )

    async def list_sessions(self, ctx: Context) -> web.Response:
        uri = f"{ctx.prefix}/redfish/v1/SessionService/Sessions"
        members = [f"{uri}/{s.id}" for s in self._bmcs.auth.list(ctx.bmc_id)]
        return messages.json_response(
            _collection(uri, "#SessionCollection.SessionCollection", "Session Collection", members)
        )

    async def create_session(self, ctx: Context) -> web.Response:
        body = messages.read_json_object(await ctx.request.read())
        if body is None:
            return messages.malformed_json()
        for name in ("UserName", "Password"):
            if not isinstance(body.get(name), str):
                return messages.error_response(
                    400,
                    "PropertyMissing",
                    f"The property {name} is a required property and must be included in the request.",
                    args=[name],
                    resolution="Ensure that the property is in the request body and has a valid value.",
                )
        created = self._bmcs.auth.create(ctx.bmc_id, body["UserName"], body["Password"])
        if isinstance(created, web.Response):
            return created
        uri = f"{ctx.prefix}/redfish/v1/SessionService/Sessions/{created.id}"
        return messages.json_response(
            self._session_body(uri, created.id, created.username),
            status=201,
            headers={"X-Auth-Token": created.token, "Location": uri},
        )

    @staticmethod
    def _session_body(uri: str, session_id: str, username: str) -> dict[str, Any]:
        return {
            "@odata.id": uri,
            "@odata.type": "#Session.v1_7_1.Session",
            "Id": session_id,
            "Name": "User Session",
            "UserName": username,
        }

    async def get_session(self, ctx: Context) -> web.Response:
        session = self._bmcs.auth.get(ctx.bmc_id, ctx.params[0])
        if session is None:
            return messages.not_found(ctx.request.path)
        uri = f"{ctx.prefix}/redfish/v1/SessionService/Sessions/{session.id}"
        return messages.json_response(self._session_body(uri, session.id, session.username))

    async def delete_session(self, ctx: Context) -> web.Response:
        if not self._bmcs.auth.delete(ctx.bmc_id, ctx.params[0]):
            return messages.not_found(ctx.request.path)
        return web.Response(status=204, headers={"OData-Version": "4.0"})

    async def task_service(self, ctx: Context) -> web.Response:
        v1 = f"{ctx.prefix}/redfish/v1"
        return messages.json_response(
            {
                "@odata.id": f"{v1}/TaskService",
                "@odata.type": "#TaskService.v1_2_1.TaskService",
                "Id": "TaskService",
                "Name": "Task Service",
                "ServiceEnabled": True,
                "CompletedTaskOverWritePolicy": "Oldest",
                "Tasks": {"@odata.id": f"{v1}/TaskService/Tasks"},
            }
        )

    async def list_tasks(self, ctx: Context) -> web.Response:
        uri = f"{ctx.prefix}/redfish/v1/TaskService/Tasks"
        members = [t.uri for t in self._bmcs.tasks.list(ctx.bmc_id)]
        return messages.json_response(
            _collection(uri, "#TaskCollection.TaskCollection", "Task Collection", members)
        )

    async def get_task(self, ctx: Context) -> web.Response:
        task = self._bmcs.tasks.get(ctx.bmc_id, ctx.params[0])
        if task is None:
            return messages.not_found(ctx.request.path)
        if task.done:
            return messages.json_response(task.body())
        return messages.json_response(
            task.body(), status=202, headers={"Location": task.uri, "Retry-After": "1"}
        )

    # -- systems ------------------------------------------------------------------------------

    async def list_systems(self, ctx: Context) -> web.Response:
        uri = f"{ctx.prefix}/redfish/v1/Systems"
        system_id = ctx.host.profile.system_id if ctx.host is not None else dpu_resources.SYSTEM_ID
        return messages.json_response(
            _collection(
                uri, "#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection",
                [f"{uri}/{system_id}"],
            )
        )  # fmt: skip

    async def get_system(self, ctx: Context) -> web.Response:
        if ctx.dpu is not None:
            if ctx.params[0] != dpu_resources.SYSTEM_ID:
                return messages.not_found(ctx.request.path)
            host_power = self._bmcs.power_state(ctx.dpu.host_id)
            return messages.json_response(dpu_resources.system_body(ctx.dpu, ctx.prefix, host_power))
        host = self._host_system(ctx)
        if host is None:
            return messages.not_found(ctx.request.path)
        body = host.body(ctx.prefix)
        return messages.json_response(body, headers={"ETag": etag_of(host)})

    async def patch_system(self, ctx: Context) -> web.Response:
        host = self._host_system(ctx)
        if host is None:
            if ctx.dpu is not None and ctx.params[0] == dpu_resources.SYSTEM_ID:
                return messages.method_not_allowed("PATCH", ["GET"])
            return messages.not_found(ctx.request.path)
        changes = messages.read_json_object(await ctx.request.read())
        if changes is None:
            return messages.malformed_json()
        refusal = check_if_match(host, ctx.request, etag_of(host))
        if refusal is None:
            refusal = apply_patch(host, changes)
        if refusal is not None:
            return refusal
        body = host.body(ctx.prefix)
        return messages.json_response(body, headers={"ETag": etag_of(host)})

    async def reset_system(self, ctx: Context) -> web.Response:
        host = self._host_system(ctx)
        if host is None:
            return messages.not_found(ctx.request.path)
        body = messages.read_json_object(await ctx.request.read())
        if body is None:
            return messages.malformed_json()
        return self._bmcs.power.reset(host, body.get("ResetType"), ctx.prefix)

    async def reset_action_info(self, ctx: Context) -> web.Response:
        host = self._host_system(ctx)
        if host is None:
            return messages.not_found(ctx.request.path)
        return messages.json_response(host.reset_action_info(ctx.prefix))

    @staticmethod
    def _host_system(ctx: Context) -> HostBMC | None:
        host = ctx.host
        return host if host is not None and ctx.params[0] == host.profile.system_id else None

    # -- DPU UpdateService --------------------------------------------------------------------

    async def update_service(self, ctx: Context) -> web.Response:
        return messages.json_response(dpu_resources.update_service_body(ctx.prefix))

    async def simple_update(self, ctx: Context) -> web.Response:
        assert ctx.dpu is not None
        body = messages.read_json_object(await ctx.request.read())
        if body is None:
            return messages.malformed_json()
        return self._bmcs.firmware.simple_update(ctx.dpu, body, ctx.prefix)

    async def firmware_inventory(self, ctx: Context) -> web.Response:
        assert ctx.dpu is not None
        uri = f"{ctx.prefix}/redfish/v1/UpdateService/FirmwareInventory"
        members = [f"{uri}/{item}" for item in dpu_resources.inventory_members(ctx.dpu)]
        return messages.json_response(
            _collection(uri, "#SoftwareInventoryCollection.SoftwareInventoryCollection", "Firmware Inventory",
                        members)
        )  # fmt: skip

    async def firmware_item(self, ctx: Context) -> web.Response:
        assert ctx.dpu is not None
        item = dpu_resources.inventory_item(ctx.dpu, ctx.params[0], ctx.prefix)
        if item is None:
            return messages.not_found(ctx.request.path)
        return messages.json_response(item)


_HOST = frozenset({"host"})
_DPU = frozenset({"dpu"})

RESOURCES: tuple[Resource, ...] = (
    Resource((), {"GET": Redfish.service_root}, open_methods=frozenset({"GET"})),
    Resource(("SessionService",), {"GET": Redfish.session_service}),
    Resource(
        ("SessionService", "Sessions"),
        {"GET": Redfish.list_sessions, "POST": Redfish.create_session},
        open_methods=frozenset({"POST"}),
    ),
    Resource(
        ("SessionService", "Sessions", "*"), {"GET": Redfish.get_session, "DELETE": Redfish.delete_session}
    ),
    Resource(("TaskService",), {"GET": Redfish.task_service}),
    Resource(("TaskService", "Tasks"), {"GET": Redfish.list_tasks}),
    Resource(("TaskService", "Tasks", "*"), {"GET": Redfish.get_task}),
    Resource(("Systems",), {"GET": Redfish.list_systems}),
    Resource(("Systems", "*"), {"GET": Redfish.get_system, "PATCH": Redfish.patch_system}),
    Resource(
        ("Systems", "*", "Actions", "ComputerSystem.Reset"),
        {"POST": Redfish.reset_system},
        kinds=_HOST,
        reset_methods=frozenset({"POST"}),
    ),
    Resource(("Systems", "*", "ResetActionInfo"), {"GET": Redfish.reset_action_info}, kinds=_HOST),
    Resource(("UpdateService",), {"GET": Redfish.update_service}, kinds=_DPU),
    Resource(
        ("UpdateService", "Actions", "UpdateService.SimpleUpdate"),
        {"POST": Redfish.simple_update},
        kinds=_DPU,
    ),
    Resource(("UpdateService", "FirmwareInventory"), {"GET": Redfish.firmware_inventory}, kinds=_DPU),
    Resource(("UpdateService", "FirmwareInventory", "*"), {"GET": Redfish.firmware_item}, kinds=_DPU),
)


def _match(parts: tuple[str, ...], kind: str) -> tuple[Resource, tuple[str, ...]] | None:
    for resource in RESOURCES:
        if kind not in resource.kinds or len(resource.pattern) != len(parts):
            continue
        params: list[str] = []
        for want, got in zip(resource.pattern, parts, strict=True):
            if want == "*":
                params.append(got)
            elif want != got:
                break
        else:
            return resource, tuple(params)
    return None
