"""gRPC between the gateway and workers over TLS: a worker serving with a certificate (TANDEM_TLS_CERT_FILE), the
gateway's client trusting it by a pool's `tls:` and, where the worker asks (TANDEM_TLS_CLIENT_CA_FILE), showing a
client certificate. Real processes, real handshakes, the official `openai` client through the gateway."""

import asyncio
import contextlib

import grpc
import openai
import pytest
import yaml

from gateway.backends.grpc_backend import GrpcWorkerBackend
from gateway.backends.worker_backend import BackendError
from gateway.policy.schema import GrpcTls
from proto.gen import worker_pb2, worker_pb2_grpc
from tests.certs import Authority
from tests.conftest import free_port
from tests.stack import DEFAULT_POLICY, start_gateway, start_worker_process

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def authority(tmp_path_factory):
    ca = Authority(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("worker", dns_names=("localhost",), ips=("127.0.0.1",)), ca.issue("gateway", client=True)


def _sim_worker(demo_checkpoint, env: dict[str, str]):
    port = free_port()
    process = start_worker_process(["sim-worker", "--model", str(demo_checkpoint), "--port", str(port)], env)
    return port, process


@pytest.fixture(scope="module")
def tls_worker(authority, demo_checkpoint):
    _, worker, _ = authority
    port, process = _sim_worker(
        demo_checkpoint, {"TANDEM_TLS_CERT_FILE": str(worker.cert), "TANDEM_TLS_KEY_FILE": str(worker.key)}
    )
    yield port
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def mtls_edge_agent(authority, demo_checkpoint, tmp_path_factory):
    """An edge agent (the INT4 ONNX model on onnxruntime) that takes only clients the test CA signed."""
    ca, worker, _ = authority
    env = {"TANDEM_TLS_CERT_FILE": str(worker.cert), "TANDEM_TLS_KEY_FILE": str(worker.key)}
    port, cache = free_port(), tmp_path_factory.mktemp("edge-exports")
    args = ["edge-agent", "--model", str(demo_checkpoint), "--port", str(port), "--cache-dir", str(cache)]
    process = start_worker_process(args, env | {"TANDEM_TLS_CLIENT_CA_FILE": str(ca.ca)})
    yield port
    process.terminate()
    process.wait(timeout=15)


@pytest.fixture(scope="module")
def mtls_worker(authority, demo_checkpoint):
    ca, worker, _ = authority
    env = {"TANDEM_TLS_CERT_FILE": str(worker.cert), "TANDEM_TLS_KEY_FILE": str(worker.key)}
    port, process = _sim_worker(demo_checkpoint, env | {"TANDEM_TLS_CLIENT_CA_FILE": str(ca.ca)})
    yield port
    process.terminate()
    process.wait(timeout=10)


async def _stats(endpoint: str, tls: GrpcTls | None) -> worker_pb2.StatsReply:
    backend = GrpcWorkerBackend(endpoint, "m", "cloud", tls=tls)
    try:
        return await backend._fetch_stats()
    finally:
        await backend.close()


def test_the_gateways_client_reaches_a_tls_worker_with_the_pools_trust_roots_and_not_without(authority, tls_worker):
    ca, _, _ = authority
    reply = asyncio.run(_stats(f"grpc://localhost:{tls_worker}", GrpcTls(ca_file=str(ca.ca))))
    assert reply.model_id
    # An address in the certificate (IP SAN), and a name given for an endpoint dialled by address
    assert asyncio.run(_stats(f"grpc://127.0.0.1:{tls_worker}", GrpcTls(ca_file=str(ca.ca)))).model_id
    named = GrpcTls(ca_file=str(ca.ca), server_name="localhost")
    assert asyncio.run(_stats(f"grpc://127.0.0.1:{tls_worker}", named)).model_id
    with pytest.raises(BackendError) as plaintext:  # the worker speaks TLS only: a plaintext client gets nothing
        asyncio.run(_stats(f"grpc://localhost:{tls_worker}", None))
    assert plaintext.value.code == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(BackendError):  # trusting the system's roots only: the test CA's certificate is refused
        asyncio.run(_stats(f"grpc://localhost:{tls_worker}", GrpcTls()))
    with pytest.raises(BackendError):  # a name the certificate does not carry
        asyncio.run(_stats(f"grpc://127.0.0.1:{tls_worker}", GrpcTls(ca_file=str(ca.ca), server_name="worker.x")))


def test_a_worker_that_asks_for_client_certificates_takes_only_clients_its_ca_signed(authority, mtls_worker, tmp_path):
    ca, _, gateway = authority
    endpoint = f"grpc://localhost:{mtls_worker}"
    with pytest.raises(BackendError):
        asyncio.run(_stats(endpoint, GrpcTls(ca_file=str(ca.ca))))
    stranger = Authority(tmp_path / "other", name="another CA").issue("stranger", client=True)
    with pytest.raises(BackendError):
        asyncio.run(
            _stats(endpoint, GrpcTls(ca_file=str(ca.ca), cert_file=str(stranger.cert), key_file=str(stranger.key)))
        )
    good = GrpcTls(ca_file=str(ca.ca), cert_file=str(gateway.cert), key_file=str(gateway.key))
    assert asyncio.run(_stats(endpoint, good)).model_id


def test_a_plaintext_client_cannot_reach_the_tls_worker_directly(tls_worker):
    async def call():
        async with grpc.aio.insecure_channel(f"127.0.0.1:{tls_worker}") as channel:
            await worker_pb2_grpc.WorkerStub(channel).Stats(worker_pb2.StatsRequest(), timeout=2)

    with pytest.raises(grpc.aio.AioRpcError):
        asyncio.run(call())


@contextlib.contextmanager
def _gateway_over_tls(authority, demo_checkpoint, tmp_path, cloud_port: int, edge_port: int):
    """A gateway whose pools reach their workers over TLS with its client certificate; yields an `openai` client."""
    ca, _, gateway = authority
    policy = yaml.safe_load(DEFAULT_POLICY.read_text())
    tls = {"ca_file": str(ca.ca), "cert_file": str(gateway.cert), "key_file": str(gateway.key)}
    for pool, port in (("cloud", cloud_port), ("edge", edge_port)):
        policy["pools"][pool]["endpoints"] = [f"grpc://localhost:{port}"]
        policy["pools"][pool]["tls"] = tls
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    port = free_port()
    stack = start_gateway(demo_checkpoint, path, port, log_dir=tmp_path / "logs")
    try:
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    finally:
        stack.stop()


def _ask(client, model: str, content: str, headers: dict[str, str] | None = None) -> str:
    """The request's route; its answer has text."""
    reply = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}], max_tokens=4, extra_headers=headers or {}
    )
    assert reply.parse().choices[0].message.content is not None
    return reply.headers["x-tandem-route"]


def test_requests_reach_tls_workers_through_the_gateway(authority, tls_worker, mtls_worker, demo_checkpoint, tmp_path):
    # The edge pool's worker reports kind=cloud: the gateway never gives it a private request (it is there for the
    # policy's private rule, and readiness)
    with _gateway_over_tls(authority, demo_checkpoint, tmp_path, mtls_worker, tls_worker) as client:
        assert _ask(client, demo_checkpoint.name, "Say hello over TLS.").startswith("cloud")


def test_private_prompts_reach_the_edge_agent_over_mutual_tls(
    authority, tls_worker, mtls_edge_agent, demo_checkpoint, tmp_path
):
    """The privacy path over TLS: a tagged request, and an untagged one with an SSN in it, are answered by the edge
    agent, which takes only the gateway's client certificate."""
    with _gateway_over_tls(authority, demo_checkpoint, tmp_path, tls_worker, mtls_edge_agent) as client:
        for content, headers in (
            ("Summarize my notes.", {"X-Tandem-Privacy": "private"}),
            ("Please update my SSN to 631817082 before Friday.", None),
        ):
            route = _ask(client, demo_checkpoint.name, content, headers)
            assert route.startswith("edge; rule=private"), route
