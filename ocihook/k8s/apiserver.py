"""Publishing the DRA plugin's ResourceSlices through the Kubernetes API server.

A DRA driver's node plugin makes its devices schedulable by keeping ResourceSlice objects
(``resource.k8s.io/v1beta1``, one pool per node) in the API server; kubelet does not do it
for the plugin (KEP-4381; the reference driver's ``kubeletplugin`` package publishes them).
:func:`publish_slices` makes the server hold exactly the given slices of one driver on one
node: the missing ones created, the present ones replaced (with their ``resourceVersion``),
the ones no longer wanted deleted.

Only the few REST calls this needs, over ``urllib`` (no ``kubernetes`` client package):
the in-cluster configuration of a pod (``KUBERNETES_SERVICE_HOST``/``_PORT``, the service
account's token and CA under ``/var/run/secrets/kubernetes.io/serviceaccount``;
client-go ``rest.InClusterConfig``) or a URL given on the command line (``--apiserver``,
for a proxy or tests). Every call goes through :meth:`ApiServer.request`, which issues
only the (API group, resource, verb) triples of :data:`API_CALLS`: ``list``, ``create``,
``update`` and ``delete`` on ``resourceslices`` and ``get`` on ``resourceclaims``
(``resource.k8s.io``), what the DRA plugin's ClusterRole grants
(``packaging/kubernetes/dra-plugin-daemonset.yaml`` and the chart; a contract test
compares the two).
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.errors import ConfigError

__all__ = [
    "API_CALLS",
    "SERVICE_ACCOUNT_DIR",
    "ApiClaims",
    "ApiServer",
    "needed_permissions",
    "publish_slices",
]

#: Where a pod's service account credentials are mounted (client-go ``rest``).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The API group and version of the DRA objects.
GROUP, VERSION = "resource.k8s.io", "v1beta1"
#: Every (API group, resource, verb) the client issues, and nothing else
#: (:meth:`ApiServer.request` refuses any other): the RBAC rules the plugin's
#: ServiceAccount needs. ``resourceslices`` are cluster-scoped, ``resourceclaims``
#: namespaced (read in the claim's namespace: a ClusterRole bound cluster-wide).
API_CALLS: tuple[tuple[str, str, str], ...] = (
    (GROUP, "resourceslices", "list"),
    (GROUP, "resourceslices", "create"),
    (GROUP, "resourceslices", "update"),
    (GROUP, "resourceslices", "delete"),
    (GROUP, "resourceclaims", "get"),
)
#: The HTTP method of each verb (Kubernetes API concepts, "API verbs").
_METHODS = {"get": "GET", "list": "GET", "create": "POST", "update": "PUT", "delete": "DELETE"}
_SLICES = f"/apis/{GROUP}/{VERSION}/resourceslices"
#: Seconds one request may take.
TIMEOUT = 10.0


class ApiServer:
    """An API server to call: ``url`` (``https://10.96.0.1:443``), a bearer ``token``
    (or ``None``) and, for https, the CA bundle file ``ca_file`` (``None``: the
    system's)."""

    def __init__(self, url: str, token: str | None = None, ca_file: str | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError("not an http(s) URL of an API server", field="--apiserver", value=url)
        self.url = url.rstrip("/")
        self.token = token
        self.context = (
            ssl.create_default_context(cafile=ca_file) if parsed.scheme == "https" else None
        )

    @classmethod
    def in_cluster(
        cls, environ: Mapping[str, str] | None = None, sa_dir: str = SERVICE_ACCOUNT_DIR
    ) -> ApiServer | None:
        """The API server of the pod this runs in, or ``None`` outside a pod (no
        ``KUBERNETES_SERVICE_HOST``).

        Raises:
            ConfigError: in a pod whose service account token cannot be read.
        """
        env = os.environ if environ is None else environ
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            return None
        token_file = os.path.join(sa_dir, "token")
        try:
            with open(token_file) as f:
                token = f.read().strip()
        except OSError as e:
            raise ConfigError(
                f"cannot read the service account token: {e.strerror}",
                path=token_file,
                hint="mount the pod's service account token (automountServiceAccountToken)",
            ) from None
        ca = os.path.join(sa_dir, "ca.crt")
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return cls(f"https://{netloc}", token, ca if os.path.isfile(ca) else None)

    def request(
        self,
        verb: str,
        resource: str,
        name: str | None = None,
        *,
        namespace: str | None = None,
        query: str = "",
        body: Any = None,
    ) -> tuple[int, Any]:
        """``verb`` (``list``, ``get``, ``create``, ``update``, ``delete``) on ``resource``
        of :data:`GROUP` (the object ``name``, in ``namespace`` when namespaced; ``query``:
        a URL query without ``?``), as :meth:`call` answers it.

        Raises:
            ValueError: the triple is not in :data:`API_CALLS` (a call the plugin's role
                does not grant: a programming error).
            ConfigError: as :meth:`call`.
        """
        if (GROUP, resource, verb) not in API_CALLS:
            raise ValueError(f"{verb} {resource} is not in API_CALLS (the plugin's RBAC rules)")
        quote = urllib.parse.quote
        path = f"/apis/{GROUP}/{VERSION}"
        if namespace is not None:
            path += f"/namespaces/{quote(namespace, safe='')}"
        path += f"/{resource}"
        if name is not None:
            path += f"/{quote(name, safe='')}"
        if query:
            path += f"?{query}"
        return self.call(_METHODS[verb], path, body)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """``(status, decoded JSON or None)`` of ``method path``; an HTTP error status is
        returned, not raised.

        Raises:
            ConfigError: the server cannot be reached or answers something that is not
                JSON (``path`` = the URL).
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT, context=self.context) as r:
                status, raw = r.status, r.read(64 << 20)
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read(1 << 20)
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ConfigError(
                f"cannot reach the API server: {reason}", path=self.url + path
            ) from None
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            raise ConfigError(
                f"the API server answered {status} with something that is not JSON",
                path=self.url + path,
            ) from None


def needed_permissions() -> str:
    """:data:`API_CALLS` in words: ``list, create, update and delete on resourceslices;
    get on resourceclaims (resource.k8s.io)``."""
    verbs: dict[str, list[str]] = {}
    for _group, resource, verb in API_CALLS:
        verbs.setdefault(resource, []).append(verb)
    parts = []
    for resource, names in verbs.items():
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        parts.append(f"{listed} on {resource}")
    return f"{'; '.join(parts)} ({GROUP})"


def _failed(what: str, status: int, answer: Any, url: str) -> ConfigError:
    message = answer.get("message") if isinstance(answer, dict) else None
    return ConfigError(
        f"the API server refused to {what}: {status} {message or ''}".rstrip(),
        path=url,
        hint=f"the plugin's ServiceAccount needs {needed_permissions()}"
        if status in (401, 403)
        else None,
    )


def publish_slices(
    api: ApiServer, slices: Sequence[Mapping[str, Any]], *, driver: str, node: str
) -> dict[str, int]:
    """Make the API server hold exactly ``slices`` of ``driver`` on ``node``: each one
    created when missing, replaced when present (its ``resourceVersion`` carried over);
    the driver's other slices on that node deleted. Returns the counts
    (``created``, ``updated``, ``deleted``).

    Raises:
        ConfigError: the server cannot be reached or refuses a call (one line: the status
            and the server's message; for 401/403 what the ServiceAccount needs).
    """
    selector = urllib.parse.quote(f"spec.nodeName={node},spec.driver={driver}")
    status, answer = api.request("list", "resourceslices", query=f"fieldSelector={selector}")
    if status != 200 or not isinstance(answer, dict):
        raise _failed("list resourceslices", status, answer, api.url + _SLICES)
    present = {
        item["metadata"]["name"]: item
        for item in answer.get("items") or []
        if isinstance(item, dict) and isinstance(item.get("metadata"), dict)
    }
    counts = {"created": 0, "updated": 0, "deleted": 0}
    wanted = set()
    for slice_ in slices:
        name = slice_["metadata"]["name"]
        wanted.add(name)
        body = json.loads(json.dumps(slice_))
        if name in present:
            version = present[name]["metadata"].get("resourceVersion")
            if version is not None:
                body["metadata"]["resourceVersion"] = version
            status, answer = api.request("update", "resourceslices", name, body=body)
            if status != 200:
                raise _failed(f"update resourceslice {name}", status, answer, api.url)
            counts["updated"] += 1
        else:
            status, answer = api.request("create", "resourceslices", body=body)
            if status not in (200, 201):
                raise _failed(f"create resourceslice {name}", status, answer, api.url)
            counts["created"] += 1
    for name in sorted(set(present) - wanted):
        status, answer = api.request("delete", "resourceslices", name)
        if status not in (200, 202, 404):
            raise _failed(f"delete resourceslice {name}", status, answer, api.url)
        counts["deleted"] += 1
    return counts


class ApiClaims:
    """ResourceClaims read from the API server (a
    :class:`~ocihook.k8s.dra.ClaimSource`): ``GET
    /apis/resource.k8s.io/v1beta1/namespaces/<ns>/resourceclaims/<name>``, kept only when
    its ``metadata.uid`` is the one kubelet named (a claim deleted and made again under the
    same name is another claim). The ServiceAccount needs ``get`` on ``resourceclaims``
    (:data:`API_CALLS`)."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api

    def get(self, namespace: str, name: str, uid: str) -> Mapping[str, Any] | None:
        """The claim, or ``None`` when it is missing, another one, or cannot be read
        (the plugin then reports the claim as not found)."""
        try:
            status, answer = self.api.request("get", "resourceclaims", name, namespace=namespace)
        except ConfigError:
            return None
        if status != 200 or not isinstance(answer, dict):
            return None
        metadata = answer.get("metadata")
        if not isinstance(metadata, dict) or metadata.get("uid") != uid:
            return None
        return answer
