"""Cache-aware routing on a simulated pool: Tandem (Redis hints, approximate), round-robin,
sglang-router's cache_aware policy and a cache oracle, same workers, same workloads, same run.

Pool: 8 `tandem sim-worker` processes (the engine's real scheduler and block
manager; simulated time per uncached prompt token and per output token), each
with a KV pool small enough that placement matters. Every router gets a fresh
pool, so no router inherits another's caches. Hit rates come from the
workers' own block managers (Stats), not from any router's belief.

Workloads (seeded):
- shared-prefix: 16 tenants, each with a ~500-token system prompt, asking
  many short questions, plus multi-turn chats whose context grows each turn;
- hot-prefix: one system prompt takes 80 % of the traffic, 8 others share
  the rest.

Routers: tandem-redis (a gateway reading the workers' hints from Redis),
tandem-approx (no Redis: the gateway's own routing history), tandem-redis-2
(two gateway replicas sharing Redis, requests alternating), round-robin and
cache-aware (sglang-router 0.3, `--policy round_robin|cache_aware`), and
oracle (this script reads the workers' published block events, at most one
50 ms flush behind, adds the prompts it routed in the last 2 s, and sends
each request to the longest cached prefix, ties to the least busy; no load
balancing).

Requests arrive open-loop (Poisson). Prints per router and workload: hit
rate, TTFT p50/p90 (ms, as the client sees it through the router), and
load balance: max/mean of the workers' simulated busy time (the work each
was given) and of their request counts; then the Tandem gateway's routing-decision
time (hashing, Redis lookup, scoring, pick) measured in-process against the
same Redis. Writes docs/routing.png. Last line: one JSON object.

    pip install -e '.[bench]'    # sglang-router, matplotlib
    python bench/routing.py --quick
"""

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import redis as redis_sync
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.backends.registry import PoolBackends  # noqa: E402
from gateway.backends.worker_backend import WorkerBackend  # noqa: E402
from gateway.gather import PromptKey, gather_candidates  # noqa: E402
from gateway.hints.approximate_index import ApproximateIndex  # noqa: E402
from gateway.hints.prefix_hints import PrefixHints  # noqa: E402
from gateway.hints.redis_index import RedisHintIndex  # noqa: E402
from gateway.policy.schema import Profile  # noqa: E402
from gateway.redis_client import connect  # noqa: E402
from gateway.routing.profile import run_profile  # noqa: E402
from proto.gen import worker_pb2, worker_pb2_grpc  # noqa: E402
from proto.prefix_hash import prefix_hashes  # noqa: E402
from tandem.demo_model import cached_demo_checkpoint  # noqa: E402
from tests.conftest import free_port, start_redis_server  # noqa: E402
from tests.stack import start_gateway  # noqa: E402

CACHE = Path.home() / ".cache" / "tandem" / "bench"
MODEL_ID = "tandem-demo"
NUM_WORKERS = 8
SIM_ARGS = ["--num-kv-blocks", "160", "--block-size", "16", "--prefill-us-per-token", "400",
            "--decode-us-per-token", "800"]  # fmt: skip
PROFILE = {
    "filters": ["healthy"],
    "scorers": [{"type": "prefix-hit", "weight": 3}, {"type": "queue-depth", "weight": 1}],
    "picker": {"type": "cache-affinity", "abs_threshold": 4, "rel_threshold": 1.5},
}


def checkpoint() -> Path:
    return cached_demo_checkpoint(CACHE / MODEL_ID)


# -- workloads -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Req:
    text: str
    max_tokens: int


def _words(rng: random.Random, n: int) -> str:
    vocab = ("gateway worker prefix cache block token route tenant policy model answer question system "
             "prompt edge cloud device private latency memory batch request stream").split()  # fmt: skip
    return " ".join(rng.choice(vocab) + str(rng.randrange(100)) for _ in range(n))


def shared_prefix(rng: random.Random, n: int) -> list[Req]:
    systems = [f"You are assistant {t}. " + _words(random.Random(t), 150) for t in range(16)]
    chats: list[tuple[int, str, int]] = []  # tenant, history, turns
    out = []
    for _ in range(n):
        tenant = rng.randrange(16)
        if rng.random() < 0.3:  # a multi-turn chat: continue one, or start one
            mine = [i for i, (t, h, turns) in enumerate(chats) if t == tenant and turns < 8]  # 8 turns fit the context
            if mine and rng.random() < 0.7:
                i = rng.choice(mine)
                history = chats[i][1] + " Answer: " + _words(rng, 15) + " Question: " + _words(rng, 10)
                chats[i] = (tenant, history, chats[i][2] + 1)
            else:
                history = systems[tenant] + " Question: " + _words(rng, 10)
                chats.append((tenant, history, 1))
            out.append(Req(history, rng.randint(8, 24)))
        else:
            out.append(Req(systems[tenant] + " Question: " + _words(rng, 12), rng.randint(8, 24)))
    return out


def hot_prefix(rng: random.Random, n: int) -> list[Req]:
    systems = [f"Shared manual {s}. " + _words(random.Random(100 + s), 150) for s in range(9)]
    return [
        Req(systems[0 if rng.random() < 0.8 else rng.randrange(1, 9)] + " Question: " + _words(rng, 12), 16)
        for _ in range(n)
    ]


WORKLOADS = {"shared_prefix": shared_prefix, "hot_prefix": hot_prefix}


# -- processes -----------------------------------------------------------------------------------


def _start(args: list[str], env: dict, log: Path, ready: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", *args], cwd=ROOT, env={**os.environ, **env},
        stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while ready not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{args[0]} did not start; see {log}:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    return process


@dataclass
class Pool:
    model: Path
    redis_url: str
    logs: Path
    grpc_ports: list[int] = field(default_factory=list)
    http_ports: list[int] = field(default_factory=list)
    processes: list[subprocess.Popen] = field(default_factory=list)
    edge_port: int = 0

    def start(self) -> "Pool":
        redis_sync.Redis.from_url(self.redis_url).flushdb()
        self.grpc_ports = [free_port() for _ in range(NUM_WORKERS)]
        self.http_ports = [free_port() for _ in range(NUM_WORKERS)]
        for i, (g, h) in enumerate(zip(self.grpc_ports, self.http_ports, strict=True)):
            args = ["sim-worker", "--model", str(self.model), "--port", str(g), "--http-port", str(h), *SIM_ARGS]
            self.processes.append(_start(args, {"REDIS_URL": self.redis_url}, self.logs / f"w{i}.log", "ready"))
        # A stand-in for the edge pool a Tandem policy must have for private prompts (none are sent).
        self.edge_port = free_port()
        args = ["sim-worker", "--model", str(self.model), "--port", str(self.edge_port)]
        self.processes.append(_start(args, {}, self.logs / "edge.log", "ready"))
        return self

    async def stats(self) -> list[worker_pb2.StatsReply]:
        async def one(port):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                return await worker_pb2_grpc.WorkerStub(channel).Stats(worker_pb2.StatsRequest())

        return await asyncio.gather(*(one(p) for p in self.grpc_ports))

    def stop(self) -> None:
        for p in self.processes:
            p.terminate()
        for p in self.processes:
            p.wait(timeout=10)


# -- routers -------------------------------------------------------------------------------------


class TandemRouter:
    def __init__(self, pool: Pool, use_redis: bool, replicas: int = 1) -> None:
        policy = {
            "version": 1,
            "pools": {
                "cloud": {"kind": "cloud", "endpoints": [f"grpc://127.0.0.1:{p}" for p in pool.grpc_ports],
                          "profile": PROFILE},
                "edge": {"kind": "edge", "endpoints": [f"grpc://127.0.0.1:{pool.edge_port}"]},
            },
            "rules": [
                {"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
                {"name": "default", "route": "cloud"},
            ],
        }  # fmt: skip
        path = pool.logs / "policy.yaml"
        path.write_text(yaml.safe_dump(policy))
        env = {**os.environ, "REDIS_URL": pool.redis_url if use_redis else "", "TANDEM_WATCH_POLICY": "false",
               "OTEL_SDK_DISABLED": "true"}  # fmt: skip
        self.gateways = [start_gateway(pool.model, path, free_port(), env, pool.logs) for _ in range(replicas)]
        self.urls = [g.url for g in self.gateways]
        self._turn = 0

    async def send(self, client: httpx.AsyncClient, req: Req) -> float:
        url = self.urls[self._turn % len(self.urls)]
        self._turn += 1
        body = {"model": MODEL_ID, "prompt": req.text, "max_tokens": req.max_tokens, "stream": True}
        return await _first_chunk(client, f"{url}/v1/completions", body)

    def stop(self) -> None:
        for g in self.gateways:
            g.stop()


class SglangRouter:
    def __init__(self, pool: Pool, policy: str) -> None:
        port = free_port()
        log = pool.logs / f"sglang-{policy}.log"
        command = [sys.executable, "-m", "sglang_router.launch_router", "--port", str(port), "--policy", policy,
                   "--worker-urls", *[f"http://127.0.0.1:{p}" for p in pool.http_ports], "--log-level", "warn"]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"sglang-router did not start; see {log}")
            time.sleep(0.1)

    async def send(self, client: httpx.AsyncClient, req: Req) -> float:
        body = {"text": req.text, "sampling_params": {"max_new_tokens": req.max_tokens}, "stream": True}
        return await _first_chunk(client, f"{self.url}/generate", body)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


class OracleRouter:
    """Longest cached prefix per the workers' own block events, plus prompts it sent in the last 2 s
    (still in prefill, not yet announced); ties to the least busy."""

    def __init__(self, pool: Pool, tokenizer) -> None:
        self.pool, self.tokenizer = pool, tokenizer
        self.redis = connect(pool.redis_url)  # the gateway's own client
        self.hints = RedisHintIndex(self.redis, MODEL_ID)  # what the workers published, read as a gateway reads it
        self.inflight = [0] * NUM_WORKERS
        self.routed = ApproximateIndex()

    async def send(self, client: httpx.AsyncClient, req: Req) -> float:
        ids = self.tokenizer.encode(req.text, add_special_tokens=False).ids  # as the worker's /generate does
        hashes = prefix_hashes(ids, MODEL_ID, "")
        workers = [f"127.0.0.1:{p}" for p in self.pool.grpc_ports]
        held = await self.hints.match(hashes, workers)
        pending = self.routed.match(hashes, list(range(NUM_WORKERS)), max_age_s=2.0)
        best, best_key = 0, None
        for w in range(NUM_WORKERS):
            matched = max(held.get(workers[w], 0), pending.get(w, 0))  # both name only the holders
            key = (matched, -self.inflight[w])
            if best_key is None or key > best_key:
                best, best_key = w, key
        self.routed.record(best, hashes)
        self.inflight[best] += 1
        try:
            body = {"text": req.text, "sampling_params": {"max_new_tokens": req.max_tokens}, "stream": True}
            return await _first_chunk(client, f"http://127.0.0.1:{self.pool.http_ports[best]}/generate", body)
        finally:
            self.inflight[best] -= 1

    def stop(self) -> None:
        pass


async def _first_chunk(client: httpx.AsyncClient, url: str, body: dict) -> float:
    started = time.perf_counter()
    ttft = None
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if ttft is None and line.startswith("data:"):
                ttft = time.perf_counter() - started
    return ttft if ttft is not None else time.perf_counter() - started


# -- one run -------------------------------------------------------------------------------------


async def drive(router, requests: list[Req], rate_per_s: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        tasks, at = [], time.perf_counter()
        for req in requests:
            at += rng.expovariate(rate_per_s)
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            tasks.append(asyncio.create_task(router.send(client, req)))
        return await asyncio.gather(*tasks)


def run_one(name: str, make_router, model: Path, redis_url: str, workload: str, n: int, rate: float) -> dict:
    logs = Path(tempfile.mkdtemp(prefix=f"routing-{name}-"))
    pool = Pool(model, redis_url, logs).start()
    router = make_router(pool)
    try:
        requests = WORKLOADS[workload](random.Random(7), n)
        ttfts = asyncio.run(drive(router, requests, rate, seed=11))
        time.sleep(0.2)
        stats = asyncio.run(pool.stats())
        busy = [httpx.get(f"http://127.0.0.1:{h}/get_server_info").json()["busy_s"] for h in pool.http_ports]
    finally:
        router.stop()
        pool.stop()
    shutil.rmtree(logs, ignore_errors=True)
    loads = [s.requests_total for s in stats]
    ttfts_ms = sorted(t * 1000 for t in ttfts)
    result = {
        "hit_rate": round(sum(s.prefix_hit_tokens for s in stats) / sum(s.prefix_query_tokens for s in stats), 4),
        "ttft_p50_ms": round(statistics.median(ttfts_ms), 1),
        "ttft_p90_ms": round(ttfts_ms[int(0.9 * (len(ttfts_ms) - 1))], 1),
        "max_over_mean_load": round(max(busy) / statistics.mean(busy), 3),
        "max_over_mean_requests": round(max(loads) / statistics.mean(loads), 3),
    }
    print(f"  {name:16s} {workload:14s} {json.dumps(result)}", flush=True)
    return result


def decision_times_us(redis_url: str, model: Path, iterations: int = 2000) -> tuple[float, float]:
    """The gateway's routing decision in-process: hash the prompt, one match script call, score 8 candidates, pick."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    ids = tuple(tokenizer.encode(shared_prefix(random.Random(3), 1)[0].text).ids)
    profile = Profile.model_validate(PROFILE)

    backends = []
    for i in range(NUM_WORKERS):  # as the gateway holds them, with the Stats a worker would report
        backend = WorkerBackend(f"grpc://127.0.0.1:{7000 + i}", MODEL_ID, "cloud")
        backend.stats = worker_pb2.StatsReply(model_id=MODEL_ID, kind="cloud", queue_depth=i % 3, block_size_tokens=16)
        backends.append(backend)
    labels = {b.endpoint: f"cloud/{i}" for i, b in enumerate(backends)}
    pool = PoolBackends(tuple(backends), labels)  # as the gateway's registry keeps them between requests

    async def measure():
        client = connect(redis_url)
        hints = PrefixHints(MODEL_ID, client)
        times = []
        for i in range(iterations):
            started = time.perf_counter()
            candidates, _ = await gather_candidates(pool, profile, PromptKey("t", ids), hints)
            run_profile(profile, candidates, False, i)
            times.append(time.perf_counter() - started)
        await client.aclose()
        return sorted(times)

    times = asyncio.run(measure())
    return times[len(times) // 2] * 1e6, times[int(0.99 * len(times))] * 1e6


def plot(results: dict, path: Path) -> bool:
    """Draw the figure; False (and a note on stderr) when matplotlib is not installed: the figures still print."""
    try:
        import matplotlib
    except ImportError:
        print("no plot: matplotlib is not installed (pip install -e '.[bench]')", file=sys.stderr)
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    routers = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, label in ((axes[0], "hit_rate", "prefix hit rate"), (axes[1], "ttft_p90_ms", "TTFT p90 (ms)")):
        for offset, workload in ((-0.2, "shared_prefix"), (0.2, "hot_prefix")):
            values = [results[r][workload][metric] if workload in results[r] else 0 for r in routers]
            ax.bar([i + offset for i in range(len(routers))], values, width=0.4, label=workload)
        ax.set_xticks(range(len(routers)), routers, rotation=30, ha="right")
        ax.set_title(label)
    axes[0].legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="300 requests per workload instead of 1200")
    parser.add_argument("--rate", type=float, default=30.0, help="requests per second (Poisson)")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "routing.png")
    parser.add_argument("--abs-threshold", type=float, default=PROFILE["picker"]["abs_threshold"])
    parser.add_argument("--rel-threshold", type=float, default=PROFILE["picker"]["rel_threshold"])
    parser.add_argument("--only", nargs="*", help="run only these routers (default: all)")
    args = parser.parse_args()
    PROFILE["picker"] |= {"abs_threshold": args.abs_threshold, "rel_threshold": args.rel_threshold}
    n = 300 if args.quick else 1200
    model = checkpoint()
    redis_server = None
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        redis_url, redis_server = start_redis_server(Path(tempfile.mkdtemp(prefix="routing-redis-")))
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    routers = {
        "tandem-redis": lambda pool: TandemRouter(pool, use_redis=True),
        "tandem-approx": lambda pool: TandemRouter(pool, use_redis=False),
        "tandem-redis-2": lambda pool: TandemRouter(pool, use_redis=True, replicas=2),
        "sglang-cache-aware": lambda pool: SglangRouter(pool, "cache_aware"),
        "round-robin": lambda pool: SglangRouter(pool, "round_robin"),
        "oracle": lambda pool: OracleRouter(pool, tokenizer),
    }
    routers = {name: make for name, make in routers.items() if not args.only or name in args.only}
    print(f"{NUM_WORKERS} simulated workers ({' '.join(SIM_ARGS)}), {n} requests per workload at {args.rate}/s")
    results: dict[str, dict] = {name: {} for name in routers}
    try:
        for workload in WORKLOADS:
            for name, make in routers.items():
                results[name][workload] = run_one(name, make, model, redis_url, workload, n, args.rate)
        decision_p50, decision_p99 = decision_times_us(redis_url, model)
    finally:
        if redis_server:
            redis_server.terminate()
    decision = {"decision_us_p50": round(decision_p50, 1), "decision_us_p99": round(decision_p99, 1)}
    if args.only:
        print(json.dumps({"routers": results, "picker": PROFILE["picker"]} | decision))
        return
    plotted = plot(results, args.plot)
    shared = {name: r["shared_prefix"]["hit_rate"] for name, r in results.items()}
    summary = {
        "routers": results,
        "tandem_vs_sglang_hit_ratio": round(shared["tandem-redis"] / shared["sglang-cache-aware"], 3),
        "tandem_vs_oracle_hit_ratio": round(shared["tandem-redis"] / shared["oracle"], 3),
        "two_replica_hit_loss_pts": round(100 * (shared["tandem-redis"] - shared["tandem-redis-2"]), 2),
        **decision,
    }
    if plotted:
        print(f"plot: {args.plot}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
