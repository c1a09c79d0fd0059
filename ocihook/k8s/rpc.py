"""The gRPC services of the kubelet APIs, bound by hand to the generated messages.

Each service is a :class:`Service`: its full wire name and, per method, the request and
response classes and whether the response is a stream. :func:`add_service` serves an
implementation object (a method per RPC, ``(request, context) -> response``, or an
iterator of responses for a stream) on a :class:`grpc.Server`; :func:`client` makes a
client with one callable per RPC on a channel. Both sides use the same tables, so the
method paths (``/v1beta1.DevicePlugin/Allocate``) are written once.

The services (package names as kubelet declares them on the wire):

* :data:`REGISTRATION` ``v1beta1.Registration`` (kubelet serves it on ``kubelet.sock``);
* :data:`DEVICE_PLUGIN` ``v1beta1.DevicePlugin`` (the device plugin serves it);
* :data:`PLUGIN_REGISTRATION` ``pluginregistration.Registration`` (a DRA plugin serves it
  on its socket in ``plugins_registry``);
* :data:`DRA_PLUGIN` ``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from .api import deviceplugin_pb2 as dp
from .api import dra_pb2 as dra
from .api import pluginregistration_pb2 as reg

__all__ = [
    "DEVICE_PLUGIN",
    "DRA_PLUGIN",
    "MAX_SOCKET_PATH",
    "PLUGIN_REGISTRATION",
    "REGISTRATION",
    "Method",
    "Service",
    "add_service",
    "client",
    "unix_channel",
    "unix_server",
]

#: The longest unix socket path (bytes of the absolute path) gRPC binds. ``sun_path``
#: holds 107 bytes and a NUL (unix(7)), but gRPC core refuses a path of 106 bytes or more
#: (its log says "Path name should not have more than 107 characters"): grpcio 1.85 binds
#: 105 and refuses 106 (``tests/unit/k8s/test_k8s_device_plugin.py`` checks both against
#: the installed grpcio).
MAX_SOCKET_PATH = 105


@dataclass(frozen=True)
class Method:
    """One RPC: request and response message classes; ``stream``: server-streaming."""

    request: Any
    response: Any
    stream: bool = False


@dataclass(frozen=True)
class Service:
    """A gRPC service: ``name`` (``package.Service``) and its methods by name."""

    name: str
    methods: dict[str, Method]

    def path(self, method: str) -> str:
        """The HTTP/2 path of ``method``: ``/package.Service/Method``."""
        return f"/{self.name}/{method}"


REGISTRATION = Service("v1beta1.Registration", {"Register": Method(dp.RegisterRequest, dp.Empty)})
DEVICE_PLUGIN = Service(
    "v1beta1.DevicePlugin",
    {
        "GetDevicePluginOptions": Method(dp.Empty, dp.DevicePluginOptions),
        "ListAndWatch": Method(dp.Empty, dp.ListAndWatchResponse, stream=True),
        "GetPreferredAllocation": Method(
            dp.PreferredAllocationRequest, dp.PreferredAllocationResponse
        ),
        "Allocate": Method(dp.AllocateRequest, dp.AllocateResponse),
        "PreStartContainer": Method(dp.PreStartContainerRequest, dp.PreStartContainerResponse),
    },
)
PLUGIN_REGISTRATION = Service(
    "pluginregistration.Registration",
    {
        "GetInfo": Method(reg.InfoRequest, reg.PluginInfo),
        "NotifyRegistrationStatus": Method(reg.RegistrationStatus, reg.RegistrationStatusResponse),
    },
)
DRA_PLUGIN = Service(
    "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
    {
        "NodePrepareResources": Method(
            dra.NodePrepareResourcesRequest, dra.NodePrepareResourcesResponse
        ),
        "NodeUnprepareResources": Method(
            dra.NodeUnprepareResourcesRequest, dra.NodeUnprepareResourcesResponse
        ),
    },
)


def add_service(server: grpc.Server, service: Service, impl: object) -> None:
    """Serve ``service`` on ``server`` with ``impl``'s methods of the same names.

    Raises:
        AttributeError: ``impl`` lacks one of the service's methods.
    """
    handlers = {}
    for name, m in service.methods.items():
        fn = getattr(impl, name)
        make = (
            grpc.unary_stream_rpc_method_handler
            if m.stream
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[name] = make(
            fn,
            request_deserializer=m.request.FromString,
            response_serializer=m.response.SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.name, handlers),))


class _Client:
    def __init__(self, channel: grpc.Channel, service: Service) -> None:
        self._calls: dict[str, Callable[..., Any]] = {}
        for name, m in service.methods.items():
            make = channel.unary_stream if m.stream else channel.unary_unary
            self._calls[name] = make(
                service.path(name),
                request_serializer=m.request.SerializeToString,
                response_deserializer=m.response.FromString,
            )

    def __getattr__(self, name: str) -> Callable[..., Any]:
        try:
            return self._calls[name]
        except KeyError:
            raise AttributeError(name) from None


def client(channel: grpc.Channel, service: Service) -> Any:
    """A client of ``service`` on ``channel``: ``client.Allocate(request, timeout=5)``
    returns the response (a stream method returns an iterator of responses)."""
    return _Client(channel, service)


def unix_channel(path: str) -> grpc.Channel:
    """An insecure channel to the unix socket ``path`` (absolute)."""
    return grpc.insecure_channel(f"unix://{os.path.abspath(path)}")


def unix_server(path: str, *, workers: int = 8) -> grpc.Server:
    """A started server listening on the unix socket ``path`` (a stale socket file there
    is removed first; the socket is made mode 0600 by the umask of the process).

    Raises:
        ConfigError: the absolute path is longer than :data:`MAX_SOCKET_PATH` bytes (one
            line naming it and its length; the directory comes from the command line).
        OSError: the socket cannot be bound.
    """
    from concurrent import futures

    from ..core.errors import ConfigError

    address = os.path.abspath(path)
    length = len(os.fsencode(address))
    if length > MAX_SOCKET_PATH:
        raise ConfigError(
            f"unix socket path {address} is {length} bytes long; gRPC binds at most "
            f"{MAX_SOCKET_PATH}",
            hint="choose a shorter directory (--plugin-dir, --registry-dir)",
        )
    if os.path.lexists(path):
        os.unlink(path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    try:
        port = server.add_insecure_port(f"unix://{address}")
    except RuntimeError:  # grpcio >= 1.50 raises instead of returning 0
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {path}")
    server.start()
    return server
