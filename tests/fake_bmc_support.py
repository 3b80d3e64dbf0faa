"""A scripted BMC over `httpx.MockTransport`, for the Redfish client's edge cases (what real BMCs
of other vendors do that the simulated site does not): a route table of (method, path) ->
handler, every request it saw, and a session service to add. No socket: the client's transport
is the fake itself."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from contracts.models.inventory import BMCAccess, CredentialRef, EnvCredentials
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.power import read_power

ORIGIN = "https://bmc.example"
SECRET = "s3cret-pa55"
ENV = {"BMC_USER": "admin", "BMC_PASS": SECRET}
ACCESS = BMCAccess(
    bmc_id="bmc-1",
    endpoint=ORIGIN,
    credentials=CredentialRef(env=EnvCredentials(username="BMC_USER", password="BMC_PASS")),
)
SYSTEM = "/redfish/v1/Systems/Node0"
RESET = f"{SYSTEM}/Actions/ComputerSystem.Reset"


def system_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "@odata.id": SYSTEM,
        "PowerState": "On",
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": RESET,
                "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown"],
            }
        },
    }
    body.update(changes)
    return body


class FakeBMC:
    """A scripted BMC: a route table of (method, path) -> handler, and every request it saw."""

    def __init__(self, system: dict[str, Any] | Callable[[], httpx.Response] | None = None) -> None:
        self.seen: list[httpx.Request] = []
        self.power = "On"
        self.routes: dict[tuple[str, str], Callable[[httpx.Request], httpx.Response]] = {
            ("GET", "/redfish/v1/"): lambda r: httpx.Response(
                200,
                json={
                    "Systems": {"@odata.id": "/redfish/v1/Systems"},
                    "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
                },
            ),  # fmt: skip
            ("GET", "/redfish/v1/Systems"): lambda r: httpx.Response(
                200, json={"Members": [{"@odata.id": SYSTEM}]}
            ),
            ("GET", SYSTEM): lambda r: httpx.Response(200, json=system_body(PowerState=self.power)),
        }
        if isinstance(system, dict):
            self.routes[("GET", SYSTEM)] = lambda r: httpx.Response(200, json=system)
        elif system is not None:
            self.routes[("GET", SYSTEM)] = lambda r: system()

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        route = self.routes.get((request.method, request.url.path))
        if route is None:
            return httpx.Response(404, json={"error": {"message": "nope"}})
        return route(request)

    def client(self, auth: str = "basic", max_in_flight: int = 2) -> RedfishClient:
        return RedfishClient(
            CredentialResolver(env=ENV),
            auth=auth,  # type: ignore[arg-type]
            max_in_flight=max_in_flight,
            transport=httpx.MockTransport(self.handle),
        )


async def read(bmc: FakeBMC, **kwargs: Any) -> Any:
    client = bmc.client(**kwargs)
    try:
        async with client.connect(ACCESS) as connection:
            return await read_power(connection)
    finally:
        await client.aclose()


def with_sessions(bmc: FakeBMC) -> list[str]:
    """Add a session service to a fake BMC; returns the log of session events."""
    events: list[str] = []
    tokens: set[str] = set()

    def login(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body != {"UserName": "admin", "Password": SECRET}:
            return httpx.Response(401)
        token = f"t{len(events)}"
        tokens.add(token)
        events.append("create")
        return httpx.Response(
            201, headers={"X-Auth-Token": token, "Location": f"/redfish/v1/SessionService/Sessions/{token}"}
        )

    def delete(request: httpx.Request) -> httpx.Response:
        events.append("delete")
        tokens.discard(request.url.path.rsplit("/", 1)[-1])
        return httpx.Response(204)

    inner = bmc.handle

    def authenticated(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.startswith("/redfish/v1/SessionService/Sessions/") and request.method == "DELETE":
            return delete(request)
        if path == "/redfish/v1/SessionService/Sessions" and request.method == "POST":
            return login(request)
        if path != "/redfish/v1/" and request.headers.get("X-Auth-Token") not in tokens:
            return httpx.Response(401)
        return inner(request)

    bmc.handle = authenticated  # type: ignore[method-assign]
    bmc.tokens = tokens  # type: ignore[attr-defined]
    return events
