"""Soak and scale, driven by locust (a load generator nobody here wrote): errors, memory and descriptors over time.

soak: the local stack (`tandem up`'s launcher: gateway, cloud worker, edge
agent, the demo model) under a fixed rate of whole and streamed, public and
private chat completions for `--minutes` (10 by default). The gateway's RSS and
open file descriptors are sampled every few seconds from /proc. Reported:
requests, failures (locust's own count: non-200, a stream without [DONE] or
with an error event), achieved rate, p50/p99, and the gateway's RSS growth
from the end of the warm-up (the first 20 %) to the end, and its descriptor
count, min and max after warm-up. Goals: 0 errors, RSS growth < 5 %, FDs flat.

scale: one gateway process in front of 8 simulated workers (`tandem
sim-worker`: the real scheduler, a sleep for the model, slow tokens so streams
stay open); locust opens `--streams` streams (2,000 by default), each read to
its end, then the next. Reported: the most streams open at once (the gateway's
own in-flight gauge), the gateway's RSS per open stream (RSS under load minus
RSS idle, over the streams), and a one-token request's latency, p50 and p99 of
40 probes through the gateway and 40 straight to a worker, idle and with every
stream open: the difference is the p99 the gateway adds.

    pip install -e '.[bench]'                 # locust
    python bench/soak.py soak                 # 10 minutes
    python bench/soak.py scale                # 2,000 open streams
    python bench/soak.py --quick              # both, short: 2 minutes, 500 streams

Last line: one JSON object.
"""

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.privacy import cpu_info  # noqa: E402
from proto.gen import worker_pb2, worker_pb2_grpc  # noqa: E402
from tandem.demo_model import write_demo_checkpoint  # noqa: E402
from tandem.stack import LocalStack, start_local_stack  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.stack import start_gateway, write_policy  # noqa: E402

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
SIM_WORKERS = 8
PROBES = 40


def proc_sample(pid: int) -> tuple[int, int]:
    """(RSS bytes, open file descriptors) of a process, from /proc."""
    rss_kb = int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1))
    return rss_kb * 1024, len(os.listdir(f"/proc/{pid}/fd"))


def run_locust(url: str, users: int, spawn_rate: float, seconds: int, env: dict, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", url, "-u", str(users),
         "-r", str(spawn_rate), "--run-time", f"{seconds}s", "--csv", str(out / "locust"), "--only-summary",
         "--stop-timeout", "30"],
        env={**os.environ, **env}, stdout=(out / "locust.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def locust_totals(out: Path) -> dict:
    with open(out / "locust_stats.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["Name"] == "Aggregated")
    return {
        "requests": int(row["Request Count"]),
        "failures": int(row["Failure Count"]),
        "rps": round(float(row["Requests/s"]), 2),
        "p50_ms": float(row["50%"]),
        "p99_ms": float(row["99%"]),
    }


def gateway_pid(stack: LocalStack) -> int:
    return next(c.process.pid for c in stack.children if c.pool is None)


def soak(minutes: float, rate: float, work: Path) -> dict:
    model = write_demo_checkpoint(work / "models" / "tandem-demo")
    policy = write_policy(work / "policy.yaml", free_port(), free_port())
    stack = start_local_stack(model, policy, work, free_port(), {"OTEL_SDK_DISABLED": "true"})
    try:
        seconds, users = int(minutes * 60), max(1, int(rate))
        locust = run_locust(stack.url, users, users, seconds, {"TANDEM_USER_RPS": str(rate / users)}, work)
        samples, started, pid = [], time.monotonic(), gateway_pid(stack)
        while locust.poll() is None:
            samples.append((time.monotonic() - started, *proc_sample(pid)))
            print(f"\r{samples[-1][0]:6.0f} s  RSS {samples[-1][1] / 2**20:7.1f} MiB  FDs {samples[-1][2]}",
                  end="", file=sys.stderr, flush=True)  # fmt: skip
            time.sleep(5)
        print(file=sys.stderr)
        steady = [s for s in samples if s[0] >= 0.2 * seconds] or samples
        growth = (steady[-1][1] - steady[0][1]) / steady[0][1]
        return locust_totals(work) | {
            "minutes": minutes,
            "target_rps": rate,
            "rss_mib_after_warmup": round(steady[0][1] / 2**20, 1),
            "rss_mib_end": round(steady[-1][1] / 2**20, 1),
            "rss_growth": round(growth, 4),
            "fds_min": min(s[2] for s in steady),
            "fds_max": max(s[2] for s in steady),
        }
    finally:
        stack.stop()


def start_sim_pool(model: Path, work: Path) -> tuple[list[subprocess.Popen], Path, int]:
    """8 slow workers for the streams (each token a step of 8 ms per running sequence, so 2,000 streams
    move about 1,000 tokens a second in all), a fast idle one for the probes, a stand-in edge pool."""
    slow, probe, edge = [free_port() for _ in range(SIM_WORKERS)], free_port(), free_port()
    processes = []
    for i, (port, decode_us) in enumerate([(p, 8000) for p in slow] + [(probe, 1000), (edge, 1000)]):
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "tandem.cli", "sim-worker", "--model", str(model), "--port", str(port),
             "--decode-us-per-token", str(decode_us), "--num-kv-blocks", "8192"],
            cwd=ROOT, stdout=(work / f"sim{i}.log").open("w"), stderr=subprocess.STDOUT,
        ))  # fmt: skip
    for i in range(len(processes)):
        while "ready" not in (work / f"sim{i}.log").read_text():
            time.sleep(0.1)
    policy = {
        "version": 1,
        "pools": {"cloud": {"kind": "cloud", "endpoints": [f"grpc://127.0.0.1:{p}" for p in slow]},
                  "probe": {"kind": "cloud", "endpoints": [f"grpc://127.0.0.1:{probe}"]},
                  "edge": {"kind": "edge", "endpoints": [f"grpc://127.0.0.1:{edge}"]}},
        "rules": [{"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
                  {"name": "probe", "match": {"device": {"network": ["probe"]}}, "route": "probe"},
                  {"name": "default", "route": "cloud"}],
    }  # fmt: skip
    (work / "sim-policy.yaml").write_text(yaml.safe_dump(policy))
    return processes, work / "sim-policy.yaml", probe


def probe_ms(url: str, probe_port: int) -> dict[str, float]:
    """p50 and p99 of a one-token request through the gateway, and of the same straight to the probe worker
    (idle, whatever the streams do), alternating: their difference is what the gateway adds."""
    through, direct = [], []
    ids = list(range(100, 112))  # about what the chat template makes of "hi"
    # One connection each way, opened before timing: the gateway's to the worker is kept alive too.
    with httpx.Client(timeout=60) as client, grpc.insecure_channel(f"127.0.0.1:{probe_port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = worker_pb2_grpc.WorkerStub(channel)
        for i in range(PROBES):
            started = time.perf_counter()
            reply = client.post(f"{url}/v1/chat/completions", headers={"X-Tandem-Device": '{"network": "probe"}'},
                                json={"model": "tandem-demo", "max_tokens": 1,
                                      "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
            assert reply.status_code == 200 and reply.headers["x-tandem-route"] == "probe; rule=probe", reply.text
            through.append((time.perf_counter() - started) * 1e3)
            request = worker_pb2.GenerateRequest(request_id=f"probe-{i}", prompt_token_ids=ids,
                                                 sampling=worker_pb2.SamplingParams(max_tokens=1))  # fmt: skip
            started = time.perf_counter()
            list(stub.Generate(request, timeout=60))
            direct.append((time.perf_counter() - started) * 1e3)
    return {"through_p50": quantile(through, 0.5), "through_p99": quantile(through, 0.99),
            "direct_p50": quantile(direct, 0.5), "direct_p99": quantile(direct, 0.99)}  # fmt: skip


def quantile(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))]


def open_streams(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return int(sum(float(v) for v in re.findall(r"^tandem_gateway_inflight_requests\{[^}]*\} (\S+)$", text, re.M)))


def scale(streams: int, work: Path) -> dict:
    model = write_demo_checkpoint(work / "models" / "tandem-demo")
    processes, policy, probe_port = start_sim_pool(model, work)
    env = {"OTEL_SDK_DISABLED": "true", "TANDEM_WATCH_POLICY": "false"}
    gateway = start_gateway(model, policy, free_port(), env, work)
    try:
        pid = gateway.children[0].process.pid
        idle_rss, idle_fds = proc_sample(pid)
        idle = probe_ms(gateway.url, probe_port)
        locust = run_locust(gateway.url, streams, max(50, streams // 10), 600, {"TANDEM_LOCUST_MODE": "scale"}, work)
        most, deadline = 0, time.monotonic() + 300
        while most < 0.98 * streams and time.monotonic() < deadline and locust.poll() is None:
            most = max(most, open_streams(gateway.url))
            print(f"\r{most} streams open", end="", file=sys.stderr, flush=True)
            time.sleep(1)
        print(file=sys.stderr)
        loaded_rss, loaded_fds = proc_sample(pid)
        open_now = open_streams(gateway.url)
        loaded = probe_ms(gateway.url, probe_port)
        locust.terminate()
        locust.wait(timeout=60)
        return {
            "streams_asked": streams,
            "streams_open_max": max(most, open_now),
            "rss_mib_idle": round(idle_rss / 2**20, 1),
            "rss_mib_loaded": round(loaded_rss / 2**20, 1),
            "rss_kib_per_stream": round((loaded_rss - idle_rss) / max(1, open_now) / 1024, 1),
            "fds_idle": idle_fds,
            "fds_loaded": loaded_fds,
            "probe_ms_idle": {k: round(v, 1) for k, v in idle.items()},
            "probe_ms_loaded": {k: round(v, 1) for k, v in loaded.items()},
            "added_p99_ms_idle": round(idle["through_p99"] - idle["direct_p99"], 1),
            "added_p99_ms_loaded": round(loaded["through_p99"] - loaded["direct_p99"], 1),
        }
    finally:
        gateway.stop()
        for p in processes:
            p.terminate()
        for p in processes:
            p.wait(timeout=10)


def cpu() -> str:
    name, flags = cpu_info()
    return f"{name} ({', '.join(flags)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=["soak", "scale", "both"], default="both")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=10.0, help="soak: requests per second")
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="2 minutes of soak, 500 streams")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.streams = 2.0, 500
    result = {"cpu": cpu(), "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="tandem-soak-") as tmp:
        if args.mode in ("soak", "both"):
            (Path(tmp) / "soak").mkdir()
            result["soak"] = soak(args.minutes, args.rate, Path(tmp) / "soak")
            print(json.dumps(result["soak"], indent=1), file=sys.stderr)
        if args.mode in ("scale", "both"):
            (Path(tmp) / "scale").mkdir()
            result["scale"] = scale(args.streams, Path(tmp) / "scale")
            print(json.dumps(result["scale"], indent=1), file=sys.stderr)
    soak_ok = "soak" not in result or (result["soak"]["failures"] == 0 and result["soak"]["rss_growth"] < 0.05)
    result["goals_met"] = soak_ok
    print(json.dumps(result))


if __name__ == "__main__":
    main()
