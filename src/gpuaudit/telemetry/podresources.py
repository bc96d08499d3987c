"""Which Kubernetes pod holds each GPU: the kubelet's PodResources API (gRPC, v1, on the node's
/var/lib/kubelet/pod-resources/kubelet.sock), the source dcgm-exporter uses for the same
attribution. The NVIDIA device plugin hands GPUs out by UUID, so `List` tells, per GPU UUID,
the namespace, pod and container it was allocated to.

The messages are built at run time from their descriptor (protobuf's own machinery, the
fields gpuaudit reads, with the kubelet's field numbers; parsing skips the others), so no
generated code is shipped. grpcio and protobuf are imported when asked for (the `fleet` extra
brings them); the exporter calls `PodAttribution.lookup` at most every REFRESH_S.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
METHOD = "/v1.PodResourcesLister/List"
GPU_RESOURCES = ("nvidia.com/gpu",)  # the device plugin's resource; MIG and shared variants
GPU_PREFIX = "nvidia.com/"  # ... are nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared
REFRESH_S = 30.0
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class PodDevice:
    namespace: str
    pod: str
    container: str


# (message, ((field, number, type, label, message type or None), ...)); the kubelet's
# pkg/apis/podresources/v1/api.proto numbers.
_STRING, _MESSAGE = 9, 11
_OPTIONAL, _REPEATED = 1, 3
_MESSAGES = (
    ("ListPodResourcesRequest", ()),
    ("ListPodResourcesResponse", (("pod_resources", 1, _MESSAGE, _REPEATED, "PodResources"),)),
    ("PodResources", (("name", 1, _STRING, _OPTIONAL, None),
                      ("namespace", 2, _STRING, _OPTIONAL, None),
                      ("containers", 3, _MESSAGE, _REPEATED, "ContainerResources"))),
    ("ContainerResources", (("name", 1, _STRING, _OPTIONAL, None),
                            ("devices", 2, _MESSAGE, _REPEATED, "ContainerDevices"))),
    ("ContainerDevices", (("resource_name", 1, _STRING, _OPTIONAL, None),
                          ("device_ids", 2, _STRING, _REPEATED, None))),
)
_classes: dict[str, Any] = {}


def messages() -> dict[str, Any]:
    """The message classes, by name (built once)."""
    if _classes:
        return _classes
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="gpuaudit/podresources_v1.proto",
                                               package="v1", syntax="proto3")
    for name, fields in _MESSAGES:
        message = proto.message_type.add(name=name)
        for field, number, kind, label, type_name in fields:
            message.field.add(name=field, number=number, type=kind, label=label,
                              type_name=f".v1.{type_name}" if type_name else None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    for name, _ in _MESSAGES:
        _classes[name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}"))
    return _classes


def is_gpu(resource_name: str) -> bool:
    return resource_name in GPU_RESOURCES or resource_name.startswith(GPU_PREFIX)


def list_gpus(socket: str = DEFAULT_SOCKET, timeout_s: float = TIMEOUT_S) -> dict[str, PodDevice]:
    """GPU device id (a UUID, or a MIG device's id) → the pod's container holding it, as the
    kubelet at `socket` says now. Raises OSError with the reason when it cannot be asked."""
    import grpc

    m = messages()
    target = socket if socket.startswith("unix:") else f"unix://{socket}"
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(METHOD, request_serializer=lambda r: r.SerializeToString(),
                                   response_deserializer=m["ListPodResourcesResponse"].FromString)
        try:
            answer = call(m["ListPodResourcesRequest"](), timeout=timeout_s)
        except grpc.RpcError as exc:
            raise OSError(f"the kubelet's pod-resources API at {socket}: "
                          f"{exc.code().name}: {exc.details()}") from None
    found = {}
    for pod in answer.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if is_gpu(devices.resource_name):
                    for device in devices.device_ids:
                        found[device] = PodDevice(pod.namespace, pod.name, container.name)
    return found


class PodAttribution:
    """The GPU → pod map, asked of the kubelet at most every `refresh_s`; when the kubelet
    cannot be asked, the last answer stands and `problem` says why."""

    def __init__(self, socket: str = DEFAULT_SOCKET, refresh_s: float = REFRESH_S) -> None:
        self.socket, self.refresh_s = socket, refresh_s
        self.devices: dict[str, PodDevice] = {}
        self.problem: str | None = None
        self._next = 0.0
        self._lock = threading.Lock()

    def lookup(self) -> dict[str, PodDevice]:
        with self._lock:
            now = time.monotonic()
            if now >= self._next:
                self._next = now + self.refresh_s
                try:
                    self.devices, self.problem = list_gpus(self.socket), None
                except OSError as exc:
                    self.problem = str(exc)
            return self.devices


__all__ = ["DEFAULT_SOCKET", "PodAttribution", "PodDevice", "list_gpus", "messages"]
