"""What a router adds: the Tandem gateway against calling the worker directly, and
sglang-router against calling the same worker directly, same run.

One `tandem sim-worker` with zero simulated cost answers one token per
request, so what is measured is the routing layer: parsing, tokenizing (the
gateway tokenizes; sglang-router passes text), policy, pick, proxying.
- latency: sequential requests, p50 / p99 of each path, and the difference
  to the direct path (Tandem over gRPC, sglang-router over HTTP, each
  against its own direct call);
- max rate: 32 concurrent clients for a few seconds, requests per second;
- CPU time: each router process's own (all threads), per sequential request.

Beside them runs the Python floor (bench/python_floor.py): FastAPI under uvicorn, a
tokenizer and one grpc.aio call, nothing else. It splits the gap to a Rust router
into what Python's serving stack costs and what Tandem adds on top of it.

Tandem runs with tracing on at the default sampling (every request), its spans
exported over OTLP to a sink process (bench/otlp_sink.py); `--tracing off`
measures it without. On the 2-core development machine the client, the router
and the worker share the cores, which is the same handicap for both. The HTTP
paths go through bench/http1.py, a keep-alive client with a fifth of httpx's
CPU a request (0.3 against 1.4 ms here): through httpx (`--client httpx`, every figure before
2026-12-04) each HTTP path topped out near 200 requests/s, the client's rate,
and the HTTP-in paths' added latency held httpx's cost, which direct gRPC's
did not. Last
line: one JSON object, with the goals' ratios: Tandem's added latency over
sglang-router's (p50, p99; goal at most 2) and Tandem's max rate over direct
gRPC's (goal at least 0.5). The paths are measured in rounds (--rounds, 3 by
default), each round starting with a different path, and every figure is the
median of its per-round values: one long block per path made the ratios
follow the machine's drift.

    python bench/gateway_overhead.py --quick
"""

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from routing import MODEL_ID, Pool, SglangRouter, _start, checkpoint, free_port, start_gateway  # noqa: E402

from bench import http1  # noqa: E402
from bench.privacy import cpu_info  # noqa: E402
from bench.rounds import round_order  # noqa: E402
from proto.gen import worker_pb2, worker_pb2_grpc  # noqa: E402

PROMPT = "Tell me about the gateway and how it routes requests to workers. " * 3


class Paths:
    """The five ways to get one token: direct gRPC, Tandem gateway, the Python floor (bench/python_floor.py),
    direct HTTP, sglang-router. HTTP goes through bench/http1.py's keep-alive client (one connection per
    concurrent caller), or httpx with `--client httpx` (the client every figure before 2026-12-04 came from)."""

    def __init__(
        self, grpc_port: int, http_port: int, gateway_url: str, floor_url: str, sglang_url: str, token_ids: list[int],
        client: str = "http1",
    ):  # fmt: skip
        self.grpc_target, self.http = f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}"
        self.gateway, self.floor, self.sglang, self.token_ids = gateway_url, floor_url, sglang_url, token_ids
        self.client_kind = client
        self._idle: dict[str, list[http1.Connection]] = {}
        completion = json.dumps({"model": MODEL_ID, "prompt": PROMPT, "max_tokens": 1}).encode()
        generate = json.dumps({"text": PROMPT, "sampling_params": {"max_new_tokens": 1}}).encode()
        self.tandem = self._poster(self.gateway, "/v1/completions", completion)
        self.python_floor = self._poster(self.floor, "/v1/completions", completion)
        self.direct_http = self._poster(self.http, "/generate", generate)
        self.sglang_router = self._poster(self.sglang, "/generate", generate)

    async def open(self):
        self.channel = grpc.aio.insecure_channel(self.grpc_target)
        self.stub = worker_pb2_grpc.WorkerStub(self.channel)
        self.client = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=64))

    async def close(self):
        await self.channel.close()
        await self.client.aclose()
        for connections in self._idle.values():
            for connection in connections:
                connection.close()

    async def direct_grpc(self):
        request = worker_pb2.GenerateRequest(
            request_id="b", prompt_token_ids=self.token_ids, sampling=worker_pb2.SamplingParams(max_tokens=1)
        )
        async for _ in self.stub.Generate(request):
            pass

    def _poster(self, base: str, path: str, body: bytes):
        """A call that POSTs `body` to base + path and fails on a non-2xx answer."""
        url, idle = base + path, self._idle.setdefault(base, [])

        async def call():
            if self.client_kind == "httpx":
                response = await self.client.post(url, content=body, headers={"content-type": "application/json"})
                response.raise_for_status()
                return
            connection = idle.pop() if idle else http1.Connection(base)
            await http1.post_ok(connection, path, body)
            idle.append(connection)  # only after a whole answer: a failed one is not reused

        return call


def cpu_s(pid: int | None) -> float:
    """CPU time (user + system, all threads) a process has used so far; 0 where /proc is not there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def latencies_ms(call, n: int, pid: int | None = None) -> tuple[list[float], float]:
    """n sequential calls' latencies, sorted, and the CPU time (ms) process `pid` used per call (0 without one)."""
    for _ in range(10):
        await call()  # warm-up: connections, caches
    out = []
    cpu_before = cpu_s(pid)
    for _ in range(n):
        started = time.perf_counter()
        await call()
        out.append((time.perf_counter() - started) * 1000)
    return sorted(out), (cpu_s(pid) - cpu_before) / n * 1000


async def max_rate(call, seconds: float, concurrency: int = 32) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def client():
        nonlocal done
        while time.perf_counter() < deadline:
            await call()
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return done / (time.perf_counter() - started)


def _start_script(args: list[str], log_path: Path):
    """python bench/<script> ..., returned once it prints "ready"."""
    import subprocess

    log = open(log_path, "w")  # noqa: SIM115 - the child writes it for its whole life
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parent / args[0]), *args[1:]],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    assert process.stdout.readline().strip() == "ready", log_path.read_text()
    return process


def p(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def figures(lat: dict, cpu_ms: dict, rate: dict) -> dict:
    """One round's figures: what each router adds over its direct path, rates, CPU per request, and the ratios."""
    result = {
        "tandem_added_p50_ms": round(statistics.median(lat["tandem"]) - statistics.median(lat["direct_grpc"]), 2),
        "tandem_added_p99_ms": round(p(lat["tandem"], 0.99) - p(lat["direct_grpc"], 0.99), 2),
        "sglang_added_p50_ms": round(
            statistics.median(lat["sglang_router"]) - statistics.median(lat["direct_http"]), 2
        ),
        "sglang_added_p99_ms": round(p(lat["sglang_router"], 0.99) - p(lat["direct_http"], 0.99), 2),
        "tandem_max_rps": round(rate["tandem"], 1),
        "sglang_max_rps": round(rate["sglang_router"], 1),
        "direct_grpc_max_rps": round(rate["direct_grpc"], 1),
        "direct_http_max_rps": round(rate["direct_http"], 1),
    }
    return result | {
        "added_p50_vs_sglang": round(result["tandem_added_p50_ms"] / max(result["sglang_added_p50_ms"], 0.01), 2),
        "added_p99_vs_sglang": round(result["tandem_added_p99_ms"] / max(result["sglang_added_p99_ms"], 0.01), 2),
        "max_rps_vs_direct": round(rate["tandem"] / rate["direct_grpc"], 3),
        "tandem_cpu_ms_per_request": round(cpu_ms["tandem"], 3),
        "sglang_cpu_ms_per_request": round(cpu_ms["sglang_router"], 3),
        # The Python floor (bench/python_floor.py): what FastAPI, uvicorn, a tokenizer and grpc.aio cost alone.
        "floor_added_p50_ms": round(statistics.median(lat["python_floor"]) - statistics.median(lat["direct_grpc"]), 2),
        "floor_added_p99_ms": round(p(lat["python_floor"], 0.99) - p(lat["direct_grpc"], 0.99), 2),
        "floor_max_rps": round(rate["python_floor"], 1),
        "floor_cpu_ms_per_request": round(cpu_ms["python_floor"], 3),
        # Within-run ratios of CPU time per request: steadier than latency on a machine whose speed drifts.
        "tandem_cpu_vs_floor": round(cpu_ms["tandem"] / max(cpu_ms["python_floor"], 1e-3), 2),
        "tandem_cpu_vs_sglang": round(cpu_ms["tandem"] / max(cpu_ms["sglang_router"], 1e-3), 2),
        "floor_cpu_vs_sglang": round(cpu_ms["python_floor"] / max(cpu_ms["sglang_router"], 1e-3), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 requests and 3 s of load per path (else 1000, 10 s)")
    parser.add_argument("--tracing", choices=("on", "off"), default="on", help="the gateway's tracing (default on)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each over every path (default 3)")
    parser.add_argument(
        "--client", choices=("http1", "httpx"), default="http1",
        help="the HTTP paths' client: bench/http1.py (default) or httpx (five times its CPU a request)",
    )  # fmt: skip
    args = parser.parse_args()
    n, seconds = (200, 3.0) if args.quick else (1000, 10.0)
    model = checkpoint()
    logs = Path(tempfile.mkdtemp(prefix="gateway-overhead-"))
    grpc_port, http_port, edge_port = free_port(), free_port(), free_port()
    sim = ["--prefill-us-per-token", "0", "--decode-us-per-token", "0"]
    # Whatever fails (sglang-router not installed, a port taken), what was started is stopped: a failed run left
    # its sim-workers running.
    with contextlib.ExitStack() as started:
        _run(args, n, seconds, model, logs, grpc_port, http_port, edge_port, sim, started)


def _stopping(started: contextlib.ExitStack, process):
    """`process` (a Popen), terminated when `started` closes; returned."""

    def stop():
        process.terminate()
        process.wait(timeout=10)

    started.callback(stop)
    return process


def _run(args, n, seconds, model, logs, grpc_port, http_port, edge_port, sim, started) -> None:
    _stopping(started, _start(["sim-worker", "--model", str(model), "--port", str(grpc_port), "--http-port",
                                        str(http_port), *sim], {}, logs / "worker.log", "ready"))  # fmt: skip
    _stopping(
        started, _start(["sim-worker", "--model", str(model), "--port", str(edge_port)], {}, logs / "edge.log", "ready")
    )
    policy = {
        "version": 1,
        "pools": {
            "cloud": {"kind": "cloud", "endpoints": [f"grpc://127.0.0.1:{grpc_port}"]},
            "edge": {"kind": "edge", "endpoints": [f"grpc://127.0.0.1:{edge_port}"]},
        },
        "rules": [
            {"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
            {"name": "default", "route": "cloud"},
        ],
    }
    (logs / "policy.yaml").write_text(yaml.safe_dump(policy))
    env = {**os.environ, "TANDEM_WATCH_POLICY": "false", "REDIS_URL": ""}

    if args.tracing == "on":
        sink_port = free_port()
        _stopping(started, _start_script(["otlp_sink.py", str(sink_port)], logs / "sink.log"))
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}", "OTEL_EXPORTER_OTLP_INSECURE": "true"}
    else:
        env["OTEL_SDK_DISABLED"] = "true"
    gateway = start_gateway(model, logs / "policy.yaml", free_port(), env, logs)
    started.callback(gateway.stop)
    pool = Pool(model, "", logs, grpc_ports=[grpc_port], http_ports=[http_port])
    router = SglangRouter(pool, "cache_aware")
    started.callback(router.stop)
    from tokenizers import Tokenizer

    token_ids = Tokenizer.from_file(str(model / "tokenizer.json")).encode(PROMPT).ids
    floor_port = free_port()
    floor = _stopping(
        started,
        _start_script(
            ["python_floor.py", str(floor_port), f"127.0.0.1:{grpc_port}", str(model / "tokenizer.json")],
            logs / "floor.log",
        ),
    )
    paths = Paths(
        grpc_port, http_port, gateway.url, f"http://127.0.0.1:{floor_port}", router.url, token_ids, args.client
    )
    # Each router's own CPU time per request (all its threads), over the sequential calls.
    pids = {"tandem": gateway.children[0].process.pid, "python_floor": floor.pid, "sglang_router": router.process.pid}

    async def measure():
        await paths.open()
        try:
            names = ["direct_grpc", "tandem", "python_floor", "direct_http", "sglang_router"]
            rounds = []
            for r in range(args.rounds):  # each round starts with another path: drift hits them all alike
                lat, cpu = {}, {}
                order = round_order(names, r)
                for name in order:
                    lat[name], cpu[name] = await latencies_ms(getattr(paths, name), n, pids.get(name))
                rate = {name: await max_rate(getattr(paths, name), seconds) for name in order}
                rounds.append((lat, cpu, rate))
            return rounds
        finally:
            await paths.close()

    rounds = asyncio.run(measure())
    started.close()  # stopped before the figures are printed, as before
    per_round = [figures(*one) for one in rounds]
    # Each figure (the ratios included) is the median of its per-round values: a ratio within a round holds
    # on a VM that drifts by a third within a minute; one long block per path did not.
    result = {key: round(statistics.median(r[key] for r in per_round), 3) for key in per_round[0]}
    result |= {
        "rounds": args.rounds,
        "tracing": args.tracing,
        "client": args.client,
        "cpu": cpu_info()[0],
        "isa": cpu_info()[1],
    }
    lat = {name: sorted(x for one in rounds for x in one[0][name]) for name in rounds[0][0]}
    rate = {name: statistics.median(one[2][name] for one in rounds) for name in rounds[0][2]}
    for name in lat:
        print(f"  {name:14s} p50 {statistics.median(lat[name]):7.2f} ms  p99 {p(lat[name], 0.99):7.2f} ms  "
              f"max {rate[name]:7.1f} req/s")  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
