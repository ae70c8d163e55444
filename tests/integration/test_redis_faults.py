"""Redis as it misbehaves, against the gateway's users of it (rate limits, the watch on Redis): a Redis some
milliseconds away, a blip, a URL that cannot work, a burst of one tenant's requests."""

import asyncio
import shutil
import socket
import subprocess
import time

import pytest
import redis

from gateway.lifespan import ConfigError, preflight
from gateway.limits.admission import Admission, AdmissionController
from gateway.redis_client import RedisMisconfigured, RedisWatch, connect, unreachable
from gateway.tenants import Tenants
from serving.openai.errors import RateLimited
from tests.conftest import free_port

pytestmark = pytest.mark.integration


def test_a_tenants_concurrency_limit_holds_when_its_rate_goes_through_redis(redis_url, tmp_path):
    """The slot was counted after Redis's round trip for the rate: a burst of 12 all passed the check before any
    was counted, for a tenant with max_concurrent 2 (a review). Without Redis the local bucket never yielded."""
    path = tmp_path / "tenants.yaml"
    tenant = f"gamma-{time.monotonic_ns()}"
    path.write_text(f"tenants:\n  {tenant}: {{requests_per_minute: 6000, max_concurrent: 2}}\n")

    async def burst():
        client = connect(redis_url)
        watch = RedisWatch(client=client)
        controller = AdmissionController(Tenants.load(path, []), client, watch=watch)
        try:
            results = await asyncio.gather(*(controller.admit(tenant) for _ in range(12)), return_exceptions=True)
            admitted = [r for r in results if isinstance(r, Admission)]
            for admission in admitted:
                await admission.release()
            again = await controller.admit(tenant)  # the slots given back, refused ones included
            await again.release()
            return admitted, [r for r in results if not isinstance(r, Admission)]
        finally:
            await watch.close()
            await client.aclose()

    admitted, refused = asyncio.run(burst())
    assert len(admitted) == 2 and len(refused) == 10
    assert all(isinstance(r, RateLimited) and "in flight" in str(r.message) for r in refused)


async def _delaying_proxy(target_port: int, delay_s: float) -> tuple[asyncio.Server, int]:
    """A TCP proxy to 127.0.0.1:target_port that holds every chunk `delay_s`, each way: a Redis that far away."""

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                await asyncio.sleep(delay_s)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def serve(client_reader, client_writer):
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))

    port = free_port()
    return await asyncio.start_server(serve, "127.0.0.1", port), port


def test_a_redis_some_milliseconds_away_is_used_again_after_a_blip(redis_url):
    """A new connection to a Redis 20 ms away takes more than the 50 ms a command may take, and a timeout drops the
    connection it had: after one blip that gateway never used Redis again (a review). Now a command that must open
    its connection has longer, and after a failure a probe in the background brings Redis back."""
    target = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    direct = redis.Redis.from_url(redis_url)

    async def run():
        proxy, port = await _delaying_proxy(target, 0.008)
        client = connect(f"redis://127.0.0.1:{port}/0")
        watch = RedisWatch(retry_after_s=0.2, client=client)
        try:
            assert await asyncio.gather(*(watch.ask(client.ping()) for _ in range(4)))  # four new connections
            await asyncio.to_thread(direct.execute_command, "CLIENT", "PAUSE", "300", "ALL")  # a blip
            with pytest.raises(TimeoutError):
                await watch.ask(client.ping())
            assert not watch.usable() and watch.last_error
            deadline = time.monotonic() + 5
            while not watch.usable():
                assert time.monotonic() < deadline, watch.last_error
                await asyncio.sleep(0.05)
            for _ in range(20):  # Redis again, each within the budget of a command
                assert await watch.ask(client.ping())
            return watch.answered
        finally:
            await watch.close()
            await client.aclose()
            proxy.close()

    assert asyncio.run(run()) is True


@pytest.fixture(scope="module")
def redis_with_password(tmp_path_factory):
    port = free_port()
    process = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--requirepass", "s3cret", "--dir", str(tmp_path_factory.mktemp("redis-pw"))],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis(port=port, password="s3cret").ping()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield port
    process.terminate()
    process.wait(timeout=10)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis://127.0.0.1:{port}/0", "needs a password: write it in REDIS_URL"),
        ("redis://:wrong@127.0.0.1:{port}/0", "refused REDIS_URL's user or password"),
        ("redis://:s3cret@127.0.0.1:{port}/99", "has no database 99"),
    ],
)
def test_a_redis_url_that_cannot_work_stops_the_start(redis_with_password, demo_checkpoint, url, said):
    """A password missing or refused, or a database Redis has not, read as an outage: the gateway started, said
    ready, and kept its limits per replica for good after two WARNING lines (a review)."""
    url = url.format(port=redis_with_password)

    async def probe():
        client = connect(url)
        try:
            return await unreachable(client)
        finally:
            await client.aclose()

    with pytest.raises(RedisMisconfigured, match=said):
        asyncio.run(probe())
    from gateway.config import Settings

    settings = Settings(model_dir=demo_checkpoint, redis_url=url, api_keys=["k"], watch_policy=False)
    with pytest.raises(ConfigError, match=f"REDIS_URL: .*{said}") as refused:
        preflight(settings)
    assert "s3cret" not in str(refused.value) and "wrong" not in str(refused.value)
    right = f"redis://:s3cret@127.0.0.1:{redis_with_password}/0"
    preflight(Settings(model_dir=demo_checkpoint, redis_url=right, api_keys=["k"], watch_policy=False))


def test_a_stalled_redis_costs_a_burst_the_commands_budget_not_the_connections(redis_url):
    """Commands in flight were counted twice against the idle connections: half of a burst of 8 over 8 open
    connections waited 0.5 s on a stalled Redis instead of 50 ms (a review)."""
    direct = redis.Redis.from_url(redis_url)

    async def run():
        client = connect(redis_url)
        watch = RedisWatch(client=client)
        try:
            await asyncio.gather(*(watch.ask(client.ping()) for _ in range(8)))  # eight connections open, idle
            await asyncio.to_thread(direct.execute_command, "CLIENT", "PAUSE", "600", "ALL")

            async def timed():
                started = time.monotonic()
                with pytest.raises(TimeoutError):
                    await watch.ask(client.ping())
                return time.monotonic() - started

            return await asyncio.gather(*(timed() for _ in range(8)))
        finally:
            await watch.close()
            await client.aclose()

    waits = asyncio.run(run())
    direct.execute_command("CLIENT", "UNPAUSE")
    assert max(waits) < 0.3, waits


def test_an_acl_user_without_ping_has_redis_back_after_a_failure(redis_url):
    """A least-privilege user (`-ping`) is answered NOPERM: the probe took that for no answer, and the gateway kept
    its limits per replica for good after one failure (a review)."""
    direct = redis.Redis.from_url(redis_url)
    direct.execute_command("ACL", "SETUSER", "noping", "on", ">pw", "~*", "&*", "+@all", "-ping")
    url = redis_url.replace("redis://", "redis://noping:pw@", 1)

    async def run():
        client = connect(url)
        watch = RedisWatch(retry_after_s=0.1, client=client)
        try:
            assert await unreachable(client) is None  # answered
            watch.failed("a blip")
            deadline = time.monotonic() + 5
            while not watch.usable():
                assert time.monotonic() < deadline, watch.last_error
                await asyncio.sleep(0.05)
            return watch.answered
        finally:
            await watch.close()
            await client.aclose()

    try:
        assert asyncio.run(run()) is True
    finally:
        direct.execute_command("ACL", "DELUSER", "noping")


def test_a_redis_url_of_the_wrong_scheme_stops_the_start_saying_which(demo_checkpoint, tmp_path):
    """rediss:// to a plain Redis stalled and redis:// to a TLS one was dropped: each read as an outage, the gateway
    ready without Redis for good, its limits per replica (a review). The start now says which scheme Redis speaks,
    and starts with the right one."""
    from gateway.config import Settings
    from tests.certs import Authority
    from tests.conftest import start_redis_server

    issued = Authority(tmp_path / "ca").issue("redis", ips=("127.0.0.1",))
    tls_port = free_port()
    tls = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", "0", "--tls-port", str(tls_port),
         "--bind", "127.0.0.1", "--save", "", "--tls-cert-file", str(issued.cert), "--tls-key-file", str(issued.key),
         "--tls-auth-clients", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    plain_url, plain = start_redis_server(tmp_path)
    try:
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", tls_port)) != 0:
            assert tls.poll() is None, "redis-server did not start with TLS (built without it?)"
            assert time.monotonic() < deadline, "redis-server with TLS did not start"
            time.sleep(0.05)
        cases = [
            (f"redis://127.0.0.1:{tls_port}/0", "speaks TLS: REDIS_URL must start rediss://"),
            (plain_url.replace("redis://", "rediss://"), "speaks plain TCP, not TLS: REDIS_URL must start redis://"),
        ]
        for url, said in cases:
            settings = Settings(model_dir=demo_checkpoint, redis_url=url, api_keys=["k"], watch_policy=False)
            with pytest.raises(ConfigError, match=f"REDIS_URL: .*{said}"):
                preflight(settings)
        right = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={issued.cert.parent / 'tandem-test-CA.pem'}"
        preflight(Settings(model_dir=demo_checkpoint, redis_url=right, api_keys=["k"], watch_policy=False))
        preflight(Settings(model_dir=demo_checkpoint, redis_url=plain_url, api_keys=["k"], watch_policy=False))
    finally:
        for process in (tls, plain):
            process.terminate()
            process.wait(timeout=10)
