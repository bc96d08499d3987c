"""GPU metrics attributed to Kubernetes pods through the kubelet's pod-resources API: a real
gRPC server on a unix socket answering `v1.PodResourcesLister/List` as a kubelet does, with
every field of the published v1 messages (CPU ids, memory, topology, which gpuaudit does
not read and must skip), then the exporter's scrape."""

from __future__ import annotations

import tempfile
from concurrent import futures
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuaudit.telemetry import exporter, metrics
from gpuaudit.telemetry.podresources import METHOD, PodAttribution, PodDevice, list_gpus

grpc = pytest.importorskip("grpc")
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

# The kubelet's pkg/apis/podresources/v1/api.proto (the messages List answers with), field
# by field: (message, ((name, number, type, repeated, message type), ...)).
T_INT64, T_STRING, T_MESSAGE, T_UINT64 = 3, 9, 11, 4
KUBELET_V1 = (
    ("ListPodResourcesResponse", (("pod_resources", 1, T_MESSAGE, True, "PodResources"),)),
    ("PodResources", (("name", 1, T_STRING, False, None), ("namespace", 2, T_STRING, False, None),
                      ("containers", 3, T_MESSAGE, True, "ContainerResources"))),
    ("ContainerResources", (("name", 1, T_STRING, False, None),
                            ("devices", 2, T_MESSAGE, True, "ContainerDevices"),
                            ("cpu_ids", 3, T_INT64, True, None),
                            ("memory", 4, T_MESSAGE, True, "ContainerMemory"))),
    ("ContainerMemory", (("memory_type", 1, T_STRING, False, None),
                         ("size", 2, T_UINT64, False, None),
                         ("topology", 3, T_MESSAGE, False, "TopologyInfo"))),
    ("ContainerDevices", (("resource_name", 1, T_STRING, False, None),
                          ("device_ids", 2, T_STRING, True, None),
                          ("topology", 3, T_MESSAGE, False, "TopologyInfo"))),
    ("TopologyInfo", (("nodes", 1, T_MESSAGE, True, "NUMANode"),)),
    ("NUMANode", (("ID", 1, T_INT64, False, None),)),
)
UUIDS = ("GPU-6e2f0a55-0000-4000-8000-000000000001", "GPU-6e2f0a55-0000-4000-8000-000000000002")


def _kubelet_messages() -> dict:
    proto = descriptor_pb2.FileDescriptorProto(name="kubelet_v1_test.proto", package="v1",
                                               syntax="proto3")
    for name, fields in KUBELET_V1:
        msg = proto.message_type.add(name=name)
        for field, number, kind, repeated, type_name in fields:
            msg.field.add(name=field, number=number, type=kind, label=3 if repeated else 1,
                          type_name=f".v1.{type_name}" if type_name else None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{n}"))
            for n, _ in KUBELET_V1}


def _answer():
    k = _kubelet_messages()
    numa = k["TopologyInfo"](nodes=[k["NUMANode"](ID=1)])
    trainer = k["PodResources"](name="trainer-0", namespace="ml", containers=[
        k["ContainerResources"](
            name="pytorch", cpu_ids=[4, 5, 6],
            memory=[k["ContainerMemory"](memory_type="memory", size=1 << 30, topology=numa)],
            devices=[k["ContainerDevices"](resource_name="nvidia.com/gpu",
                                           device_ids=[UUIDS[1]], topology=numa),
                     k["ContainerDevices"](resource_name="example.com/nic",
                                           device_ids=["nic-3"])])])
    other = k["PodResources"](name="web-1", namespace="default", containers=[
        k["ContainerResources"](name="nginx", cpu_ids=[1])])
    return k["ListPodResourcesResponse"](pod_resources=[trainer, other])


@pytest.fixture
def kubelet():
    """A gRPC server on a unix socket that answers List like the kubelet."""
    calls = []

    def list_(request: bytes, context) -> bytes:
        calls.append(request)
        return _answer().SerializeToString()

    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(list_)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    directory = tempfile.mkdtemp(prefix="gak")  # short: a unix socket path is 107 bytes
    socket = str(Path(directory) / "kubelet.sock")
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield socket, calls
    finally:
        server.stop(grace=None)


def test_the_kubelet_says_which_pod_holds_which_gpu(kubelet):
    socket, calls = kubelet
    assert METHOD == "/v1.PodResourcesLister/List"
    assert list_gpus(socket) == {UUIDS[1]: PodDevice("ml", "trainer-0", "pytorch")}
    assert calls == [b""]  # an empty ListPodResourcesRequest


def test_a_kubelet_that_cannot_be_asked_is_an_oserror(tmp_path):
    with pytest.raises(OSError, match=r"pod-resources API at .*: UNAVAILABLE"):
        list_gpus(str(tmp_path / "missing.sock"), timeout_s=2.0)
    pods = PodAttribution(str(tmp_path / "missing.sock"))
    assert pods.lookup() == {} and "UNAVAILABLE" in pods.problem


def test_the_scrape_names_the_pod_beside_the_gpus_metrics(kubelet):
    from tests.support.telemetry import latest_for, two_gpus

    sample = two_gpus()
    # The GPUs of the sample get the UUIDs the kubelet knows.
    gpus = tuple(g.model_copy(update={"uuid": u})
                 for g, u in zip(sample.gpus, UUIDS, strict=True))
    latest = latest_for(sample.model_copy(update={"gpus": gpus}))
    text = exporter.generate_latest(exporter.registry(latest, pods=PodAttribution(kubelet[0]))
                                    ).decode()
    infos = [s for f in text_string_to_metric_families(text) for s in f.samples
             if s.name == metrics.PREFIX + metrics.POD_INFO]
    assert len(infos) == 1  # GPU 0 is not allocated to any pod
    (info,) = infos
    assert info.value == 1.0 and info.labels["uuid"] == UUIDS[1] and info.labels["gpu"] == "1"
    assert (info.labels["namespace"], info.labels["pod"], info.labels["container"]) == (
        "ml", "trainer-0", "pytorch")
    # The info series joins the GPU's other series on the same labels.
    util = [s for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "gpuaudit_up" and s.labels["uuid"] == UUIDS[1]]
    assert util and {k: util[0].labels[k] for k in metrics.GPU_LABELS} == {
        k: info.labels[k] for k in metrics.GPU_LABELS}
