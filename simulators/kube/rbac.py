"""Authentication and RBAC for the simulated API server, as a real one does them.

Every request under `/api` and `/apis` must carry `Authorization: Bearer <token>`; a missing or
unknown token is answered 401 with a `Status` body (`/version` stays anonymous, as on a server
that lets `system:public-info-viewer` through). Two kinds of token exist:

- the admin token the simulator writes into its kubeconfig (user `metalflow-sim:admin`, group
  `system:masters`): allowed everything, like a cluster-admin kubeconfig;
- service-account tokens minted by the TokenRequest API (`kubectl create token SA`, or `POST
  .../serviceaccounts/<sa>/token`): user `system:serviceaccount:<ns>:<sa>`, authorized by the
  Roles, ClusterRoles, RoleBindings and ClusterRoleBindings stored in the API itself.

Authorization follows the RBAC rules: a request is allowed when a rule of a role bound to the
user (RoleBinding in the request's namespace, or ClusterRoleBinding) lists its verb, API group
and resource (`plural` or `plural/subresource`, `*` wildcards) and, for requests that name an
object (not list, watch or create), its `resourceNames` when the rule has any. Otherwise 403
with the message a real server gives. Each decision is counted in `audit` (per user, verb,
group, resource), which the control API serves at `/sim/audit`, so tests can compare what a
worker used with what its role grants.

Cost: one dict lookup per request for the token, and a scan of the bindings (a handful) per
request of a service account; nothing for the admin.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass
from typing import Any

from simulators.kube.store import Forbidden, NotFound, Object, ResourceType, Store, StoreError

ADMIN_USER = "metalflow-sim:admin"
RBAC_GROUP = "rbac.authorization.k8s.io"
_PRESERVE: Object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

SERVICE_ACCOUNT = ResourceType(
    "", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", "ServiceAccountList", True,
    frozenset({"token"}), short_names=("sa",), schema=_PRESERVE,
)  # fmt: skip
ROLE = ResourceType(RBAC_GROUP, "v1", "roles", "role", "Role", "RoleList", True, schema=_PRESERVE)
CLUSTER_ROLE = ResourceType(
    RBAC_GROUP, "v1", "clusterroles", "clusterrole", "ClusterRole", "ClusterRoleList", False, schema=_PRESERVE
)
ROLE_BINDING = ResourceType(
    RBAC_GROUP, "v1", "rolebindings", "rolebinding", "RoleBinding", "RoleBindingList", True, schema=_PRESERVE
)
CLUSTER_ROLE_BINDING = ResourceType(
    RBAC_GROUP, "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding",
    "ClusterRoleBindingList", False, schema=_PRESERVE,
)  # fmt: skip
RESOURCE_TYPES = (SERVICE_ACCOUNT, ROLE, CLUSTER_ROLE, ROLE_BINDING, CLUSTER_ROLE_BINDING)


class Unauthorized(StoreError):
    code, reason = 401, "Unauthorized"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]

    @property
    def admin(self) -> bool:
        return "system:masters" in self.groups


@dataclass(frozen=True)
class Attributes:
    """What a request asks for, in RBAC's terms."""

    verb: str
    group: str
    resource: str  # plural, or plural/subresource
    namespace: str | None
    name: str | None


def verb_of(method: str, name: str | None, watch: bool) -> str:
    """The RBAC verb of an HTTP request on a resource URL."""
    if method in ("GET", "HEAD"):
        if name is not None:
            return "get"
        return "watch" if watch else "list"
    if method == "DELETE":
        return "delete" if name is not None else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


class Auth:
    """Tokens, the RBAC decision and the audit counts of one simulated API server."""

    def __init__(self, store: Store, admin_token: str | None = None) -> None:
        self.store = store
        self.admin_token = admin_token or secrets.token_urlsafe(24)
        self._tokens: dict[str, User] = {self.admin_token: User(ADMIN_USER, ("system:masters",))}
        self.audit: Counter[tuple[str, str, str, str, bool]] = Counter()

    def authenticate(self, header: str | None) -> User:
        """The user of an `Authorization` header; Unauthorized (401) without a known token."""
        scheme, _, token = (header or "").partition(" ")
        user = self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise Unauthorized("Unauthorized")
        return user

    def mint_token(self, namespace: str, service_account: str) -> str:
        """A token for an existing ServiceAccount (the TokenRequest API)."""
        self.store.get(SERVICE_ACCOUNT, namespace, service_account)  # NotFound when it does not exist
        token = secrets.token_urlsafe(24)
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated")
        self._tokens[token] = User(f"system:serviceaccount:{namespace}:{service_account}", groups)
        return token

    def token_request(self, namespace: str, service_account: str, body: Any) -> Object:
        """The TokenRequest answer for `POST .../serviceaccounts/<sa>/token`."""
        spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
        spec.setdefault("expirationSeconds", 3600)
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": service_account, "namespace": namespace},
            "spec": spec,
            "status": {"token": self.mint_token(namespace, service_account),
                       "expirationTimestamp": "2099-01-01T00:00:00Z"},
        }  # fmt: skip

    def authorize(self, user: User, attrs: Attributes) -> None:
        """Raise Forbidden (403) unless a bound rule allows `attrs`; count the decision."""
        allowed = user.admin or any(
            _rule_allows(rule, attrs) for rule in self._rules_for(user, attrs.namespace)
        )
        self.audit[(user.name, attrs.verb, attrs.group, attrs.resource, allowed)] += 1
        if allowed:
            return
        plural, _, sub = attrs.resource.partition("/")
        what = f'{plural} "{attrs.name}"' if attrs.name else plural
        where = f' in the namespace "{attrs.namespace}"' if attrs.namespace else " at the cluster scope"
        sub_text = f'"{plural}/{sub}"' if sub else f'"{plural}"'
        raise Forbidden(
            f'{what} is forbidden: User "{user.name}" cannot {attrs.verb} resource {sub_text} '
            f'in API group "{attrs.group}"{where}',
            details={"name": attrs.name or "", "group": attrs.group, "kind": plural},
        )

    def _rules_for(self, user: User, namespace: str | None) -> list[Object]:
        bindings = self.store.list_shared(CLUSTER_ROLE_BINDING, None, self.store.selector(None, None))
        if namespace:
            bindings = bindings + self.store.list_shared(
                ROLE_BINDING, namespace, self.store.selector(None, None)
            )
        rules: list[Object] = []
        for binding in bindings:
            if not any(_subject_matches(s, user) for s in binding.get("subjects") or ()):
                continue
            ref = binding.get("roleRef") or {}
            role_type = CLUSTER_ROLE if ref.get("kind") == "ClusterRole" else ROLE
            role_ns = binding["metadata"].get("namespace") if role_type is ROLE else None
            try:
                role = self.store.get(role_type, role_ns, str(ref.get("name", "")))
            except NotFound:
                continue  # a binding to a missing role grants nothing, as on a real server
            rules.extend(r for r in role.get("rules") or () if isinstance(r, dict))
        return rules

    def audit_json(self) -> list[Object]:
        """The counted decisions, for `/sim/audit`."""
        return [
            {"user": u, "verb": v, "group": g, "resource": r, "allowed": a, "count": n}
            for (u, v, g, r, a), n in sorted(self.audit.items())
        ]


def _subject_matches(subject: Object, user: User) -> bool:
    kind = subject.get("kind")
    if kind == "ServiceAccount":
        return user.name == f"system:serviceaccount:{subject.get('namespace')}:{subject.get('name')}"
    if kind == "User":
        return user.name == subject.get("name")
    if kind == "Group":
        return subject.get("name") in user.groups
    return False


def _matches(values: Any, wanted: str) -> bool:
    listed = list(values or ())
    return "*" in listed or wanted in listed


def _rule_allows(rule: Object, attrs: Attributes) -> bool:
    if not _matches(rule.get("verbs"), attrs.verb) or not _matches(rule.get("apiGroups"), attrs.group):
        return False
    plural, _, sub = attrs.resource.partition("/")
    resources = list(rule.get("resources") or ())
    if not ("*" in resources or attrs.resource in resources or (sub and f"{plural}/*" in resources)):
        return False
    names = list(rule.get("resourceNames") or ())
    # resourceNames cannot restrict list, watch, create or deletecollection: no name is known.
    return not names or (attrs.name is not None and attrs.name in names)
