"""The gateway's gRPC client when a pool's TLS files vanish after the policy loaded (a secret swapped mid-reload):
no channel, every call refused with the reason, never a plaintext one and never an exception out of the registry."""

import asyncio

import pytest

from gateway.backends.grpc_backend import GrpcWorkerBackend
from gateway.backends.worker_backend import BackendError
from gateway.policy.schema import GrpcTls
from proto.gen import worker_pb2
from tests.certs import Authority


def test_tls_files_gone_since_the_policy_loaded_leave_a_client_that_refuses_every_call(tmp_path):
    authority = Authority(tmp_path)
    tls = GrpcTls(ca_file=str(authority.ca))
    authority.ca.unlink()
    backend = GrpcWorkerBackend("grpc://10.0.0.9:50061", "m", "edge", tls=tls)

    async def calls():
        with pytest.raises(BackendError, match="TLS files unreadable since the policy loaded"):
            await backend._fetch_stats()
        with pytest.raises(BackendError, match="TLS files unreadable"):
            async for _ in backend._stream(worker_pb2.GenerateRequest(), 1.0):
                pass
        await backend.refresh()  # a health poll: the backend is unhealthy, the poller goes on
        assert not backend.is_healthy
        await backend.close()

    asyncio.run(calls())
