"""The AccountService (one administrator account, the three standard roles) and the OData
documents (`/redfish/v1/odata`, `/redfish/v1/$metadata`) that every Redfish service serves.

Each BMC has one account, the one its credentials name, with role Administrator; the roles are
the predefined `Administrator`, `Operator` and `ReadOnly` with the privileges the Redfish
specification assigns them. Nothing here is per-BMC state: bodies are built on request.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from aiohttp import web

from . import messages

V1 = "/redfish/v1"
ROLES: dict[str, tuple[str, ...]] = {
    "Administrator": ("Login", "ConfigureManager", "ConfigureUsers", "ConfigureSelf", "ConfigureComponents"),
    "Operator": ("Login", "ConfigureSelf", "ConfigureComponents"),
    "ReadOnly": ("Login", "ConfigureSelf"),
}
ACCOUNT_ID = "1"
# Namespaces of the resources the simulated BMCs serve: $metadata references each schema.
SCHEMAS = (
    ("ServiceRoot", "v1_16_1"), ("SessionService", "v1_1_9"), ("Session", "v1_7_1"),
    ("SessionCollection", None), ("TaskService", "v1_2_1"), ("Task", "v1_7_1"), ("TaskCollection", None),
    ("ComputerSystem", "v1_20_0"), ("ComputerSystemCollection", None), ("ActionInfo", "v1_4_2"),
    ("AccountService", "v1_13_0"), ("ManagerAccount", "v1_10_0"), ("ManagerAccountCollection", None),
    ("Role", "v1_3_1"), ("RoleCollection", None), ("UpdateService", "v1_11_0"),
    ("SoftwareInventory", "v1_10_0"), ("SoftwareInventoryCollection", None), ("Message", "v1_1_2"),
    ("Resource", "v1_16_0"),
)  # fmt: skip


def account_service() -> dict[str, Any]:
    return {
        "@odata.id": f"{V1}/AccountService",
        "@odata.type": "#AccountService.v1_13_0.AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "ServiceEnabled": True,
        "Accounts": {"@odata.id": f"{V1}/AccountService/Accounts"},
        "Roles": {"@odata.id": f"{V1}/AccountService/Roles"},
    }


def etag(body: dict[str, Any]) -> str:
    """A weak ETag of a resource body (the protocol asks for one on ManagerAccount GETs)."""
    return f'W/"{zlib.crc32(json.dumps(body, sort_keys=True).encode()):08x}"'


def account_collection() -> dict[str, Any]:
    uri = f"{V1}/AccountService/Accounts"
    return {
        "@odata.id": uri,
        "@odata.type": "#ManagerAccountCollection.ManagerAccountCollection",
        "Name": "Accounts Collection",
        "Members@odata.count": 1,
        "Members": [{"@odata.id": f"{uri}/{ACCOUNT_ID}"}],
    }


def account(account_id: str, username: str | None) -> dict[str, Any] | None:
    if account_id != ACCOUNT_ID or username is None:
        return None
    return {
        "@odata.id": f"{V1}/AccountService/Accounts/{ACCOUNT_ID}",
        "@odata.type": "#ManagerAccount.v1_10_0.ManagerAccount",
        "Id": ACCOUNT_ID,
        "Name": "User Account",
        "UserName": username,
        "Password": None,  # never shown, as the schema requires
        "RoleId": "Administrator",
        "Enabled": True,
        "Locked": False,
        "Links": {"Role": {"@odata.id": f"{V1}/AccountService/Roles/Administrator"}},
    }


def role_collection() -> dict[str, Any]:
    uri = f"{V1}/AccountService/Roles"
    return {
        "@odata.id": uri,
        "@odata.type": "#RoleCollection.RoleCollection",
        "Name": "Roles Collection",
        "Members@odata.count": len(ROLES),
        "Members": [{"@odata.id": f"{uri}/{name}"} for name in ROLES],
    }


def role(role_id: str) -> dict[str, Any] | None:
    privileges = ROLES.get(role_id)
    if privileges is None:
        return None
    return {
        "@odata.id": f"{V1}/AccountService/Roles/{role_id}",
        "@odata.type": "#Role.v1_3_1.Role",
        "Id": role_id,
        "Name": f"{role_id} Role",
        "RoleId": role_id,
        "IsPredefined": True,
        "AssignedPrivileges": list(privileges),
    }


def odata_document(sessions: bool) -> web.Response:
    """The OData service document: the service root's top-level resources."""
    entries = [("Systems", "Systems"), ("TaskService", "TaskService"), ("AccountService", "AccountService")]
    if sessions:
        entries += [("SessionService", "SessionService"), ("Sessions", "SessionService/Sessions")]
    body = {
        "@odata.context": f"{V1}/$metadata",
        "value": [
            {"name": "Service", "kind": "Singleton", "url": f"{V1}/"},
            *({"name": name, "kind": "Singleton", "url": f"{V1}/{url}"} for name, url in entries),
        ],
    }
    return messages.json_response(body)


def metadata_document() -> web.Response:
    """The CSDL `$metadata`: a reference to each DMTF schema the service uses."""
    references = []
    for name, version in SCHEMAS:
        namespaces = [f'    <edmx:Include Namespace="{name}"/>']
        if version is not None:
            namespaces.append(f'    <edmx:Include Namespace="{name}.{version}"/>')
        references.append(
            f'  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/{name}_v1.xml">\n'
            + "\n".join(namespaces)
            + "\n  </edmx:Reference>"
        )
    text = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">\n'
        + "\n".join(references)
        + "\n  <edmx:DataServices>\n"
        '    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">\n'
        '      <EntityContainer Name="Service" Extends="ServiceRoot.v1_16_1.ServiceContainer"/>\n'
        "    </Schema>\n"
        "  </edmx:DataServices>\n"
        "</edmx:Edmx>\n"
    )
    return web.Response(
        text=text,
        content_type="application/xml",
        headers={"OData-Version": "4.0", "Cache-Control": "no-cache"},
    )
