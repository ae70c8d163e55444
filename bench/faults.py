"""Stays up under abuse and faults: real processes, real faults, every request accounted for.

Starts the local stack once (demo model, two cloud workers, one edge agent,
all publishing prefix hints to a redis-server of this script's own), then
runs each case against a fresh gateway of its own, under load from a pool of
asyncio httpx clients sending chat completions (streamed and whole,
`max_tokens` 16-48, each with a deadline). Every request ends as one of:

- succeeded: a whole answer with a finish reason, or a stream with its
  finish reason and `[DONE]`;
- failed_clear: a 4xx/5xx with an OpenAI error body saying why, a stream
  whose `[DONE]` follows an error event, or a connection refused;
- lost: no answer (the connection dropped before a response), a stream
  ended without `[DONE]` or without an error event after a cut, an error
  without a message, or no end before the deadline.

Cases (the issue "Stays up under abuse and faults"):

1. worker_killed: one of two cloud workers SIGKILLed under 32 streaming
   clients: streams on it end with an error event, later requests go to the
   other; then it is restarted with the same arguments;
2. worker_hung: a cloud worker SIGSTOPped (health polls slowed to 10 s, so
   the breaker decides): attempts time out (1 s) and move on, its breaker
   opens; after SIGCONT it serves again;
3. redis_restarted: Redis killed and restarted: no request fails; the hint
   and rate-limit modes fall back (approximate, local) and recover (redis);
4. policy_broken: invalid YAML, then an empty file, written over the live
   policy, then the valid one back: no request affected, /readyz shows why;
5. edge_killed: private requests get a 503 saying why, public ones that
   would go to the edge fall back to the cloud; the agent restarted with
   the same arguments serves private requests again, the gateway untouched
   (restarts report when the process was ready and when a gateway saw it);
6. gateway_sigterm: /readyz turns 503 (draining) first, requests are served
   through TANDEM_DRAIN_DELAY_S=1, in-flight streams finish, then new
   connections are refused.

Prints one line per case (sent, succeeded, failed_clear, lost, the checks
that did not hold), then, as its last line, one JSON object: per case the
counts, why requests failed or were lost, the facts observed (breaker
states, metric modes, recovery times) and the checks; `lost_total`;
`goal_met` (no request lost in any case). Logs stay in the printed
directory when a request was lost or a check failed (or with --keep-logs).

    python bench/faults.py --quick
"""

import argparse
import asyncio
import inspect
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import grpc
import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.privacy import cpu_info  # noqa: E402
from proto.gen import worker_pb2, worker_pb2_grpc  # noqa: E402
from proto.prefix_hints import KEY_PREFIX, worker_id_for  # noqa: E402
from tandem.demo_model import cached_demo_checkpoint  # noqa: E402
from tandem.stack import LocalStack, start_local_stack  # noqa: E402
from tests.conftest import free_port, start_redis_server  # noqa: E402
from tests.stack import start_gateway  # noqa: E402

CACHE = Path.home() / ".cache" / "tandem" / "bench"
MODEL_ID = "tandem-demo"
console = Console(stderr=True)
NPU = json.dumps({"npu": True})
WORDS = ("gateway worker prefix cache block token route tenant policy model answer question edge cloud "
         "device latency stream batch memory request").split()  # fmt: skip
OPENINGS = [f"You are helper {i}. " + " ".join(random.Random(i).choices(WORDS, k=30)) for i in range(6)]


@dataclass(frozen=True)
class Timing:
    warm_s: float  # load before the fault
    fault_s: float  # how long the fault lasts (a worker hung, Redis down, the edge gone)
    tail_s: float  # load after recovery
    recover_s: float  # the longest wait for a recovery before the case says it did not happen
    deadline_s: float = 30.0  # per request


QUICK = Timing(warm_s=2, fault_s=3, tail_s=2, recover_s=30)
FULL = Timing(warm_s=5, fault_s=8, tail_s=5, recover_s=60)


# -- requests and their outcomes -----------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    stream: bool
    max_tokens: int
    private: bool = False
    npu: bool = False  # a short prompt from a device with an NPU: the edge first, the cloud as fallback
    shared: bool = True  # the prompt starts with one of a few shared openings (prefix-cache affinity)


@dataclass
class Outcome:
    spec: Spec
    sent_at: float  # seconds since the load started
    done_at: float = 0.0
    verdict: str = "lost"  # succeeded | failed_clear | lost
    why: str = "no end"
    backend: str | None = None  # X-Tandem-Backend
    pool: str | None = None  # from X-Tandem-Route
    max_gap_s: float = 0.0  # the longest wait between two stream events

    def set(self, verdict: str, why: str) -> None:
        self.verdict, self.why = verdict, why

    def note(self, response: httpx.Response) -> None:
        self.backend = response.headers.get("x-tandem-backend")
        route = response.headers.get("x-tandem-route")
        self.pool = route.split(";")[0] if route else None

    def set_error(self, response: httpx.Response) -> None:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = None
        if message:
            self.set("failed_clear", f"{response.status_code}: {message}")
        else:
            self.set("lost", f"{response.status_code} without an error message")


def request_for(spec: Spec, rng: random.Random) -> tuple[dict, dict]:
    question = " ".join(rng.choices(WORDS, k=6)) + f" {rng.randrange(10_000)}?"
    opening = rng.choice(OPENINGS) if spec.shared else f"{rng.randrange(10**6)} " + " ".join(rng.choices(WORDS, k=30))
    content = question if spec.npu else f"{opening} Question: {question}"
    body = {"model": MODEL_ID, "max_tokens": spec.max_tokens, "stream": spec.stream, "temperature": 0,
            "messages": [{"role": "user", "content": content}]}  # fmt: skip
    if spec.private:
        body["metadata"] = {"privacy": "pii"}
    return body, ({"X-Tandem-Device": NPU} if spec.npu else {})


async def send(client: httpx.AsyncClient, url: str, spec: Spec, rng: random.Random, deadline_s: float, t0: float):
    body, headers = request_for(spec, rng)
    out = Outcome(spec, time.monotonic() - t0)
    try:
        async with asyncio.timeout(deadline_s):
            if spec.stream:
                await _read_stream(client, f"{url}/v1/chat/completions", body, headers, out)
            else:
                await _read_whole(client, f"{url}/v1/chat/completions", body, headers, out)
    except TimeoutError:
        out.set("lost", f"hung past its {deadline_s:g} s deadline")
    except httpx.ConnectError:
        out.set("failed_clear", "connection refused")
    except httpx.HTTPError as exc:
        out.set("lost", f"{type(exc).__name__}: {exc}"[:120])
    out.done_at = time.monotonic() - t0
    return out


async def _read_whole(client: httpx.AsyncClient, url: str, body: dict, headers: dict, out: Outcome) -> None:
    response = await client.post(url, json=body, headers=headers)
    out.note(response)
    if response.status_code != 200:
        return out.set_error(response)
    try:
        reason = response.json()["choices"][0]["finish_reason"]
    except (ValueError, KeyError, IndexError, TypeError):
        reason = None
    out.set("succeeded", "ok") if reason else out.set("lost", "200 without a finish reason")


async def _read_stream(client: httpx.AsyncClient, url: str, body: dict, headers: dict, out: Outcome) -> None:
    async with client.stream("POST", url, json=body, headers=headers) as response:
        out.note(response)
        if response.status_code != 200:
            await response.aread()
            return out.set_error(response)
        done, error, finished, last = False, None, False, None
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            now = time.monotonic()
            out.max_gap_s = max(out.max_gap_s, now - last) if last else 0.0
            last = now
            payload = line.removeprefix("data:").strip()
            if payload == "[DONE]":
                done = True
                continue
            event = json.loads(payload)
            if "error" in event:
                error = (event["error"] or {}).get("message") or "an error event without a message"
            finished = finished or any(c.get("finish_reason") for c in event.get("choices", []))
    if not done:
        out.set("lost", "stream ended without [DONE]")
    elif error:
        out.set("failed_clear", f"error event: {error}")
    elif finished:
        out.set("succeeded", "ok")
    else:
        out.set("lost", "stream cut without an error event")


# -- load ----------------------------------------------------------------------------------------


@dataclass
class Load:
    url: str
    concurrency: int
    spec: Callable[[random.Random], Spec]
    deadline_s: float
    outcomes: list[Outcome] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)  # fault steps, seconds since the load started
    t0: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def mark(self, event: str) -> float:
        self.events[event] = round(self.now(), 3)
        console.log(f"  {event} at {self.events[event]:.1f} s ({len(self.outcomes)} requests done)")
        return self.events[event]

    def sent_between(self, start: float, end: float = float("inf")) -> list[Outcome]:
        return [o for o in self.outcomes if start <= o.sent_at < end]


async def _client(client: httpx.AsyncClient, load: Load, stop: asyncio.Event, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        out = await send(client, load.url, load.spec(rng), rng, load.deadline_s, load.t0)
        load.outcomes.append(out)
        if out.verdict != "succeeded":
            await asyncio.sleep(0.1)  # a client's back-off: no busy loop on a refusal


async def under_load(load: Load, fault: Callable[[httpx.AsyncClient], Coroutine]) -> dict:
    """Run the clients while `fault(ops_client)` runs; stop them once it returns, let in-flight requests end."""
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=load.concurrency, max_keepalive_connections=load.concurrency)
    timeout = httpx.Timeout(load.deadline_s + 10, connect=5)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client, httpx.AsyncClient(timeout=3) as ops:
        load.t0 = time.monotonic()
        tasks = [asyncio.create_task(_client(client, load, stop, seed)) for seed in range(load.concurrency)]
        try:
            return await fault(ops)
        finally:
            stop.set()
            await asyncio.gather(*tasks)


def public_mix(rng: random.Random) -> Spec:
    """Prompts sharing no prefix: the cache-affinity picker spreads them by load, so every worker gets some."""
    return Spec(rng.random() < 0.5, rng.randint(16, 48), shared=False)


def with_private(rng: random.Random) -> Spec:
    """A quarter private (edge only), a quarter short prompts from an NPU device, half default."""
    roll = rng.random()
    return Spec(rng.random() < 0.5, rng.randint(16, 32), private=roll < 0.25, npu=0.25 <= roll < 0.5)


# -- the processes -------------------------------------------------------------------------------


class RedisServer:
    """A redis-server of our own on a fixed free port, so it can be killed and started again there."""

    def __init__(self, workdir: Path) -> None:
        self.port, self.workdir, self.process = free_port(), workdir, None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        _, self.process = start_redis_server(self.workdir, self.port)
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclass
class Rig:
    model: Path
    work: Path
    redis: RedisServer
    policy: Path
    stack: LocalStack | None = None

    @property
    def cloud(self) -> list[str]:
        return [c.endpoint for c in self.stack.workers("cloud")]

    @property
    def edge(self) -> str:
        return self.stack.workers("edge")[0].endpoint

    def gateway(self, name: str, env: dict[str, str] | None = None, policy: Path | None = None) -> LocalStack:
        """A gateway of the case's own over the stack's workers (fresh breakers, metrics and policy)."""
        env = {"OTEL_SDK_DISABLED": "true", "REDIS_URL": self.redis.url, **(env or {})}
        return start_gateway(self.model, policy or self.policy, free_port(), env, self.work / "logs" / name)

    def restart(self, pool: str, endpoint: str | None = None, timeout_s: float = 120.0) -> dict[str, float | None]:
        """Restart a pool's worker(s) with the same arguments: seconds until each says it is ready (its log),
        and until the stack's gateway (there since before the fault) sees every backend healthy."""
        before = {c.endpoint: _ready_lines(c) for c in self.stack.workers(pool, endpoint)}
        started, out = time.monotonic(), {"ready_in_log_s": None, "healthy_in_gateway_s": None}
        fresh = self.stack.restart(pool, endpoint)
        while time.monotonic() - started < timeout_s:
            elapsed = round(time.monotonic() - started, 2)
            if dead := next((c for c in fresh if c.process.poll() is not None), None):
                raise RuntimeError(f"{dead.name} exited with {dead.process.returncode}:\n{dead.tail()}")
            if out["ready_in_log_s"] is None and all(_ready_lines(c) > before[c.endpoint] for c in fresh):
                out["ready_in_log_s"] = elapsed
            if out["ready_in_log_s"] is not None and _all_healthy(self.stack):
                out["healthy_in_gateway_s"] = elapsed
                break
            time.sleep(0.1)
        return out

    def stop(self) -> None:
        if self.stack is not None:
            self.stack.send_signal("cloud", signal.SIGCONT)  # a stopped worker cannot act on SIGTERM
            self.stack.stop()
        self.redis.kill()


def _ready_lines(child) -> int:
    return child.log_path.read_text(errors="replace").count(" worker ready on ")


def _all_healthy(stack: LocalStack) -> bool:
    try:
        backends = httpx.get(f"{stack.url}/readyz", headers=stack.ops_headers, timeout=2).json()["backends"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return all(b["healthy"] for b in backends.values())


def start_rig(model: Path, work: Path) -> Rig:
    redis_server = RedisServer(work).start()
    policy = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
    policy["pools"]["cloud"]["endpoints"] = [f"grpc://127.0.0.1:{free_port()}" for _ in range(2)]
    policy["pools"]["edge"]["endpoints"] = [f"grpc://127.0.0.1:{free_port()}"]
    path = work / "policy.yaml"
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    rig = Rig(model, work, redis_server, path)
    try:
        env = {"OTEL_SDK_DISABLED": "true", "REDIS_URL": redis_server.url}
        rig.stack = start_local_stack(model, path, work, free_port(), env)
    except BaseException:
        redis_server.kill()
        raise
    return rig


# -- observing the gateway -----------------------------------------------------------------------


async def readyz(ops: httpx.AsyncClient, url: str) -> tuple[int, dict]:
    try:
        response = await ops.get(f"{url}/readyz")
        return response.status_code, response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return 0, {"error": type(exc).__name__}


async def modes(ops: httpx.AsyncClient, url: str) -> dict[str, str | None]:
    """The active prefix-hint and rate-limit modes per /metrics."""
    out = {"prefix_hint": None, "rate_limit": None}
    try:
        text = (await ops.get(f"{url}/metrics")).text
    except httpx.HTTPError:
        return out
    names = {"tandem_gateway_prefix_hint_mode": "prefix_hint", "tandem_gateway_rate_limit_mode": "rate_limit"}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names and sample.value == 1:
                out[names[sample.name]] = sample.labels["mode"]
    return out


async def wait_for(check: Callable[[], object], timeout_s: float, interval_s: float = 0.2) -> float | None:
    """Seconds until `check()` (awaited when it is a coroutine) is true, or None after timeout_s."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return round(time.monotonic() - started, 2)
        await asyncio.sleep(interval_s)
    return None


async def circuit_of(ops: httpx.AsyncClient, url: str, endpoint: str) -> tuple[str | None, bool | None]:
    """A backend's breaker state and health per the gateway's /readyz."""
    _, body = await readyz(ops, url)
    backend = (body.get("backends") or {}).get(endpoint) or {}
    return backend.get("circuit"), backend.get("healthy")


async def sample(probe: Callable[[], Coroutine], duration_s: float, interval_s: float = 0.2) -> list:
    """`await probe()` every interval_s for duration_s: (seconds, value) pairs."""
    started, out = time.monotonic(), []
    while (elapsed := time.monotonic() - started) < duration_s:
        out.append((round(elapsed, 2), await probe()))
        await asyncio.sleep(interval_s)
    return out


def verdicts(outcomes: list[Outcome]) -> dict[str, int]:
    counts = Counter(o.verdict for o in outcomes)
    return {v: counts[v] for v in ("succeeded", "failed_clear", "lost")}


# -- the cases -----------------------------------------------------------------------------------

CaseResult = tuple[list[Outcome], dict, dict[str, bool]]  # outcomes, facts, checks (named, True when as described)


async def worker_killed(rig: Rig, t: Timing) -> CaseResult:
    """One of two cloud workers SIGKILLed under 32 streaming clients, then restarted with the same arguments."""
    gateway = await asyncio.to_thread(rig.gateway, "worker_killed")
    victim, survivor = rig.cloud
    load = Load(gateway.url, 32, lambda rng: Spec(True, rng.randint(32, 48)), t.deadline_s)

    async def fault(ops: httpx.AsyncClient) -> float:
        await asyncio.sleep(t.warm_s)
        await wait_for(lambda: returns_running(victim, 2), 10, interval_s=0.02)  # kill it mid-generation
        killed_at = load.mark("SIGKILL a cloud worker")
        for child in rig.stack.send_signal("cloud", signal.SIGKILL, victim):
            await asyncio.to_thread(child.process.wait)
        await asyncio.sleep(t.fault_s + t.tail_s)
        return killed_at

    try:
        killed_at = await under_load(load, fault)
    finally:
        await asyncio.to_thread(gateway.stop)
    console.log("  restarting the killed worker")
    restart = await asyncio.to_thread(rig.restart, "cloud", victim)
    # Streams from it that the client was still reading at the kill: some had all their tokens already.
    cut = [o for o in load.outcomes if o.backend == victim and o.sent_at < killed_at < o.done_at]
    later = load.sent_between(killed_at)
    facts = {
        "killed": victim,
        "streams_on_it_at_kill": verdicts(cut),
        "cut_with_error_event": sum(o.why.startswith("error event") for o in cut),
        "sent_after_kill": verdicts(later),
        "served_after_kill_by": dict(Counter(o.backend for o in later if o.verdict == "succeeded")),
        "restart": restart,
    }
    checks = {
        "the_kill_cut_streams": facts["cut_with_error_event"] > 0,
        "every_cut_stream_ended_clearly": all(o.verdict != "lost" for o in cut),
        "requests_after_kill_failed_over": all(o.verdict == "succeeded" and o.backend == survivor for o in later),
        "restarted_worker_healthy_again": restart["healthy_in_gateway_s"] is not None,
    }
    return load.outcomes, facts, checks


async def returns_running(endpoint: str, at_least: int) -> bool:
    """Whether the worker has at least this many sequences running (its own Stats)."""
    async with grpc.aio.insecure_channel(endpoint.removeprefix("grpc://")) as channel:
        try:
            stats = await worker_pb2_grpc.WorkerStub(channel).Stats(worker_pb2.StatsRequest(), timeout=1)
        except grpc.aio.AioRpcError:
            return False
    return stats.running >= at_least


async def worker_hung(rig: Rig, t: Timing) -> CaseResult:
    """A cloud worker SIGSTOPped: 1 s attempts time out and move on, its breaker opens; after SIGCONT it serves.

    Health polls every 10 s here: at the default 1 s, a poll's Stats timeout may mark the worker unhealthy
    before three attempts have timed out, and then no request tries it again: the breaker is not exercised.
    """
    env = {"TANDEM_ATTEMPT_TIMEOUT_S": "1", "TANDEM_BREAKER_OPEN_S": "2", "TANDEM_HEALTH_INTERVAL_S": "10"}
    gateway = await asyncio.to_thread(rig.gateway, "worker_hung", env)
    victim = rig.cloud[0]
    load = Load(gateway.url, 16, public_mix, t.deadline_s)

    async def fault(ops: httpx.AsyncClient) -> dict:
        await asyncio.sleep(t.warm_s)
        stopped = load.mark("SIGSTOP a cloud worker")
        rig.stack.send_signal("cloud", signal.SIGSTOP, victim)
        try:
            states = await sample(lambda: circuit_of(ops, gateway.url, victim), max(t.fault_s, 4))
        finally:
            resumed = load.mark("SIGCONT")
            rig.stack.send_signal("cloud", signal.SIGCONT, victim)

        def served() -> bool:
            return any(o.backend == victim and o.verdict == "succeeded" for o in load.sent_between(resumed))

        served_s = await wait_for(served, t.recover_s)
        closed_s = await wait_for(lambda: returns_closed(ops, gateway.url, victim), t.recover_s)
        await asyncio.sleep(t.tail_s)
        opened = next((at for at, (circuit, _) in states if circuit == "open"), None)
        return {"stopped_at": stopped, "resumed_at": resumed, "breaker_states_while_stopped":
                sorted({c for _, (c, _) in states if c}), "breaker_open_after_s": opened,
                "healthy_while_stopped": sorted({h for _, (_, h) in states if h is not None}),
                "served_by_it_after_sigcont_s": served_s, "breaker_closed_after_sigcont_s": closed_s}  # fmt: skip

    try:
        facts = await under_load(load, fault)
    finally:
        await asyncio.to_thread(gateway.stop)
    during = load.sent_between(facts["stopped_at"], facts["resumed_at"])
    facts |= {"hung": victim, **_hang_facts(load.outcomes, during)}
    checks = {
        "breaker_opened": facts["breaker_open_after_s"] is not None,
        "requests_while_stopped_moved_on": all(o.verdict == "succeeded" for o in during),
        "served_by_it_after_sigcont": facts["served_by_it_after_sigcont_s"] is not None,
        "breaker_closed_again": facts["breaker_closed_after_sigcont_s"] is not None,
    }
    return load.outcomes, facts, checks


def _hang_facts(outcomes: list[Outcome], during: list[Outcome]) -> dict:
    return {
        "sent_while_stopped": verdicts(during),
        "slowest_while_stopped_s": round(max((o.done_at - o.sent_at for o in during), default=0), 2),
        "longest_stream_stall_s": round(max((o.max_gap_s for o in outcomes), default=0), 2),
        "streams_stalled_over_2s": sum(o.max_gap_s > 2 for o in outcomes),  # on the worker when it hung
    }


async def returns_closed(ops: httpx.AsyncClient, url: str, endpoint: str) -> bool:
    return await circuit_of(ops, url, endpoint) == ("closed", True)


def held_hints(redis_url: str, endpoints: list[str]) -> dict[str, int]:
    """Per worker, the blocks Redis says it holds with its own hint (expiring more than 2.5 s from now; a gateway's
    pending ones expire within 2 s): proto/prefix_hints.py's layout."""
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    seconds, microseconds = client.time()
    later_ms = seconds * 1000 + microseconds // 1000 + 2500
    keys = list(client.scan_iter(match=f"{KEY_PREFIX}:{MODEL_ID}:*", count=1000))
    out = {}
    for endpoint in endpoints:
        worker = worker_id_for(endpoint)
        scores = [client.zscore(k, worker) for k in keys]
        out[endpoint] = sum(score is not None and score > later_ms for score in scores)
    client.close()
    return out


async def redis_restarted(rig: Rig, t: Timing) -> CaseResult:
    """Redis killed and started again under load: no request fails; hint and rate-limit modes fall back and recover."""
    tenants = rig.work / "tenants.yaml"  # limits far above the load, so admission goes through Redis
    tenants.write_text("default_limits: {requests_per_minute: 1000000, tokens_per_minute: 100000000}\n")
    env = {"TANDEM_AUTH": "none", "TANDEM_TENANTS_FILE": str(tenants)}
    gateway = await asyncio.to_thread(rig.gateway, "redis_restarted", env)
    load = Load(gateway.url, 16, public_mix, t.deadline_s)
    all_redis = {"prefix_hint": "redis", "rate_limit": "redis"}

    async def fault(ops: httpx.AsyncClient) -> dict:
        await asyncio.sleep(t.warm_s)
        before = await modes(ops, gateway.url)
        hints = await asyncio.to_thread(held_hints, rig.redis.url, rig.cloud)
        load.mark("Redis killed")
        await asyncio.to_thread(rig.redis.kill)
        await asyncio.sleep(0.5)  # the modes change on the first failed call, not on the kill
        down = await sample(lambda: modes(ops, gateway.url), t.fault_s - 0.5)
        load.mark("Redis started again")
        await asyncio.to_thread(rig.redis.start)
        back_s = await wait_for(lambda: returns_modes(ops, gateway.url, all_redis), t.recover_s)
        await asyncio.sleep(t.tail_s)
        return {"modes_before": before, "modes_while_down": sorted({json.dumps(m) for _, m in down}),
                "modes_after": await modes(ops, gateway.url), "back_to_redis_after_s": back_s,
                "worker_hints_in_redis_before": hints}  # fmt: skip

    try:
        facts = await under_load(load, fault)
    finally:
        await asyncio.to_thread(gateway.stop)
    facts["modes_while_down"] = [json.loads(m) for m in facts["modes_while_down"]]
    facts["worker_hints_in_redis_after"] = await asyncio.to_thread(held_hints, rig.redis.url, rig.cloud)
    down = facts["modes_while_down"]
    checks = {
        "no_request_failed": all(o.verdict == "succeeded" for o in load.outcomes),
        "redis_modes_before": facts["modes_before"] == all_redis,
        "hints_fell_back_to_approximate": any(m["prefix_hint"] == "approximate" for m in down),
        "rate_limits_fell_back_to_local": any(m["rate_limit"] == "local" for m in down),
        "both_back_to_redis": facts["modes_after"] == all_redis,
        "workers_republished_hints": all(
            facts["worker_hints_in_redis_after"][e] > 0 for e, n in facts["worker_hints_in_redis_before"].items() if n
        ),
    }
    return load.outcomes, facts, checks


async def returns_modes(ops: httpx.AsyncClient, url: str, wanted: dict) -> bool:
    return await modes(ops, url) == wanted


async def last_policy_error(ops: httpx.AsyncClient, url: str) -> str | None:
    _, body = await readyz(ops, url)
    return (body.get("policy") or {}).get("last_error")


async def policy_broken(rig: Rig, t: Timing) -> CaseResult:
    """Invalid YAML, then an empty file, over the live policy, then the valid one back: no request affected."""
    folder = rig.work / "policy_broken"  # a directory of its own: the gateway watches the policy's directory
    folder.mkdir(exist_ok=True)
    policy, valid = folder / "policy.yaml", rig.policy.read_text()
    policy.write_text(valid)
    gateway = await asyncio.to_thread(rig.gateway, "policy_broken", None, policy)
    load = Load(gateway.url, 16, with_private, t.deadline_s)

    async def fault(ops: httpx.AsyncClient) -> dict:
        await asyncio.sleep(t.warm_s)
        shown, previous = {}, None
        for name, text in (("invalid_yaml", "pools: [edge\nrules: {route: cloud\n"), ("empty_file", "")):
            load.mark(f"policy: {name}")
            policy.write_text(text)
            seen_s = await wait_for(partial(returns_new_error, ops, gateway.url, previous), t.recover_s)
            previous = await last_policy_error(ops, gateway.url)
            shown[name] = {"shown_after_s": seen_s, "last_error": (previous or "")[:200]}
            await asyncio.sleep(t.fault_s / 2)
        load.mark("policy restored")
        policy.write_text(valid)
        restored_s = await wait_for(lambda: returns_no_error(ops, gateway.url), t.recover_s)
        await asyncio.sleep(t.tail_s)
        return {"rejections": shown, "restored_after_s": restored_s}

    try:
        facts = await under_load(load, fault)
    finally:
        await asyncio.to_thread(gateway.stop)
    private = [o for o in load.outcomes if o.spec.private]
    facts["private_served_by"] = dict(Counter(o.pool for o in private))
    checks = {
        "no_request_affected": all(o.verdict == "succeeded" for o in load.outcomes),
        "each_rejection_shown_in_readyz": all(r["shown_after_s"] is not None for r in facts["rejections"].values()),
        "valid_policy_serves_again": facts["restored_after_s"] is not None,
        "private_only_on_edge": all(o.pool == "edge" for o in private),
    }
    return load.outcomes, facts, checks


async def returns_new_error(ops: httpx.AsyncClient, url: str, previous: str | None) -> bool:
    error = await last_policy_error(ops, url)
    return error is not None and error != previous


async def returns_no_error(ops: httpx.AsyncClient, url: str) -> bool:
    status, body = await readyz(ops, url)
    return status == 200 and body.get("policy", {}).get("last_error", "unset") is None


def edge_mix(rng: random.Random) -> Spec:
    """Half private (edge only), half short prompts from an NPU device (edge first, cloud as fallback)."""
    return Spec(rng.random() < 0.5, rng.randint(16, 32), private=rng.random() < 0.5, npu=True)


async def edge_killed(rig: Rig, t: Timing) -> CaseResult:
    """The edge agent killed: private requests get a 503 saying why, public ones fall back to the cloud; the
    agent restarted with the same arguments serves private requests again, the gateway untouched."""
    gateway = await asyncio.to_thread(rig.gateway, "edge_killed")
    load = Load(gateway.url, 12, edge_mix, t.deadline_s)

    async def fault(ops: httpx.AsyncClient) -> dict:
        await asyncio.sleep(t.warm_s)
        killed = load.mark("SIGKILL the edge agent")
        await asyncio.to_thread(rig.stack.kill, "edge")
        await asyncio.sleep(t.fault_s)
        restarted = load.mark("edge agent started again")
        restart = asyncio.create_task(asyncio.to_thread(rig.restart, "edge"))

        def private_served() -> bool:
            return any(o.spec.private and o.verdict == "succeeded" for o in load.sent_between(restarted))

        served_s = await wait_for(private_served, t.recover_s + 30)
        load.mark("a private request served again")
        await asyncio.sleep(t.tail_s)
        return {"killed_at": killed, "restarted_at": restarted, "restart": await restart,
                "private_served_again_after_s": served_s}  # fmt: skip

    try:
        facts = await under_load(load, fault)
    finally:
        await asyncio.to_thread(gateway.stop)
    down = load.sent_between(facts["killed_at"], facts["restarted_at"])
    private_down = [o for o in down if o.spec.private]
    public_down = [o for o in down if not o.spec.private]
    why = [o for o in private_down if o.why.startswith("503") and "private" in o.why]
    facts |= {
        "private_while_down": verdicts(private_down),
        "private_503_saying_why": len(why),
        "example_503": why[0].why[:240] if why else None,
        "public_while_down": verdicts(public_down),
        "public_while_down_served_by": dict(Counter(o.pool for o in public_down if o.verdict == "succeeded")),
    }
    if facts["private_served_again_after_s"] is not None and facts["restart"]["ready_in_log_s"] is not None:
        wait = facts["private_served_again_after_s"] - facts["restart"]["ready_in_log_s"]
        facts["private_served_after_agent_ready_s"] = round(wait, 2)
    checks = {
        "private_refused_with_503_saying_why": len(why) == len(private_down) > 0,
        "public_fell_back_to_cloud": all(o.verdict == "succeeded" and o.pool == "cloud" for o in public_down),
        "private_served_again_after_restart": facts["private_served_again_after_s"] is not None,
        "private_never_left_the_edge": all(o.pool == "edge" for o in load.outcomes if o.spec.private and o.pool),
    }
    return load.outcomes, facts, checks


DRAINING = {"status": 503, "body": {"ready": False, "draining": True}}


def wait_exit(process: subprocess.Popen, timeout_s: float) -> int | None:
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


async def gateway_sigterm(rig: Rig, t: Timing, delay_s: float = 1.0, grace_s: float = 20.0) -> CaseResult:
    """SIGTERM under load: /readyz 503 (draining) first, served through the drain delay, in-flight streams
    finish within the grace period, then new connections are refused."""
    env = {"TANDEM_DRAIN_DELAY_S": str(delay_s), "TANDEM_SHUTDOWN_GRACE_S": str(grace_s)}
    gateway = await asyncio.to_thread(rig.gateway, "gateway_sigterm", env)
    process = gateway.children[0].process
    load = Load(gateway.url, 16, lambda rng: Spec(rng.random() < 0.75, rng.randint(32, 48)), t.deadline_s)

    async def fault(ops: httpx.AsyncClient) -> dict:
        await asyncio.sleep(t.warm_s)
        term = load.mark("SIGTERM the gateway")
        process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.05)
        status, body = await readyz(ops, gateway.url)
        code = await asyncio.to_thread(wait_exit, process, delay_s + grace_s + 10)
        exited = load.mark("gateway exited")
        await asyncio.sleep(1.0)  # the clients keep trying
        return {"sigterm_at": term, "readyz_after_sigterm": {"status": status, "body": body},
                "exit_code": code, "exited_after_s": round(exited - term, 2)}  # fmt: skip

    try:
        facts = await under_load(load, fault)
    finally:
        await asyncio.to_thread(gateway.stop)
    term = facts["sigterm_at"]
    in_delay = load.sent_between(term, term + delay_s - 0.2)  # well inside the delay: still served
    inflight = [o for o in load.outcomes if o.sent_at < term + delay_s < o.done_at]
    facts |= {
        "sent_during_delay": verdicts(in_delay),
        "in_flight_when_listener_closed": verdicts(inflight),
        "refused_after": sum(o.why == "connection refused" for o in load.sent_between(term)),
    }
    checks = {
        "readyz_503_draining_first": facts["readyz_after_sigterm"] == DRAINING,
        "served_during_delay": all(o.verdict == "succeeded" for o in in_delay) and len(in_delay) > 0,
        "in_flight_finished": all(o.verdict == "succeeded" for o in inflight) and len(inflight) > 0,
        # uvicorn raises the signal it stopped on again once it is done: -15 is its clean exit after SIGTERM
        "exited_cleanly_within_grace": facts["exit_code"] in (0, -signal.SIGTERM)
        and facts["exited_after_s"] <= delay_s + grace_s,
        "new_connections_refused": facts["refused_after"] > 0,
    }
    return load.outcomes, facts, checks


CASES = {
    "worker_killed": worker_killed,
    "worker_hung": worker_hung,
    "redis_restarted": redis_restarted,
    "policy_broken": policy_broken,
    "edge_killed": edge_killed,
    "gateway_sigterm": gateway_sigterm,
}


# -- the run -------------------------------------------------------------------------------------


def run_case(name: str, rig: Rig, t: Timing) -> dict:
    started = time.perf_counter()
    try:
        outcomes, facts, checks = asyncio.run(CASES[name](rig, t))
    except Exception as exc:  # noqa: BLE001 - one case's crash is reported, the others still run
        console.print_exception()
        return {"sent": 0, "succeeded": 0, "failed_clear": 0, "lost": 0, "error": f"{type(exc).__name__}: {exc}",
                "checks": {"ran": False}, "checks_failed": ["ran"]}  # fmt: skip
    failed_why = Counter(_short(o.why) for o in outcomes if o.verdict == "failed_clear")
    lost_why = Counter(_short(o.why) for o in outcomes if o.verdict == "lost")
    return {
        "sent": len(outcomes),
        **verdicts(outcomes),
        "failed_why": dict(failed_why.most_common(4)),
        "lost_why": dict(lost_why.most_common(4)),
        "lost_examples": [_example(o) for o in outcomes if o.verdict == "lost"][:5],
        **facts,
        "checks": checks,
        "checks_failed": [c for c, ok in checks.items() if not ok],
        "seconds": round(time.perf_counter() - started, 1),
    }


def _example(o: Outcome) -> dict:
    kind = ("private " if o.spec.private else "") + ("stream" if o.spec.stream else "whole")
    return {"kind": kind, "sent_at": round(o.sent_at, 3), "done_at": round(o.done_at, 3), "backend": o.backend,
            "why": o.why}  # fmt: skip


def _short(why: str) -> str:
    """An error message without its request-specific parts (ports), so that alike failures count together."""
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:*", why)[:160]


def cpu_model() -> str:
    name, flags = cpu_info()
    return f"{name} ({os.cpu_count()} cores; {', '.join(flags) or 'no AVX2'})"


def print_table(results: dict) -> None:
    print(f"{'case':18s} {'sent':>6s} {'succeeded':>10s} {'failed_clear':>13s} {'lost':>5s} {'s':>6s}  checks not met")
    for name, r in results.items():
        failed = ", ".join(r["checks_failed"]) or "-"
        print(f"{name:18s} {r['sent']:6d} {r['succeeded']:10d} {r['failed_clear']:13d} {r['lost']:5d} "
              f"{r.get('seconds', 0):6.1f}  {failed}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter faults and load windows (under ~4 min)")
    parser.add_argument("--only", nargs="*", choices=list(CASES), help="run only these cases")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs even when all went well")
    args = parser.parse_args()
    started = time.perf_counter()
    timing = QUICK if args.quick else FULL
    work = Path(tempfile.mkdtemp(prefix="tandem-faults-"))
    console.log(f"logs: {work / 'logs'}")
    model = cached_demo_checkpoint(CACHE / MODEL_ID)
    with console.status("starting redis, two cloud workers, an edge agent and a gateway…"):
        rig = start_rig(model, work)
    results = {}
    try:
        for name in args.only or CASES:
            console.log(f"[bold]{name}[/bold]")
            results[name] = run_case(name, rig, timing)
            r = results[name]
            console.log(f"  {r['sent']} sent, {r['succeeded']} ok, {r['failed_clear']} failed clear, {r['lost']} lost")
    finally:
        rig.stop()
    lost_total = sum(r["lost"] for r in results.values())
    clean = lost_total == 0 and not any(r["checks_failed"] for r in results.values())
    if clean and not args.keep_logs:
        shutil.rmtree(work, ignore_errors=True)
    print_table(results)
    summary = {"cases": results, "lost_total": lost_total, "goal_met": lost_total == 0,
               "checks_failed": {n: r["checks_failed"] for n, r in results.items() if r["checks_failed"]},
               "quick": args.quick, "logs": None if not work.exists() else str(work / "logs"),
               "cpu": cpu_model(), "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
