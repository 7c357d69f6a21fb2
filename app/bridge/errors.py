"""What can go wrong between the API server and a sink, and what the user should do."""

from __future__ import annotations

from app.bridge.resources import Kind

RBAC_MANIFEST = "ops/k8s/rbac.yaml"
READ_VERBS = ("list", "watch")  # all the bridge ever asks of the API server


class BridgeError(RuntimeError):
    """Fatal: the bridge stops and the message says what to fix."""


class Forbidden(BridgeError):
    """RBAC denied a list or watch (HTTP 403)."""

    def __init__(self, verb: str, kind: Kind, version: str, namespace: str | None, detail: str) -> None:
        self.verb, self.kind, self.version, self.namespace, self.detail = verb, kind, version, namespace, detail
        super().__init__(self._message())

    def rule(self) -> str:
        """The ClusterRole rule that grants what the bridge needs on this resource."""
        verbs = ", ".join(f'"{v}"' for v in READ_VERBS)
        return f'- apiGroups: ["{self.kind.group}"]\n  resources: ["{self.kind.plural}"]\n  verbs: [{verbs}]'

    def _message(self) -> str:
        where = f'in namespace "{self.namespace}"' if self.namespace else "at the cluster scope (all namespaces)"
        binding = (
            f'bind it with a RoleBinding in namespace "{self.namespace}" or a ClusterRoleBinding'
            if self.namespace
            else "bind it with a ClusterRoleBinding (a RoleBinding cannot grant all namespaces)"
        )
        rule = "\n".join("    " + line for line in self.rule().splitlines())
        return (
            f"RBAC forbids the bridge to {self.verb} {self.kind.resource()} "
            f"({self.kind.api_version(self.version)} {self.kind.name}) {where}: {self.detail or 'Forbidden'}\n"
            "  fix: grant the bridge's identity (its ServiceAccount in a pod, else the kubeconfig user) a ClusterRole "
            f"with this rule ({RBAC_MANIFEST} has the full role) and {binding}:\n{rule}"
        )


class Unauthorized(BridgeError):
    """The API server does not accept the credentials (HTTP 401)."""


class Unreachable(BridgeError):
    """A connection error that waiting cannot heal (an unknown host, a certificate
    rejected either way), or a transient one that lasted longer than give_up_after."""


class DeliveryError(BridgeError):
    """A sink could not make published records durable; no position after them was saved."""


# --- internal signals between the API client and a watch (never reach the user) ---


class Gone(Exception):
    """410: the resourceVersion (or continue token) is older than the server keeps."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)


class NotServed(Exception):
    """404 on a list: this group/version/resource is not served (its CRD is not installed)."""


class Transient(Exception):
    """A failure worth retrying after a backoff: connection refused or dropped, 5xx, 429.
    `cause` is the short reason logged once per outage."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause or message
