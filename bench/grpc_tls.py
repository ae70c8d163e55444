"""What TLS costs on the gateway's hop to a worker: the same one-token Generate over plaintext, TLS and mutual TLS.

Starts three sim workers (the demo tokenizer, no simulated model time) on free loopback ports: one plaintext, one
serving TLS (TANDEM_TLS_CERT_FILE/KEY_FILE), one asking for client certificates as well (TANDEM_TLS_CLIENT_CA_FILE),
with certificates from a CA of the bench's own. The gateway's own client (GrpcWorkerBackend, a channel per worker
kept open as the gateway keeps it) sends the same request to each, in rounds that start at another path each time;
per call it times the wall clock and this process's CPU (the caller's thread and gRPC's). Each ratio is the median of
the per-round ratios against plaintext. Last line: one JSON object.

    python bench/grpc_tls.py            # --quick: fewer calls
"""

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.privacy import cpu_info  # noqa: E402
from bench.rounds import round_order  # noqa: E402
from gateway.backends.grpc_backend import GrpcWorkerBackend  # noqa: E402
from gateway.policy.schema import GrpcTls  # noqa: E402
from proto.gen import worker_pb2  # noqa: E402
from tandem.demo_model import write_demo_checkpoint  # noqa: E402
from tests.certs import Authority  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.stack import start_worker_process  # noqa: E402

PATHS = ("plaintext", "tls", "mutual-tls")


def _request(i: int) -> worker_pb2.GenerateRequest:
    return worker_pb2.GenerateRequest(
        request_id=f"bench-{i}",
        model="tandem-demo",
        prompt_token_ids=list(range(1, 33)),
        sampling=worker_pb2.SamplingParams(temperature=0, max_tokens=1),
    )


async def _calls(backend: GrpcWorkerBackend, n: int, first: int) -> tuple[list[float], float]:
    """n sequential Generate calls: their wall times (ms) and this process's CPU for all of them (ms)."""
    times = []
    cpu_started = time.process_time()
    for i in range(n):
        started = time.perf_counter()
        async for _ in backend._stub.Generate(_request(first + i)):
            pass
        times.append((time.perf_counter() - started) * 1000)
    return times, (time.process_time() - cpu_started) * 1000


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _measure(ports: dict[str, int], tls: dict[str, GrpcTls | None], rounds: int, calls: int) -> dict:
    backends = {p: GrpcWorkerBackend(f"grpc://localhost:{ports[p]}", "tandem-demo", "cloud", tls=tls[p]) for p in PATHS}
    try:
        for backend in backends.values():  # the handshake and the channel, once, as the gateway's first poll does
            await _calls(backend, 20, 0)
        walls: dict[str, list[float]] = {p: [] for p in PATHS}
        per_round: dict[str, list[dict]] = {p: [] for p in PATHS}
        for r in range(rounds):
            for path in round_order(PATHS, r):
                times, cpu_ms = await _calls(backends[path], calls, r * calls)
                walls[path] += times
                per_round[path].append({"p50": statistics.median(times), "cpu": cpu_ms / calls})
    finally:
        for backend in backends.values():
            await backend.close()

    def ratio(path: str, key: str) -> float:
        pairs = zip(per_round[path], per_round["plaintext"], strict=True)
        return round(statistics.median(a[key] / b[key] for a, b in pairs), 3)

    return {
        "p50_ms": {p: round(_p(walls[p], 0.5), 3) for p in PATHS},
        "p99_ms": {p: round(_p(walls[p], 0.99), 3) for p in PATHS},
        "cpu_ms_per_call": {p: round(statistics.median(x["cpu"] for x in per_round[p]), 3) for p in PATHS},
        "tls_vs_plaintext_p50": ratio("tls", "p50"),
        "mtls_vs_plaintext_p50": ratio("mutual-tls", "p50"),
        "tls_vs_plaintext_cpu": ratio("tls", "cpu"),
        "mtls_vs_plaintext_cpu": ratio("mutual-tls", "cpu"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 200 calls (default: 5 of 1000)")
    args = parser.parse_args()
    rounds, calls = (3, 200) if args.quick else (5, 1000)
    work = Path(tempfile.mkdtemp(prefix="tandem-tls-bench-"))
    model = write_demo_checkpoint(work / "tandem-demo")
    ca = Authority(work / "pki")
    worker, gateway = ca.issue("worker", dns_names=("localhost",)), ca.issue("gateway", client=True)
    serving = {"TANDEM_TLS_CERT_FILE": str(worker.cert), "TANDEM_TLS_KEY_FILE": str(worker.key)}
    env = {"plaintext": {}, "tls": serving, "mutual-tls": serving | {"TANDEM_TLS_CLIENT_CA_FILE": str(ca.ca)}}
    tls = {
        "plaintext": None,
        "tls": GrpcTls(ca_file=str(ca.ca)),
        "mutual-tls": GrpcTls(ca_file=str(ca.ca), cert_file=str(gateway.cert), key_file=str(gateway.key)),
    }
    ports = {p: free_port() for p in PATHS}
    args_of = ["--prefill-us-per-token", "0", "--decode-us-per-token", "0"]
    processes = [
        start_worker_process(["sim-worker", "--model", str(model), "--port", str(ports[p]), *args_of], env[p])
        for p in PATHS
    ]
    try:
        result = asyncio.run(_measure(ports, tls, rounds, calls))
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
    name, isa = cpu_info()
    for path in PATHS:
        print(
            f"{path:11} p50 {result['p50_ms'][path]:.3f} ms  p99 {result['p99_ms'][path]:.3f} ms  "
            f"CPU {result['cpu_ms_per_call'][path]:.3f} ms a call"
        )
    print(json.dumps(result | {"rounds": rounds, "calls_per_round": calls, "cpu": name, "isa": isa}))


if __name__ == "__main__":
    main()
