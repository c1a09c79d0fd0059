"""Kubernetes node agents: a kubelet device plugin and a DRA kubelet plugin that advertise
the host's GPUs (NVIDIA, AMD, Intel) and hand them to pods through CDI.

Needs the ``k8s`` extra (``pip install 'ocihook[k8s]'``: grpcio and protobuf). Nothing
outside this package imports grpc or protobuf; the hook, ``edit`` and the runtime wrapper
never import this package.

* :mod:`.api` — the wire contracts: ocihook's own ``.proto`` declarations of kubelet's
  device plugin API v1beta1, plugin registration API v1 and DRA kubelet plugin API v1beta1,
  with their generated message modules (committed; see ``scripts/gen-k8s-protos``);
* :mod:`.rpc` — the gRPC services bound by hand to those messages (server and client);
* :mod:`.inventory` — the devices the node advertises, per resource, with their health and
  NUMA node, from host discovery (read through a containerised plugin's view of the host);
* :mod:`.nvconfig` — NVIDIA's device plugin configuration file, read as it is;
* :mod:`.deviceplugin` — ``ocihook k8s device-plugin``;
* :mod:`.dra` — ``ocihook k8s dra-plugin``;
* :mod:`.features` — node-feature-discovery labels and Prometheus metrics.
"""
