"""The local stack: one worker per endpoint in the policy's pools, then the gateway.

Workers listen where the policy says (so the policy file is the one place
worker ports are set). `start_local_stack` is what `tandem up`, the
integration tests and the benches use; `run_stack` is `tandem up` itself:
it builds the demo model on first run, prints what to paste, and stops
every child on Ctrl-C or SIGTERM.
"""

import fcntl
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx
import yaml
from rich.console import Console

from gateway.policy.loader import PolicyError, load_policy
from gateway.policy.schema import is_loopback
from serving.atomic_dir import ForeignFolder, proc_stat
from serving.checkpoint import model_id_for
from tandem.demo_model import DemoBuildFailed, demo_is_whole, write_demo_checkpoint_apart
from tandem.parent import STOP_WITH_PARENT

console = Console(soft_wrap=True)  # a line as long as it is: a URL or a path split in two cannot be pasted
READY_TIMEOUT_S = 180.0
_LAUNCHER_SALT_SECRET = secrets.token_hex(16)
STOP_TIMEOUT_S = 10.0


class StackError(RuntimeError):
    """A process of the stack did not start; the message has the end of its log."""


@dataclass
class Child:
    name: str
    pool: str | None  # None for the gateway
    endpoint: str  # grpc://… for a worker, http://… for the gateway
    process: subprocess.Popen
    log_path: Path
    args: list[str] = field(default_factory=list)  # `tandem …` arguments, for a restart
    env: dict[str, str] | None = field(default=None, repr=False)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class LocalStack:
    url: str
    children: list[Child] = field(default_factory=list)
    ops_token: str | None = None  # for /readyz's details when the gateway requires keys

    @property
    def ops_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.ops_token}"} if self.ops_token else {}

    def stop(self, pool: str | None = None) -> None:
        """Stop the workers of one pool, or everything (gateway last) when pool is None."""
        chosen = [c for c in self.children if pool is None or c.pool == pool]
        for child in sorted(chosen, key=lambda c: c.pool is None):
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in chosen:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()

    def kill(self, pool: str) -> None:
        """SIGKILL a pool's workers: a crash, not a shutdown."""
        for child in self.children:
            if child.pool == pool and child.process.poll() is None:
                child.process.kill()
                child.process.wait()

    def wait_ready(self) -> None:
        """Return once every backend is healthy; on failure or Ctrl-C, stop every child first."""
        try:
            wait_ready(self)
        except BaseException:
            self.stop()
            raise

    def first_dead(self) -> Child | None:
        return next((c for c in self.children if c.process.poll() is not None), None)

    def workers(self, pool: str, endpoint: str | None = None) -> list[Child]:
        """A pool's workers, or only the one listening at `endpoint`."""
        return [c for c in self.children if c.pool == pool and endpoint in (None, c.endpoint)]

    def send_signal(self, pool: str, sig: int, endpoint: str | None = None) -> list[Child]:
        """Send `sig` to a pool's running workers (or the one at `endpoint`): SIGSTOP hangs one, SIGCONT resumes it."""
        chosen = [c for c in self.workers(pool, endpoint) if c.process.poll() is None]
        for child in chosen:
            child.process.send_signal(sig)
        return chosen

    def restart(self, pool: str, endpoint: str | None = None) -> list[Child]:
        """Start a pool's workers (or the one at `endpoint`) again with the same arguments and environment.

        One still running is stopped first. The new process appends to the same log and replaces its
        `Child`; this returns at once (poll `/readyz`, or call `wait_ready`, to know it serves).
        """
        fresh = []
        for old in self.workers(pool, endpoint):
            if old.process.poll() is None:
                old.process.terminate()
                try:
                    old.process.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    old.process.kill()
                    old.process.wait()
            new = spawn(old.name, old.pool, old.endpoint, old.args, old.log_path.parent, old.env, log_mode="a")
            self.children[self.children.index(old)] = new
            fresh.append(new)
        return fresh


def _listeners(ports: list[int]) -> dict[int, tuple[int, str]]:
    """Which of this user's processes listen on these TCP ports: port -> (pid, command line, shortened). Linux
    (/proc) only, and best effort: empty where it cannot tell."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            port = int(fields[1].rpartition(":")[2], 16)
            if fields[3] == "0A" and port in ports:  # 0A: LISTEN
                inodes[f"socket:[{fields[9]}]"] = port
    found: dict[int, tuple[int, str]] = {}
    for proc in Path("/proc").iterdir() if inodes else ():
        if not proc.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
        except OSError:  # gone, or another user's
            continue
        for link in links & inodes.keys():
            found[inodes[link]] = _launcher_of(int(proc.name))
    return found


def _launcher_of(pid: int) -> tuple[int, str]:
    """The `tandem up` that started this process, where one did (stopping a worker of it starts the worker again),
    else the process itself; with its command line, shortened."""
    try:
        parent = int(proc_stat(pid)[1])
        if "tandem" in (launcher := _command_line(parent)) and " up" in launcher:
            pid = parent
    except (OSError, ValueError, IndexError):
        pass
    try:
        command = _command_line(pid)
    except OSError:
        command = "?"
    return pid, command if len(command) <= 80 else command[:77] + "..."


def _command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) != 0


def spawn(
    name: str,
    pool: str | None,
    endpoint: str,
    args: list[str],
    log_dir: Path,
    env: dict[str, str],
    log_mode: str = "w",
) -> Child:
    log_path = log_dir / f"{name}.log"
    if log_mode == "w" and log_path.exists() and log_path.stat().st_size:
        # The run before's log (a crash's, maybe) is kept once, as <name>.log.1: a new start wrote over it
        log_path.replace(log_path.with_name(f"{name}.log.1"))
    with open(log_path, log_mode) as log_file:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "tandem.cli", *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env | {STOP_WITH_PARENT: str(os.getpid())},
        )
    return Child(name, pool, endpoint, process, log_path, list(args), env)


def start_local_stack(
    model_dir: Path,
    policy_path: Path,
    state_dir: Path,
    gateway_port: int,
    env: dict[str, str] | None = None,
    local_agent_port: int | None = None,
    more_models: dict[str, Path] | None = None,
) -> LocalStack:
    """Start every worker the policy names (loopback only) and the gateway; return once all are healthy.

    With `local_agent_port`, the first edge agent also serves the SDK's local agent API there. `more_models`
    (id -> checkpoint) are the models besides `model_dir`'s that the policy's `models` names: their pools' workers
    run them, and the gateway tokenizes for them (TANDEM_MODEL_DIRS).
    """
    policy = load_policy(policy_path)
    more_models = more_models or {}
    log_dir = state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = local_env({**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    if more_models:
        env["TANDEM_MODEL_DIRS"] = ",".join(f"{name}={path}" for name, path in more_models.items())
    host = env.get("TANDEM_HOST", "127.0.0.1")
    if env.get("TANDEM_AUTH") == "none" and not is_loopback(host):
        raise StackError(
            f"TANDEM_HOST={host!r} would open a gateway that checks no API keys beyond this host; a local stack "
            "listens on loopback: unset TANDEM_HOST, or give keys (TANDEM_API_KEYS) to open it"
        )
    workers = []
    for pool_name, pool in policy.pools.items():
        checkpoint = more_models.get(policy.model_of(pool_name, ""), model_dir)
        for endpoint in pool.endpoints:
            parsed = urlparse(endpoint)
            if parsed.scheme != "grpc" or not is_loopback(parsed.hostname):
                raise StackError(
                    f"{policy_path}: {endpoint}: a local stack starts a Tandem worker for each endpoint, on this host "
                    "and reached over gRPC (grpc://127.0.0.1:PORT); run `tandem gateway` to route to other servers"
                )
            command = "cloud-worker" if pool.kind == "cloud" else "edge-agent"
            args = [command, "--model", str(checkpoint), "--host", parsed.hostname, "--port", str(parsed.port)]
            if pool.kind == "edge":
                # The ONNX export is cached by the checkpoint's content: stacks may share one cache.
                args += ["--cache-dir", env.get("TANDEM_EDGE_CACHE_DIR") or str(state_dir / "edge")]
                if local_agent_port and not any("--local-http-port" in w[3] for w in workers):
                    args += ["--local-http-port", str(local_agent_port)]
            workers.append((f"{pool_name}-{parsed.port}", pool_name, endpoint, args, parsed.port))
    ports = [gateway_port, *(w[-1] for w in workers), *([local_agent_port] if local_agent_port else [])]
    busy = [p for p in ports if not _port_is_free("127.0.0.1", p)]
    if busy:
        knob = {
            gateway_port: "TANDEM_PORT",
            **({local_agent_port: "TANDEM_LOCAL_AGENT_PORT"} if local_agent_port else {}),
        }
        holders = _listeners(busy)
        by_pid: dict[tuple[int, str], list[int]] = {}
        for port, holder in sorted(holders.items()):
            by_pid.setdefault(holder, []).append(port)
        named = "; ".join(f"pid {pid} ({command}) on {ports}" for (pid, command), ports in by_pid.items())
        stop = f"stop it (kill {' '.join(sorted({str(pid) for pid, _ in holders.values()}))}), or " if holders else ""
        raise StackError(
            f"port(s) {busy} already in use{f' by {named}' if named else ' (another `make up`?)'}; {stop}move "
            + ", ".join(f"{port} with {knob.get(port, f'its endpoint in {policy_path}')}" for port in busy)
        )
    stack = LocalStack(f"http://127.0.0.1:{gateway_port}", ops_token=env.get("TANDEM_OPS_TOKEN"))
    stack.children = [spawn(name, pool, endpoint, args, log_dir, env) for name, pool, endpoint, args, _ in workers]
    gateway_args = ["gateway", "--model", str(model_dir), "--policy", str(policy_path), "--port", str(gateway_port)]
    stack.children.append(spawn("gateway", None, stack.url, gateway_args, log_dir, env))
    stack.wait_ready()
    return stack


def local_env(env: dict[str, str]) -> dict[str, str]:
    """A local stack runs without API keys, said in so many words (TANDEM_AUTH=none), unless keys are given."""
    env.setdefault("TANDEM_CACHE_SALT_SECRET", _LAUNCHER_SALT_SECRET)  # every gateway this process starts shares it
    env.setdefault("TANDEM_DRAIN_DELAY_S", "0")  # no load balancer to tell: stop at once
    if not env.get("TANDEM_API_KEYS") and not env.get("TANDEM_TENANTS_FILE"):
        env.setdefault("TANDEM_AUTH", "none")
        if env["TANDEM_AUTH"] == "none":
            env.pop("TANDEM_OPS_TOKEN", None)  # an open stack shows /metrics to anyone: a token would guard nothing
    elif not env.get("TANDEM_OPS_TOKEN") and env.get("TANDEM_AUTH") != "none":
        # so the launcher can read /readyz's details (not beside auth none, which the gateway refuses with keys: its
        # message named this token, which the user never set, a review)
        env["TANDEM_OPS_TOKEN"] = secrets.token_urlsafe(24)
    return env


def wait_ready(stack: LocalStack) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        dead = stack.first_dead()
        if dead is not None:
            raise StackError(
                f"{dead.name} exited with code {dead.process.returncode}; last lines of {dead.log_path}:\n{dead.tail()}"
            )
        try:
            backends = httpx.get(f"{stack.url}/readyz", headers=stack.ops_headers, timeout=1).json()["backends"]
            if backends and all(b["healthy"] for b in backends.values()):
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise StackError(f"not ready after {READY_TIMEOUT_S:.0f} s; logs are in {stack.children[0].log_path.parent}")


def with_models(policy_path: Path, default_model: str, more_models: dict[str, Path], out_path: Path) -> Path:
    """The policy at policy_path, plus `models`: its pools serve the default model, and each further model gets a
    cloud pool of its own (one worker on a free loopback port) and a rule routing it there, last (a private request
    for it still goes nowhere but an edge pool serving it: none, so it is refused). Written to out_path."""
    raw = yaml.safe_load(policy_path.read_text())
    if raw.get("models"):
        raise StackError(f"{policy_path} already names its models; --model adds models to a policy that does not")
    raw["models"] = {default_model: {"pools": list(raw["pools"])}}
    for name in more_models:
        pool = f"cloud-{name}"
        if pool in raw["pools"]:
            raise StackError(f"--model {name}: {policy_path} already has a pool named {pool!r}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        raw["pools"][pool] = {"kind": "cloud", "endpoints": [f"grpc://127.0.0.1:{port}"]}
        raw["models"][name] = {"pools": [pool]}
        raw["rules"].append({"name": f"model-{name}", "match": {"model": [name]}, "route": pool})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(
        f"# Written by `tandem up --model` from {policy_path}: edit that file, this one is rewritten on each start.\n"
        + yaml.safe_dump(raw, sort_keys=False)
    )
    return out_path


def _own_state_dir(state_dir: Path) -> int:
    """This process's claim on the state folder, made where missing: one `tandem up` a folder at a time (two started
    at once raced for the ports, and the one that lost wrote its gateway's log over the winner's; a new user's
    trial). Returns the lock's descriptor, open for the process's life: the lock is the kernel's, and a `tandem up`
    killed with SIGKILL lets go of it. A folder that takes no files is a StackError (a file there, or a read-only
    folder, was a traceback; a review)."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / "up.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StackError(f"--state-dir {state_dir}: cannot keep the stack's files there ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise StackError(
            f"another `tandem up` (pid {holder or '?'}) runs with the state folder {state_dir}: stop it"
            f"{f' (kill {holder})' if holder.isdigit() else ''}, or give this one a --state-dir of its own"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def run_stack(state_dir: Path, policy_path: Path, model_dirs: list[Path] | None = None) -> int:
    """`tandem up`: returns the process exit code. `model_dirs`: checkpoints served besides the demo model."""
    model_dir = state_dir / "models" / "tandem-demo"
    more_models = {model_id_for(path): path.resolve() for path in model_dirs or []}
    try:
        _own_state_dir(state_dir)  # (its descriptor stays open: the claim lasts while this process does)
        load_policy(policy_path)
        if len(more_models) < len(model_dirs or []):
            raise StackError("--model: two checkpoint directories have the same name (a model's id is its name)")
        for name, path in more_models.items():
            if name == model_dir.name or not (path / "config.json").is_file():
                raise StackError(f"--model {path}: not a checkpoint directory (no config.json), or named like the demo")
            if "," in str(path) or "=" in name:
                raise StackError(f"--model {path}: a path with ',' (or a name with '=') cannot be passed on")
        if more_models:
            policy_path = with_models(policy_path, model_dir.name, more_models, state_dir / "policy-with-models.yaml")
            load_policy(policy_path)
    except (PolicyError, StackError) as exc:
        console.print(f"error: {exc}", markup=False, highlight=False)
        return 1
    # Ctrl-C and SIGTERM both stop the stack; set SIGINT too, since a shell's background job starts with it ignored.
    # Before the demo's build: set after it, an interrupt during the first build of a background `tandem up` was
    # lost, and the whole stack started (a review).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    if not demo_is_whole(model_dir):  # built whole or not at all; a damaged one (a copy cut short) is built again
        again = " again: the one there is damaged" if (model_dir / "config.json").exists() else " (first run only)"
        console.print(f"building the demo model in {model_dir}{again}")
        try:
            write_demo_checkpoint_apart(model_dir)
        except (ForeignFolder, DemoBuildFailed) as exc:
            console.print(f"error: {exc}", markup=False, highlight=False)
            return 1
        except KeyboardInterrupt:  # nothing half-built is kept: the next start builds it again
            console.print("\nstopped while building the demo model; the next start builds it again.")
            return 130
    stack = None
    try:
        with console.status("starting gateway, cloud worker and edge agent…"):
            stack = start_local_stack(
                model_dir,
                policy_path,
                state_dir,
                _port_from_env("TANDEM_PORT", 8000),
                local_agent_port=(local_agent_port := _port_from_env("TANDEM_LOCAL_AGENT_PORT", 50062)),
                more_models=more_models,
            )
        _print_banner(stack.url, state_dir / "logs", policy_path, list(more_models), local_agent_port)
        return _supervise(stack)
    except StackError as exc:
        console.print(f"error: {exc}", markup=False, highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("\nstopping…")
        return 0
    finally:
        if stack is not None:
            stack.stop()
        console.print("stopped.")


RESTARTS_PER_MINUTE = 3
_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d |[A-Z]+: ")  # where one of the gateway's log records begins


class PolicyNews:
    """What the gateway says of the policy file's live edits (reloaded, or rejected and why), read from its log for
    `tandem up` to print: a rejected edit showed only in the log and /readyz (a new user's trial)."""

    def __init__(self, log_path: Path) -> None:
        self._path, self._pending, self._showing = log_path, "", False
        self._offset = log_path.stat().st_size if log_path.exists() else 0

    def read(self) -> list[str]:
        """The lines about the policy logged since the last read."""
        try:
            with open(self._path, "rb") as log:
                log.seek(self._offset)
                data = log.read(1 << 20)
        except OSError:
            return []
        self._offset += len(data)
        complete, _, self._pending = (self._pending + data.decode(errors="replace")).rpartition("\n")
        news = []
        for line in complete.splitlines():
            if "policy reloaded from" in line or "policy change rejected" in line:
                self._showing = True
            elif _LOG_LINE.match(line):
                self._showing = False
            if self._showing:
                news.append(line)
        return news


def _supervise(stack: LocalStack) -> int:
    """Until Ctrl-C: a worker that stops is started again (the gateway routes around it meanwhile, as it would
    around any failed backend); one that stops RESTARTS_PER_MINUTE times within a minute, or the gateway, ends the
    stack. Returns the exit code."""
    restarts: dict[str, list[float]] = {}
    gateway = next((child for child in stack.children if child.pool is None), None)
    news = PolicyNews(gateway.log_path) if gateway is not None else None
    while True:
        for line in news.read() if news is not None else ():
            console.print(f"gateway: {line}", markup=False, highlight=False)
        dead = stack.first_dead()
        if dead is None:
            time.sleep(0.5)
            continue
        console.print(f"[red]{dead.name} stopped (code {dead.process.returncode})[/red]; last lines:")
        console.print(dead.tail(), markup=False, highlight=False)
        now = time.monotonic()
        recent = [t for t in restarts.get(dead.name, []) if now - t < 60] + [now]
        if dead.pool is None or len(recent) > RESTARTS_PER_MINUTE:
            why = "the gateway" if dead.pool is None else f"{dead.name} stopped {len(recent)} times within a minute"
            console.print(f"{why}: stopping the stack (its log: {dead.log_path})", markup=False, highlight=False)
            return 1
        restarts[dead.name] = recent
        console.print(f"restarting {dead.name}; until it is ready, the gateway routes around it", markup=False)
        stack.restart(dead.pool, dead.endpoint)


def _port_from_env(name: str, default: int) -> int:
    """The port a variable names, or `default` where it is unset; set but empty is refused, as the gateway refuses it
    (an unset variable in a deploy script, read as the default, put a second stack on the first one's port)."""
    if name not in os.environ:
        return default
    value = os.environ[name].strip()
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= 65535):
        raise StackError(f"{name}={value!r}: not a port number (1 to 65535)")
    return int(value)


def _print_banner(
    url: str, log_dir: Path, policy_path: Path, more_models: list[str] = (), local_agent_port: int = 50062
) -> None:
    private = {
        "model": "tandem-demo",
        "max_tokens": 16,
        "metadata": {"privacy": "pii"},
        "messages": [{"role": "user", "content": "My card is 4111 1111 1111 1111. Is it safe?"}],
    }
    long_content = "$(printf 'tell me more. %.0s' $(seq 100))"
    long = json.dumps(
        {"model": "tandem-demo", "max_tokens": 16, "messages": [{"role": "user", "content": long_content}]}
    )
    curl = f"curl -si {url}/v1/chat/completions -H 'Content-Type: application/json'"
    console.print(f"\n[bold green]Tandem is up[/bold green] at [bold]{url}[/bold] (OpenAI API under {url}/v1)")
    console.print(f"policy: {policy_path}   logs: {log_dir}/   Ctrl-C stops everything")
    if more_models:
        console.print(f"models: tandem-demo, {', '.join(more_models)} (GET {url}/v1/models)")
    # where the SDK sends private prompts: said where TANDEM_LOCAL_AGENT_PORT moved it (a review)
    moved = "" if local_agent_port == 50062 else " (not the SDK's default: Client(local_agent_url=...) must name it)"
    console.print(f"local agent (the device SDK's private prompts): http://127.0.0.1:{local_agent_port}{moved}")
    if local_env(dict(os.environ)).get("TANDEM_AUTH") == "none":  # what the stack was started with
        console.print(
            "[yellow]auth: none[/yellow] (a local stack: no API keys are checked; it listens on 127.0.0.1 only. "
            "Set TANDEM_API_KEYS to require keys.)"
        )
    else:  # keys are checked: the requests below send one, read from the shell (never printed here)
        curl += ' -H "Authorization: Bearer $TANDEM_KEY"'
        console.print(
            "[yellow]auth: api-key[/yellow] (every request needs one of the keys the stack was started with; "
            "the requests below read it from $TANDEM_KEY: export TANDEM_KEY=<your key> first)"
        )
        if not os.environ.get("TANDEM_OPS_TOKEN"):  # local_env made one for the launcher alone (a new user's trial)
            console.print(
                "/metrics and /readyz's details need an ops token: this run made its own, not shown; start with "
                "TANDEM_OPS_TOKEN=<a token of yours> to read them"
            )
    console.print()
    console.print("A private request (answered on the edge):", style="bold")
    console.print(f"{curl} -d '{json.dumps(private)}'\n", markup=False, highlight=False, soft_wrap=True)
    console.print("A long request from a device with an NPU (answered in the cloud):", style="bold")
    long_shell = long.replace('"', '\\"')
    console.print(
        f'{curl} -H \'X-Tandem-Device: {{"npu": true}}\' -d "{long_shell}"\n',
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print("The X-Tandem-Route response header says where each went and which rule sent it there.")
