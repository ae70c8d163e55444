"""What routing costs as the work grows: workers in a pool, prompt length, open streams.

1. The routing decision (what dispatch times as tandem_gateway_routing_decision_seconds: the rule, the pool's
   backends, hashing the prompt and looking its hints up, scoring, picking), each pick then sent through the
   backend's own bookkeeping, with 8, 64 and 256 workers, in both hint modes: Redis (a redis-server of its own,
   every worker holding hints for other prompts and two holding this one) and the gateway's own history. Goal: p99
   under 1 ms at 256 workers.
2. The hint lookup against prompt length (1k, 8k and 32k tokens) with 8 workers.
3. The gateway's memory per open stream: RSS with 0 to 200 streams held open against a slow sim-worker.

1 and 2 are measured in rounds (--rounds, 3 by default), each over every point and starting at another, and each
figure is the median of its per-round values: these VMs drift by a third within a minute. Prints one line per
measurement, writes docs/scaling.png, and ends with one JSON object.

    python bench/scaling.py            # --quick: fewer iterations and streams
"""

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import uvloop
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from routing import MODEL_ID, PROFILE, _start, checkpoint, free_port  # noqa: E402

from bench.privacy import cpu_info  # noqa: E402
from bench.rounds import round_order  # noqa: E402
from gateway.backends.registry import BackendRegistry  # noqa: E402
from gateway.backends.worker_backend import WorkerBackend  # noqa: E402
from gateway.classify.features import RequestFeatures  # noqa: E402
from gateway.gather import PromptKey, gather_pools  # noqa: E402
from gateway.hints.prefix_hints import PrefixHints  # noqa: E402
from gateway.policy.decide import decide  # noqa: E402
from gateway.policy.route_plan import plan_route  # noqa: E402
from gateway.policy.schema import Policy  # noqa: E402
from gateway.redis_client import connect  # noqa: E402
from proto.gen import worker_pb2  # noqa: E402
from proto.prefix_hash import prefix_hashes  # noqa: E402
from proto.prefix_hints import HOLD_SCRIPT, block_key, worker_id_for  # noqa: E402
from serving import heap  # noqa: E402
from tests.conftest import start_redis_server  # noqa: E402
from tests.stack import start_gateway  # noqa: E402

SALT, BLOCK = "t", 16
WORKER_COUNTS = (8, 64, 256)
MODES = ("redis", "approximate")
PROMPT_TOKENS = (1024, 8192, 32768)


def _endpoint(i: int) -> str:
    return f"grpc://10.0.{i // 250}.{i % 250 + 1}:50051"


class _Answering(WorkerBackend):
    """A backend that answers at once, with nothing dialled: a request sent to it passes through the gateway's own
    bookkeeping (requests open, requests sent lately, the circuit breaker) as a real one does."""

    async def _stream(self, request, timeout_s):
        yield worker_pb2.GenerateChunk()


def _backend(endpoint: str, *_) -> WorkerBackend:
    """A backend as the gateway holds it, with the Stats a worker would have reported."""
    backend = _Answering(endpoint, MODEL_ID, "cloud")
    i = int(endpoint.split(".")[-1].split(":")[0])
    backend.stats = worker_pb2.StatsReply(model_id=MODEL_ID, kind="cloud", queue_depth=i % 3, block_size_tokens=BLOCK)
    return backend


def _pool_policy(workers: int) -> Policy:
    """One cloud pool of `workers` endpoints, routed on BENCH's profile; an edge pool for private requests."""
    return Policy.model_validate({
        "version": 1,
        "pools": {"cloud": {"kind": "cloud", "endpoints": [_endpoint(i) for i in range(workers)], "profile": PROFILE},
                  "edge": {"kind": "edge", "endpoints": ["grpc://10.1.0.1:50051"], "plaintext_grpc": True}},
        "rules": [{"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
                  {"name": "all", "route": "cloud"}],
    })  # fmt: skip


def _prompt(rng: random.Random, tokens: int) -> tuple[int, ...]:
    return tuple(rng.randrange(1, 500) for _ in range(tokens))


async def _publish(client, backends, prompt: tuple[int, ...], rng: random.Random) -> None:
    """Two workers hold this prompt; every worker holds the blocks of a few other prompts (as the workers publish)."""
    hold = client.register_script(HOLD_SCRIPT)
    for i, backend in enumerate(backends):
        worker = worker_id_for(backend.endpoint)
        held = [prompt] if i in (0, 1) else []
        held += [_prompt(rng, 512) for _ in range(4)]
        for tokens in held:
            hashes = prefix_hashes(list(tokens[: 256 * BLOCK]), MODEL_ID, SALT, BLOCK)
            await hold(keys=[block_key(MODEL_ID, h) for h in hashes], args=[worker, 600_000, "gt"])


def _p(times: list[float], q: float) -> float:
    return sorted(times)[min(len(times) - 1, int(q * len(times)))] * 1e6


async def decision_us(redis_url: str, workers: int, prompt_tokens: int, mode: str, iterations: int) -> dict:
    """p50/p99 of one routing decision in µs, in `mode` (redis or approximate): what dispatch times as
    tandem_gateway_routing_decision_seconds (the rule, the pool's backends, the hint lookup, the plan)."""
    rng = random.Random(workers * 7 + prompt_tokens)
    policy = _pool_policy(workers)
    registry = BackendRegistry(policy, MODEL_ID, backend_factory=_backend)
    backends = registry.backends(policy, "cloud")
    prompt = _prompt(rng, prompt_tokens)
    client = connect(redis_url)  # the gateway's own client
    await client.flushdb()
    hints = PrefixHints(MODEL_ID, client if mode == "redis" else None)
    if mode == "redis":
        await _publish(client, backends, prompt, rng)
    else:  # the gateway's own history: it sent this prompt to worker 0 and others elsewhere
        hashes = hints.hashes(SALT, prompt, BLOCK)
        hints.approximate.record(worker_id_for(backends[0].endpoint), hashes)
        for backend in backends:
            other = hints.hashes(SALT, _prompt(rng, 512), BLOCK)
            hints.approximate.record(worker_id_for(backend.endpoint), other)
    features = RequestFeatures(prompt_tokens, 16, frozenset(), None, SALT)
    key = PromptKey(SALT, prompt)
    heap.settle()  # as the gateway's heap is once it has started (serving/heap.py)
    decide_s, lookup_s, picks = [], [], []
    for i in range(iterations):
        started = time.perf_counter()
        decision = decide(policy, features)
        gathered = await gather_pools(registry, policy, decision.pools, key, hints)
        looked = time.perf_counter()
        plan = plan_route(policy, features, gathered.candidates, i, decision)
        decide_s.append(time.perf_counter() - started)
        lookup_s.append(looked - started)
        picks.append(plan.pick[1])
        # Sent, as dispatch sends it: the pick's own view changes, and the next decision sees that.
        async for _ in gathered.backends["cloud"][plan.pick[1].endpoint].generate(worker_pb2.GenerateRequest(), 1.0):
            pass
    assert picks[0].prefix_match_blocks > 0, "the first pick should be a worker holding the prompt"
    await client.aclose()
    return {"p50": round(_p(decide_s, 0.5), 1), "p99": round(_p(decide_s, 0.99), 1),
            "lookup_p50": round(_p(lookup_s, 0.5), 1), "lookup_p99": round(_p(lookup_s, 0.99), 1)}  # fmt: skip


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def memory_per_stream(counts: tuple[int, ...]) -> dict:
    """The gateway's RSS with N streams open (each a chat completion still decoding on a slow sim-worker)."""
    model = checkpoint()
    logs = Path(tempfile.mkdtemp(prefix="scaling-"))
    port = free_port()
    sim = ["--prefill-us-per-token", "0", "--decode-us-per-token", "200000", "--num-kv-blocks", "4096"]
    worker = _start(["sim-worker", "--model", str(model), "--port", str(port), *sim], {}, logs / "w.log", "ready")
    edge_port = free_port()
    edge = _start(["sim-worker", "--model", str(model), "--port", str(edge_port)], {}, logs / "e.log", "ready")
    policy = {"version": 1, "pools": {"cloud": {"kind": "cloud", "endpoints": [f"grpc://127.0.0.1:{port}"]},
                                      "edge": {"kind": "edge", "endpoints": [f"grpc://127.0.0.1:{edge_port}"]}},
              "rules": [{"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
                        {"name": "all", "route": "cloud"}]}  # fmt: skip
    (logs / "policy.yaml").write_text(yaml.safe_dump(policy))
    env = {"TANDEM_WATCH_POLICY": "false", "REDIS_URL": "", "OTEL_TRACES_EXPORTER": "none"}
    body = {"model": MODEL_ID, "max_tokens": 1000, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    out, gateway = {}, None
    try:  # from here on, the workers are stopped whatever fails (a gateway that does not start included)
        gateway = start_gateway(model, logs / "policy.yaml", free_port(), env, logs)
        pid = gateway.children[0].process.pid
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=max(counts) + 10)) as client:
            for _ in range(20):  # warm: first-request allocations are not per-stream cost
                (await client.post(f"{gateway.url}/v1/chat/completions", json=body | {"stream": False,
                                   "max_tokens": 1})).raise_for_status()  # fmt: skip
            await asyncio.sleep(0.5)
            out[0] = _rss_mb(pid)
            opened = []
            for n in counts:
                while len(opened) < n:
                    request = client.build_request("POST", f"{gateway.url}/v1/chat/completions", json=body)
                    response = await client.send(request, stream=True)
                    assert response.status_code == 200
                    opened.append(response)
                    await response.aiter_lines().__anext__()  # the first event: the stream is live
                await asyncio.sleep(1.0)
                out[n] = _rss_mb(pid)
                print(f"  {n:4d} open streams: gateway RSS {out[n]:.1f} MB", flush=True)
            for response in opened:
                await response.aclose()
    finally:
        if gateway is not None:
            gateway.stop()
        for process in (worker, edge):
            process.terminate()
            process.wait(timeout=10)
    return out


def plot(decisions: dict, lookups: dict, memory: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:  # the figures still print
        print("no plot: matplotlib is not installed (pip install -e '.[bench]')", file=sys.stderr)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for mode, marker in (("redis", "o"), ("approximate", "s")):
        axes[0].plot(WORKER_COUNTS, [decisions[mode][w]["p99"] / 1000 for w in WORKER_COUNTS], marker=marker,
                     label=f"{mode} p99")  # fmt: skip
    axes[0].axhline(1.0, color="grey", linestyle="--", label="goal: 1 ms")
    axes[0].set(xscale="log", xlabel="workers in the pool", ylabel="ms", title="routing decision p99")
    axes[0].set_xticks(WORKER_COUNTS, [str(w) for w in WORKER_COUNTS])
    axes[0].legend()
    for mode, marker in (("redis", "o"), ("approximate", "s")):
        axes[1].plot(PROMPT_TOKENS, [lookups[mode][t]["lookup_p50"] for t in PROMPT_TOKENS], marker=marker,
                     label=f"{mode} p50")  # fmt: skip
    axes[1].set(xscale="log", xlabel="prompt tokens (8 workers)", ylabel="µs", title="hint lookup")
    axes[1].set_xticks(PROMPT_TOKENS, ["1k", "8k", "32k"])
    axes[1].legend()
    counts = sorted(memory)
    axes[2].plot(counts, [memory[n] for n in counts], marker="o")
    axes[2].set(xlabel="open streams", ylabel="gateway RSS (MB)", title="memory with open streams", ylim=(0, None))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="300 decisions per point, up to 100 streams")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each over every point (default 3)")
    parser.add_argument("--plot", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "scaling.png")
    args = parser.parse_args()
    iterations = 300 if args.quick else 1000
    counts = (25, 50, 100) if args.quick else (50, 100, 200)
    redis_url, redis_process = start_redis_server(Path(tempfile.mkdtemp(prefix="scaling-redis-")))
    points = [("decision", mode, w) for mode in MODES for w in WORKER_COUNTS]
    points += [("lookup", mode, t) for mode in MODES for t in PROMPT_TOKENS]
    measured: dict[tuple, list[dict]] = {point: [] for point in points}
    try:
        for r in range(args.rounds):  # each round over every point, starting at another: drift hits them all alike
            for kind, mode, n in round_order(points, r):
                workers, tokens = (n, 750) if kind == "decision" else (8, n)
                one = uvloop.run(decision_us(redis_url, workers, tokens, mode, iterations))
                measured[kind, mode, n].append(one)
                print(f"  round {r + 1}, {kind}, {mode:11s} {n:5d} {'workers' if kind == 'decision' else 'tokens'}: "
                      f"{one}", flush=True)  # fmt: skip
    finally:
        redis_process.terminate()
    # Each figure: the median of its per-round values.
    median = {point: {key: round(statistics.median(one[key] for one in runs), 1) for key in runs[0]}
              for point, runs in measured.items()}  # fmt: skip
    decisions = {mode: {w: median["decision", mode, w] for w in WORKER_COUNTS} for mode in MODES}
    lookups = {mode: {t: median["lookup", mode, t] for t in PROMPT_TOKENS} for mode in MODES}
    for kind, mode, n in points:
        print(f"  median of {args.rounds} rounds, {kind}, {mode:11s} {n:5d}: {median[kind, mode, n]}", flush=True)
    memory = asyncio.run(memory_per_stream(counts))
    per_stream_kb = (memory[max(counts)] - memory[0]) * 1024 / max(counts)
    plot(decisions, lookups, memory, args.plot)
    model, isa = cpu_info()
    print(json.dumps({
        "decision_p99_us": {mode: {w: decisions[mode][w]["p99"] for w in WORKER_COUNTS} for mode in decisions},
        "decision_p99_256_workers_ms": round(max(decisions[m][256]["p99"] for m in decisions) / 1000, 3),
        "lookup_p50_us_by_prompt_tokens": {m: {t: lookups[m][t]["lookup_p50"] for t in PROMPT_TOKENS} for m in lookups},
        "gateway_rss_mb_by_open_streams": {n: round(v, 1) for n, v in memory.items()},
        "gateway_kb_per_open_stream": round(per_stream_kb, 1),
        "rounds": args.rounds, "cpu": model, "isa": isa,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
