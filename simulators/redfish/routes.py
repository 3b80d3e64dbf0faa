"""HTTP layer of the simulated BMCs: one catch-all route, dispatched over the Redfish tree.

Every BMC service answers at the root of its own address (`/redfish/v1/...`), and the service a
request is for is the one listening on the port it arrived on. Dispatching here (rather than
one aiohttp route per resource) lets unknown resources and wrong methods get Redfish error
bodies (404 `ResourceMissingAtURI`, 405 `OperationNotAllowed`) instead of aiohttp's plain text.

Per request, in order: find the service (404), refuse an OData-Version other than 4.0 (412),
serve the open documents (`/redfish`, `/redfish/v1/`, `odata`, `$metadata`), ask the fault
profile (500/503/409, which change nothing), authenticate (401; the service root and session
creation are open), check the method (405 with `Allow`), serve; then hold the response back by
the profile's `response_delay("bmc")`. Successful GETs carry `Allow` and a `Link` to their schema
(`rel=describedby`), as the Redfish protocol asks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import accounts, messages
from . import dpu as dpu_resources
from .dpu import DPUBMC
from .host import (
    HostBMC,
    apply_patch,
    check_if_match,
    etag_of,
    host_inventory_item,
    host_update_service_body,
)

if TYPE_CHECKING:
    from . import BMCs, Service


@dataclass(slots=True)
class Context:
    """The BMC service a request is addressed to."""

    bmc_id: str  # the service's id: the key of its account, sessions and tasks
    prefix: str  # "" since every BMC is at its own root; kept so resources build absolute links
    service: Service
    host: HostBMC | None  # the service's first host (a host BMC), else None
    dpu: DPUBMC | None
    request: web.BaseRequest
    params: tuple[str, ...]


Handler = Callable[["Redfish", Context], Awaitable[web.Response]]


@dataclass(frozen=True, slots=True)
class Resource:
    pattern: tuple[str, ...]  # "*" matches one path segment
    methods: dict[str, Handler]
    kinds: frozenset[str] = frozenset({"host", "dpu"})
    open_methods: frozenset[str] = frozenset()  # served without authentication
    reset_methods: frozenset[str] = frozenset()  # requests that are resets, for the fault profile
    needs_sessions: bool = False  # absent on a BMC without a SessionService


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

    async def handle(self, request: web.BaseRequest) -> web.Response:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        service = self._bmcs.service_at(sockname[1]) if sockname else None
        if service is None:
            return messages.not_found(request.path)
        if service.unreachable:
            # Fault `unreachable`: a connection opened before it stopped listening gets no answer.
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=503)  # never written: the connection is gone
        if self._bmcs.request_counts is not None:
            self._bmcs.request_counts.count("redfish", request)
        service.requests_served[f"{request.method} {request.path}"] += 1  # `BMCs.requests`
        # The BMC's own record of requests answered at once and per minute (`BMCs.load`, a test
        # instrument: `load.py`). A request ends at the next turn of the event loop, so requests
        # that reached the BMC in the same turn count together, though each is answered at once.
        loop = asyncio.get_running_loop()
        service.load.began(loop.time())
        try:
            return await self._handle(request, service)
        finally:
            loop.call_soon(service.load.ended)

    async def _handle(self, request: web.BaseRequest, service: Service) -> web.Response:
        bmcs = self._bmcs
        odata_version = request.headers.get("OData-Version")
        if odata_version is not None and odata_version.strip() != "4.0":
            return messages.error_response(
                412,
                "HeaderInvalid",
                f"The value '{odata_version}' of the header OData-Version is not supported; use 4.0.",
                args=[f"OData-Version: {odata_version}"],
                resolution="Resubmit the request with OData-Version 4.0 or without the header.",
            )
        unsupported = sorted(key for key in request.query if key.startswith("$"))
        if unsupported:
            # ProtocolFeaturesSupported offers no query parameter: the protocol asks for 501.
            return messages.error_response(
                501,
                "QueryNotSupported",
                f"Querying is not supported by the implementation ({unsupported[0]}).",
                resolution="Remove the query parameters and resubmit the request if the operation failed.",
            )
        path = request.path.rstrip("/")
        if path == "/redfish":
            return _with_get_headers(request, messages.json_response({"v1": "/redfish/v1/"}), ["GET", "HEAD"])
        if path == "/redfish/v1/odata":
            return _with_get_headers(request, accounts.odata_document(service.sessions), ["GET", "HEAD"])
        if path == "/redfish/v1/$metadata":
            return _with_get_headers(request, accounts.metadata_document(), ["GET", "HEAD"])
        parts = tuple(path.split("/")[1:])
        if parts[:2] != ("redfish", "v1"):
            return messages.not_found(request.path)
        host = service.first_host
        found = _match(parts[2:], "host" if host is not None else "dpu", service.sessions)
        method = "GET" if request.method == "HEAD" else request.method
        is_reset = found is not None and method in found[0].reset_methods
        if is_reset and service.next_reset_delay > 0:
            held, service.next_reset_delay = service.next_reset_delay, 0.0
            await asyncio.sleep(held)
        fault = bmcs.faults.bmc_fault(service.id, is_reset=is_reset)
        if fault is not None:
            response = messages.fault_response(*fault)
        else:
            ctx = Context(service.id, "", service, host, service.dpu, request, ())
            response = await self._serve(ctx, method, found)
        delay = bmcs.faults.response_delay("bmc")
        if delay > 0:
            await asyncio.sleep(delay)
        if request.method == "HEAD" and response.status == 200:
            return web.Response(status=200, headers=response.headers)
        return response

    async def _serve(
        self, ctx: Context, method: str, found: tuple[Resource, tuple[str, ...]] | None
    ) -> web.Response:
        request = ctx.request
        if found is None or method not in found[0].open_methods:
            refusal = self._bmcs.auth.check(ctx.bmc_id, request, sessions=ctx.service.sessions)
            if refusal is not None:
                return refusal
        if found is None:
            return messages.not_found(request.path)
        resource, params = found
        allowed = sorted(resource.methods)
        handler = resource.methods.get(method)
        if handler is None:
            return messages.method_not_allowed(request.method, allowed)
        ctx.params = params
        response = await handler(self, ctx)
        if method == "GET":
            return _with_get_headers(request, response, allowed)
        return response

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
            "TaskService": {"@odata.id": f"{v1}/TaskService"},
            "AccountService": {"@odata.id": f"{v1}/AccountService"},
            "ProtocolFeaturesSupported": {
                "ExpandQuery": {"ExpandAll": False, "Levels": False, "Links": False, "NoLinks": False},
                "FilterQuery": False,
                "SelectQuery": False,
                "OnlyMemberQuery": False,
                "ExcerptQuery": False,
            },
        }
        if ctx.service.sessions:
            body["SessionService"] = {"@odata.id": f"{v1}/SessionService"}
            body["Links"] = {"Sessions": {"@odata.id": f"{v1}/SessionService/Sessions"}}
        if ctx.dpu is not None or (ctx.host is not None and ctx.host.profile.firmware):
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
        created = self._bmcs.auth.create(ctx.bmc_id, body["UserName"], body["Password"], ctx.request)
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
        system_ids = list(ctx.service.hosts) if ctx.dpu is None else [dpu_resources.SYSTEM_ID]
        return messages.json_response(
            _collection(
                uri, "#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection",
                [f"{uri}/{system_id}" for system_id in system_ids],
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
        if ctx.dpu is not None:
            return await self._reset_dpu(ctx, ctx.dpu)
        host = self._host_system(ctx)
        if host is None:
            return messages.not_found(ctx.request.path)
        body = messages.read_json_object(await ctx.request.read())
        if body is None:
            return messages.malformed_json()
        response = self._bmcs.power.reset(host, body.get("ResetType"), ctx.prefix)
        if body.get("ResetType") == "ForceOff" and response.status < 300:
            self._bmcs.forceoff_accepted(ctx.service, host, ctx.prefix)  # faults F2, F6
        return response

    async def _reset_dpu(self, ctx: Context, dpu: DPUBMC) -> web.Response:
        if ctx.params[0] != dpu_resources.SYSTEM_ID:
            return messages.not_found(ctx.request.path)
        body = messages.read_json_object(await ctx.request.read())
        if body is None:
            return messages.malformed_json()
        return self._bmcs.dpu_resets.reset(dpu, body.get("ResetType"), self._bmcs.power_state(dpu.host_id))

    async def dpu_oem(self, ctx: Context) -> web.Response:
        if ctx.dpu is None or ctx.params[0] != dpu_resources.SYSTEM_ID:
            return messages.not_found(ctx.request.path)
        return messages.json_response(dpu_resources.oem_nvidia_body(ctx.prefix))

    async def soc_force_reset(self, ctx: Context) -> web.Response:
        if ctx.dpu is None or ctx.params[0] != dpu_resources.SYSTEM_ID:
            return messages.not_found(ctx.request.path)
        return self._bmcs.dpu_resets.soc_force_reset(ctx.dpu)

    async def reset_action_info(self, ctx: Context) -> web.Response:
        if ctx.dpu is not None:
            if ctx.params[0] != dpu_resources.SYSTEM_ID:
                return messages.not_found(ctx.request.path)
            return messages.json_response(dpu_resources.reset_action_info(ctx.dpu))
        host = self._host_system(ctx)
        if host is None:
            return messages.not_found(ctx.request.path)
        return messages.json_response(host.reset_action_info(ctx.prefix))

    @staticmethod
    def _host_system(ctx: Context) -> HostBMC | None:
        return ctx.service.hosts.get(ctx.params[0]) if ctx.params else None

    # -- AccountService -------------------------------------------------------------------------

    async def account_service(self, ctx: Context) -> web.Response:
        return messages.json_response(accounts.account_service())

    async def list_accounts(self, ctx: Context) -> web.Response:
        return messages.json_response(accounts.account_collection())

    async def get_account(self, ctx: Context) -> web.Response:
        body = accounts.account(ctx.params[0], self._bmcs.auth.username(ctx.bmc_id))
        if body is None:
            return messages.not_found(ctx.request.path)
        return messages.json_response(body, headers={"ETag": accounts.etag(body)})

    async def list_roles(self, ctx: Context) -> web.Response:
        return messages.json_response(accounts.role_collection())

    async def get_role(self, ctx: Context) -> web.Response:
        body = accounts.role(ctx.params[0])
        return messages.not_found(ctx.request.path) if body is None else messages.json_response(body)

    # -- UpdateService: a DPU BMC's (SimpleUpdate) and a host BMC's (inventory only) ----------

    async def update_service(self, ctx: Context) -> web.Response:
        if ctx.dpu is not None:
            return messages.json_response(dpu_resources.update_service_body(ctx.prefix))
        if ctx.host is None or not ctx.host.profile.firmware:
            return messages.not_found(ctx.request.path)
        return messages.json_response(host_update_service_body(ctx.prefix))

    async def simple_update(self, ctx: Context) -> web.Response:
        assert ctx.dpu is not None
        body = messages.read_json_object(await ctx.request.read())
        if body is None:
            return messages.malformed_json()
        return self._bmcs.firmware.simple_update(ctx.dpu, body, ctx.prefix)

    async def firmware_inventory(self, ctx: Context) -> web.Response:
        uri = f"{ctx.prefix}/redfish/v1/UpdateService/FirmwareInventory"
        if ctx.dpu is not None:
            items = dpu_resources.inventory_members(ctx.dpu)
        elif ctx.host is not None and ctx.host.profile.firmware:
            items = [item.id for item in ctx.host.profile.firmware]
        else:
            return messages.not_found(ctx.request.path)
        return messages.json_response(
            _collection(uri, "#SoftwareInventoryCollection.SoftwareInventoryCollection", "Firmware Inventory",
                        [f"{uri}/{item}" for item in items])
        )  # fmt: skip

    async def firmware_item(self, ctx: Context) -> web.Response:
        if ctx.dpu is not None:
            item = dpu_resources.inventory_item(ctx.dpu, ctx.params[0], ctx.prefix)
        elif ctx.host is not None:
            item = host_inventory_item(ctx.host.profile, ctx.params[0], ctx.prefix)
        else:
            item = None
        if item is None:
            return messages.not_found(ctx.request.path)
        return messages.json_response(item)


_HOST = frozenset({"host"})
_DPU = frozenset({"dpu"})

RESOURCES: tuple[Resource, ...] = (
    Resource((), {"GET": Redfish.service_root}, open_methods=frozenset({"GET"})),
    Resource(("SessionService",), {"GET": Redfish.session_service}, needs_sessions=True),
    Resource(
        ("SessionService", "Sessions"),
        {"GET": Redfish.list_sessions, "POST": Redfish.create_session},
        open_methods=frozenset({"POST"}),
        needs_sessions=True,
    ),
    # The OData form of the same collection: clients may POST a session to its Members.
    Resource(
        ("SessionService", "Sessions", "Members"),
        {"POST": Redfish.create_session},
        open_methods=frozenset({"POST"}),
        needs_sessions=True,
    ),
    Resource(
        ("SessionService", "Sessions", "*"),
        {"GET": Redfish.get_session, "DELETE": Redfish.delete_session},
        needs_sessions=True,
    ),
    Resource(("AccountService",), {"GET": Redfish.account_service}),
    Resource(("AccountService", "Accounts"), {"GET": Redfish.list_accounts}),
    Resource(("AccountService", "Accounts", "*"), {"GET": Redfish.get_account}),
    Resource(("AccountService", "Roles"), {"GET": Redfish.list_roles}),
    Resource(("AccountService", "Roles", "*"), {"GET": Redfish.get_role}),
    Resource(("TaskService",), {"GET": Redfish.task_service}),
    Resource(("TaskService", "Tasks"), {"GET": Redfish.list_tasks}),
    Resource(("TaskService", "Tasks", "*"), {"GET": Redfish.get_task}),
    Resource(("Systems",), {"GET": Redfish.list_systems}),
    Resource(("Systems", "*"), {"GET": Redfish.get_system, "PATCH": Redfish.patch_system}),
    Resource(
        ("Systems", "*", "Actions", "ComputerSystem.Reset"),
        {"POST": Redfish.reset_system},
        reset_methods=frozenset({"POST"}),
    ),
    Resource(("Systems", "*", "ResetActionInfo"), {"GET": Redfish.reset_action_info}),
    Resource(("Systems", "*", "Oem", "Nvidia"), {"GET": Redfish.dpu_oem}, kinds=_DPU),
    Resource(
        ("Systems", "*", "Oem", "Nvidia", dpu_resources.SOC_FORCE_RESET),
        {"POST": Redfish.soc_force_reset},
        kinds=_DPU,
        reset_methods=frozenset({"POST"}),
    ),
    Resource(("UpdateService",), {"GET": Redfish.update_service}),
    Resource(
        ("UpdateService", "Actions", "UpdateService.SimpleUpdate"),
        {"POST": Redfish.simple_update},
        kinds=_DPU,
    ),
    Resource(("UpdateService", "FirmwareInventory"), {"GET": Redfish.firmware_inventory}),
    Resource(("UpdateService", "FirmwareInventory", "*"), {"GET": Redfish.firmware_item}),
)


def _with_get_headers(request: web.BaseRequest, response: web.Response, allowed: list[str]) -> web.Response:
    """`Allow` and `Link: <schema>; rel=describedby` on a successful GET, as Redfish asks."""
    if response.status != 200:
        return response
    response.headers["Allow"] = ", ".join(sorted({*allowed, "HEAD"}))
    odata_type = None
    if response.content_type == messages.JSON_TYPE and isinstance(response.body, bytes):
        odata_type = messages.odata_type_of(response.body)
    if odata_type:
        schema = odata_type.lstrip("#").rsplit(".", 1)[0]
        response.headers["Link"] = f"<http://redfish.dmtf.org/schemas/v1/{schema}.json>; rel=describedby"
    return response


def _match(parts: tuple[str, ...], kind: str, sessions: bool) -> tuple[Resource, tuple[str, ...]] | None:
    for resource in RESOURCES:
        if kind not in resource.kinds or len(resource.pattern) != len(parts):
            continue
        if resource.needs_sessions and not sessions:
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
