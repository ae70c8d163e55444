"""The gateway's hint store against a real Redis: the lookup (one script over the prompt's blocks), the workers'
key format, pending hints, and a Redis that dies mid-run (requests go on, on the approximate index, and the mode
says so)."""

import asyncio
import time

import pytest
import redis
import redis.asyncio

from gateway import metrics
from gateway.hints.prefix_hints import PrefixHints
from proto.prefix_hash import prefix_hashes
from proto.prefix_hints import HOLD_SCRIPT, block_key
from tests.conftest import start_redis_server

pytestmark = pytest.mark.integration
MODEL = "tandem-demo"
A, B = "grpc://127.0.0.1:7001", "grpc://127.0.0.1:7002"


def publish(client: redis.Redis, worker: str, hashes: list[bytes], ttl_ms: int = 30_000, model: str = MODEL) -> None:
    """What a worker's HintPublisher writes (proto/prefix_hints.py)."""
    client.register_script(HOLD_SCRIPT)(keys=[block_key(model, h) for h in hashes], args=[worker, ttl_ms, "gt"])


def mode_gauge(mode: str) -> float:
    return metrics.PREFIX_HINT_MODE.labels(mode)._value.get()


def test_lookup_reads_what_workers_publish(tmp_path):
    url, server = start_redis_server(tmp_path)
    try:
        sync = redis.Redis.from_url(url)
        tokens = list(range(100, 170))  # 4 full blocks
        hashes = prefix_hashes(tokens, MODEL, "acme")
        publish(sync, "127.0.0.1:7001", hashes)
        publish(sync, "127.0.0.1:7002", hashes[:2])

        async def lookups():
            client = redis.asyncio.from_url(url)
            hints = PrefixHints(MODEL, client)
            assert hints.hashes("acme", tokens, 16) == hashes  # same function as the workers
            mine = await hints.match(hashes, [A, B, "grpc://127.0.0.1:7003"])
            other_tenant = await hints.match(hints.hashes("globex", tokens, 16), [A, B])
            await client.aclose()
            return hints.mode, mine, other_tenant

        mode, mine, other_tenant = asyncio.run(lookups())
        assert mode == "redis" and mode_gauge("redis") == 1
        assert mine == {A: 4, B: 2, "grpc://127.0.0.1:7003": 0}
        assert other_tenant == {A: 0, B: 0}
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_redis_dying_mid_run_falls_back_to_history_without_failing(tmp_path):
    url, server = start_redis_server(tmp_path)
    hashes = prefix_hashes(list(range(64)), MODEL, "t")

    async def run():
        client = redis.asyncio.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        hints = PrefixHints(MODEL, client, retry_after_s=0.2)
        assert await hints.match(hashes, [A]) == {A: 0}
        hints.record(A, hashes)  # what dispatch does after routing
        server.terminate()
        server.wait(timeout=10)
        during = await hints.match(hashes, [A, B])  # must not raise
        mode_during = hints.mode
        await asyncio.sleep(0.3)
        again = await hints.match(hashes, [A, B])  # retried Redis, still down: still answers
        await client.aclose()
        return mode_during, during, again

    mode_during, during, again = asyncio.run(run())
    assert mode_during == "approximate" and mode_gauge("approximate") == 1
    assert during == again == {A: 4, B: 0}  # the gateway's own routing history


async def waits_while_stopped(server, client, call, times: int = 3) -> list[float]:
    """How long each of `times` calls took with the redis-server SIGSTOPped (then it is let go and stopped)."""
    import signal

    server.send_signal(signal.SIGSTOP)
    try:
        waits = []
        for _ in range(times):
            started = time.perf_counter()
            await call()
            waits.append(time.perf_counter() - started)
        return waits
    finally:
        server.send_signal(signal.SIGCONT)
        await client.aclose()
        server.terminate()
        server.wait(timeout=10)


def test_a_redis_that_stalls_costs_a_lookup_its_budget_not_the_socket_timeout(tmp_path):
    """SIGSTOP (as a fork for a snapshot or a network stall looks from here): every request waited the client's
    0.5 s socket timeout for its hints. Now the first waits ANSWER_BUDGET_S, and those after it none."""
    from gateway.redis_client import ANSWER_BUDGET_S

    url, server = start_redis_server(tmp_path)
    hashes = prefix_hashes(list(range(64)), MODEL, "t")

    async def run():
        client = redis.asyncio.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        hints = PrefixHints(MODEL, client, retry_after_s=5.0)
        await hints.match(hashes, [A])  # connected
        hints.record(A, hashes)

        async def lookup():
            assert await hints.match(hashes, [A, B]) == {A: 4, B: 0}  # the gateway's own history

        return await waits_while_stopped(server, client, lookup), hints.mode

    waits, mode = asyncio.run(run())
    assert waits[0] < ANSWER_BUDGET_S + 0.1 and max(waits[1:]) < 0.01, waits
    assert mode == "approximate"


def test_with_redis_a_prefix_routed_moments_ago_counts_before_its_worker_announces_it(tmp_path):
    url, server = start_redis_server(tmp_path)
    hashes = prefix_hashes(list(range(64)), MODEL, "t")

    async def run():
        client = redis.asyncio.from_url(url)
        hints = PrefixHints(MODEL, client, pending_s=0.3)
        hints.record(A, hashes)  # routed, still in prefill: nothing in Redis yet
        moments_later = await hints.match(hashes, [A, B])
        await asyncio.sleep(0.4)
        after_pending = await hints.match(hashes, [A, B])  # the worker never announced it (evicted, failed)
        await client.aclose()
        return hints.mode, moments_later, after_pending

    try:
        mode, moments_later, after_pending = asyncio.run(run())
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert mode == "redis"
    assert moments_later == {A: 4, B: 0}
    assert after_pending == {A: 0, B: 0}  # from then on Redis, which knows evictions, is the truth


def test_a_replica_sees_another_replicas_pending_route_and_never_shortens_a_workers_hint(tmp_path):
    url, server = start_redis_server(tmp_path)
    hashes = prefix_hashes(list(range(64)), MODEL, "t")
    sync = redis.Redis.from_url(url)
    publish(sync, "127.0.0.1:7001", hashes[:1])  # the worker already holds block 0, with its long TTL

    async def run():
        one, two = redis.asyncio.from_url(url), redis.asyncio.from_url(url)
        first, second = PrefixHints(MODEL, one), PrefixHints(MODEL, two)
        await first.match(hashes, [A])
        first.record(A, hashes, already_held=1)
        await asyncio.sleep(0.1)  # the announcement is written in the background
        seen = await second.match(hashes, [A, B])
        await one.aclose()
        await two.aclose()
        return seen

    try:
        seen = asyncio.run(run())
        assert seen == {A: 4, B: 0}
        seconds, microseconds = sync.time()
        now_ms = seconds * 1000 + microseconds // 1000
        assert sync.zscore(block_key(MODEL, hashes[0]), "127.0.0.1:7001") - now_ms > 10_000  # the worker's kept
        assert 0 < sync.zscore(block_key(MODEL, hashes[3]), "127.0.0.1:7001") - now_ms <= 2_000  # pending: soon
        assert sync.pttl(block_key(MODEL, hashes[0])) > 10_000 and 0 < sync.pttl(block_key(MODEL, hashes[3])) <= 2_000
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_lookup_equals_reading_every_block_of_every_worker(redis_url):
    """The script's bisection over the prompt's blocks gives what reading every block's holders gives, on holdings
    as workers publish them (a prefix of the prompt, of any length), workers holding later blocks only, and a
    worker whose hints have expired; on holdings with gaps, a block the worker holds followed by one it does not,
    never under its leading run."""
    import random

    from gateway.hints.redis_index import RedisHintIndex

    rng = random.Random(5)
    sync = redis.Redis.from_url(redis_url)
    hashes = prefix_hashes(list(range(300, 300 + 16 * 12)), MODEL, "equiv")
    workers = [f"127.0.0.1:{8000 + i}" for i in range(40)]
    gapped = [f"127.0.0.1:{8100 + i}" for i in range(20)]
    for worker in workers:
        publish(sync, worker, hashes[: rng.randrange(13)] if rng.random() < 0.8 else hashes[rng.randrange(1, 12) :])
    for worker in gapped:
        publish(sync, worker, [h for i, h in enumerate(hashes) if i < 2 or rng.random() < 0.7])
    publish(sync, "127.0.0.1:9999", hashes, ttl_ms=1)  # expired by the time of the lookup
    workers.append("127.0.0.1:9999")
    time.sleep(0.01)
    seconds, microseconds = sync.time()
    now_ms = seconds * 1000 + microseconds // 1000
    held = {w: [(s or 0) > now_ms for s in (sync.zscore(block_key(MODEL, h), w) for h in hashes)] + [False]
            for w in workers + gapped}  # fmt: skip

    def leading_run(worker: str) -> int:
        return held[worker].index(False)

    few = rng.sample(workers, 5) + ["127.0.0.1:1"]  # fewer candidates than holders: the other walk of the first block
    # more candidates than holders, and more holders than the script looks for in its argument's string as it is
    everyone = workers + gapped + [f"127.0.0.1:{9000 + i}" for i in range(100)]

    async def lookup():
        client = redis.asyncio.from_url(redis_url)
        try:
            index = RedisHintIndex(client, MODEL)
            return (await index.match(hashes, workers), await index.match(hashes, few),
                    await index.match(hashes, gapped), await index.match(hashes, everyone))  # fmt: skip
        finally:
            await client.aclose()

    got, got_few, got_gapped, got_everyone = asyncio.run(lookup())  # only the first block's holders are named
    assert got == {w: leading_run(w) for w in workers if leading_run(w)} and "127.0.0.1:9999" not in got
    assert got_few == {w: got[w] for w in few if w in got}
    assert any(0 < n < len(hashes) for n in got.values()) and any(n == len(hashes) for n in got.values())
    assert got_gapped.keys() == set(gapped)
    for worker, n in got_gapped.items():
        assert n >= leading_run(worker) and held[worker][n - 1] and not held[worker][n], (worker, n, held[worker])
    assert any(n > leading_run(w) for w, n in got_gapped.items())  # the gaps did mislead it: the test bites
    assert got_everyone == got | got_gapped  # a worker's answer is its own, whoever else is asked about


def test_a_long_prompt_of_a_model_named_in_any_script_reads_the_keys_its_workers_wrote(redis_url):
    """The lookup sends the prompt's hashes, and the script names their keys as a worker's HintPublisher does
    (block_key): for a model id with non-ASCII letters, a colon and a space, and a prompt of 300 blocks (hashes
    with every byte value), each worker's leading run; another model's hints for the same prompt are not read."""
    from gateway.hints.redis_index import RedisHintIndex

    model = "llama 3:模型/v1"
    hashes = prefix_hashes(list(range(16 * 300)), model, "long")
    assert {b for h in hashes for b in h} == set(range(256))  # NUL, '%', quote and high bytes among them
    sync = redis.Redis.from_url(redis_url)
    publish(sync, "127.0.0.1:1", hashes[:257], model=model)
    publish(sync, "127.0.0.1:2", hashes[:1], model=model)
    publish(sync, "127.0.0.1:3", hashes, model=model + "-other")

    async def lookup():
        client = redis.asyncio.from_url(redis_url)
        try:
            return await RedisHintIndex(client, model).match(hashes, ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"])
        finally:
            await client.aclose()

    assert asyncio.run(lookup()) == {"127.0.0.1:1": 257, "127.0.0.1:2": 1}


def test_a_pending_hint_replaces_an_expired_one_and_a_dead_workers_member_goes(redis_url):
    """A member whose hint has expired reads as absent, and the next write (a gateway's pending one included)
    clears it first, so NX does not keep the stale member."""
    sync = redis.Redis.from_url(redis_url)
    hashes = prefix_hashes(list(range(500, 532)), MODEL, "stale")
    publish(sync, "127.0.0.1:7002", hashes)  # keeps the key alive
    publish(sync, "127.0.0.1:7001", hashes, ttl_ms=1)
    time.sleep(0.01)

    async def run():
        client = redis.asyncio.from_url(redis_url)
        hints = PrefixHints(MODEL, client, pending_s=5.0)
        before = await hints.match(hashes, [A])
        hints.record(A, hashes)  # routed there: announced as pending
        await asyncio.sleep(0.1)
        await client.aclose()
        return before

    assert asyncio.run(run()) == {A: 0}
    key = block_key(MODEL, hashes[0])
    assert sync.zscore(key, "127.0.0.1:7001") is not None and sync.zcard(key) == 2
    seconds, microseconds = sync.time()
    assert sync.zscore(key, "127.0.0.1:7001") > seconds * 1000 + microseconds // 1000  # the pending hint, live


def test_thousands_of_other_holders_neither_slow_nor_break_a_lookup(redis_url):
    """Workers outside the candidates (another pool, a shared system prompt) are not followed: the script reads
    the candidates' scores only, and 9,000 holders of the first block do not hit Lua's unpack limit."""
    from gateway.hints.redis_index import RedisHintIndex

    sync = redis.Redis.from_url(redis_url)
    hashes = prefix_hashes(list(range(700, 700 + 16 * 3)), MODEL, "crowd")
    hold = sync.register_script(HOLD_SCRIPT)
    pipe = sync.pipeline(transaction=False)
    for i in range(9000):
        hold(
            keys=[block_key(MODEL, h) for h in hashes], args=[f"10.1.{i // 250}.{i % 250}:1", 30_000, "gt"], client=pipe
        )
    pipe.execute()
    publish(sync, "127.0.0.1:7001", hashes[:2])

    async def lookup():
        client = redis.asyncio.from_url(redis_url)
        try:
            index = RedisHintIndex(client, MODEL)
            return await index.match(hashes, ["127.0.0.1:7001", "127.0.0.1:7002", "10.1.0.3:1"])
        finally:
            await client.aclose()

    assert asyncio.run(lookup()) == {"127.0.0.1:7001": 2, "10.1.0.3:1": 3}


def test_a_redis_that_stalls_costs_a_rate_limited_request_its_budget_not_the_socket_timeout(tmp_path):
    """The same stall for a tenant with limits: every request waited the socket timeout for its bucket, and again
    for its refund. Now the first waits ANSWER_BUDGET_S, those after it none, on this process's buckets."""
    from gateway.limits.admission import AdmissionController
    from gateway.redis_client import ANSWER_BUDGET_S
    from gateway.tenants import Tenants

    policy = tmp_path / "tenants.yaml"
    policy.write_text("tenants:\n  acme: {requests_per_minute: 1000, tokens_per_minute: 100000}\n")
    url, server = start_redis_server(tmp_path)

    async def run():
        client = redis.asyncio.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        controller = AdmissionController(Tenants.load(policy, []), client)
        await (await controller.admit("acme", 10)).release(5)  # connected, and a refund through Redis

        async def limited_request():
            admission = await controller.admit("acme", 10)
            await admission.charge(20)
            await admission.release(5)

        waits = await waits_while_stopped(server, client, limited_request)
        return waits, metrics.RATE_LIMIT_MODE.labels("local")._value.get()

    waits, local = asyncio.run(run())
    assert waits[0] < ANSWER_BUDGET_S + 0.1 and max(waits[1:]) < 0.01, waits
    assert local == 1


def test_a_stalled_redis_costs_a_request_one_budget_not_one_per_user(tmp_path):
    """A review: rate limits and prefix hints each waited their own 50 ms on a stalled Redis, and retried it at the
    same moment, so one request in every 5 s paid about 110 ms. They share one verdict now (RedisWatch)."""
    from gateway.limits.admission import AdmissionController
    from gateway.redis_client import ANSWER_BUDGET_S, RedisWatch
    from gateway.tenants import Tenants

    policy = tmp_path / "tenants.yaml"
    policy.write_text("tenants:\n  acme: {requests_per_minute: 1000}\n")
    url, server = start_redis_server(tmp_path)
    hashes = prefix_hashes(list(range(64)), MODEL, "t")

    async def run():
        client = redis.asyncio.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        watch = RedisWatch(retry_after_s=5.0)
        controller = AdmissionController(Tenants.load(policy, []), client, watch=watch)
        hints = PrefixHints(MODEL, client, watch=watch)
        await (await controller.admit("acme")).release()
        await hints.match(hashes, [A])

        async def request():  # what a routed request asks Redis: its admission, then its hints
            await (await controller.admit("acme")).release()
            await hints.match(hashes, [A, B])

        waits = await waits_while_stopped(server, client, request)
        return waits, (metrics.RATE_LIMIT_MODE.labels("local")._value.get(), mode_gauge("approximate"))

    waits, modes = asyncio.run(run())
    assert waits[0] < ANSWER_BUDGET_S + 0.03 and max(waits[1:]) < 0.01, waits
    # Both say they went without Redis: the hints, which never asked it, said `redis` while routing on history.
    assert modes == (1, 1)


def test_a_hint_key_of_another_type_neither_fails_a_lookup_nor_stops_a_workers_writes(redis_url):
    """(a review) One plain string written where a block's sorted set belongs (anyone who can write to the Redis)
    failed every lookup of its prompts with WRONGTYPE: each gateway took Redis for down, for hints and rate limits
    alike, again and again; the worker's writes stopped at the key, every hint after it unwritten."""
    sync = redis.Redis.from_url(redis_url)
    tokens = list(range(7300, 7364))  # 4 blocks, under a salt of this test's own: the Redis is shared
    hashes = prefix_hashes(tokens, MODEL, "wrongtype")
    publish(sync, "127.0.0.1:7001", hashes)
    sync.delete(block_key(MODEL, hashes[0]))
    sync.set(block_key(MODEL, hashes[0]), "not a sorted set")
    sync.delete(block_key(MODEL, hashes[2]))
    sync.rpush(block_key(MODEL, hashes[2]), "nor this")

    async def lookup():
        client = redis.asyncio.from_url(redis_url)
        hints = PrefixHints(MODEL, client)
        found = await hints.match(hashes, [A, B])
        await client.aclose()
        return hints.mode, found

    mode, found = asyncio.run(lookup())
    assert mode == "redis" and found == {A: 0, B: 0}  # its first block is nobody's: no worker holds the prompt
    publish(sync, "127.0.0.1:7002", hashes)  # a worker's write replaces the foreign keys, and writes every block
    assert all(sync.type(block_key(MODEL, h)) == b"zset" for h in hashes)
    mode, found = asyncio.run(lookup())
    assert mode == "redis" and found == {A: 0, B: 4}
