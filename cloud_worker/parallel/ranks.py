"""`--tp N`: the worker starts ranks 1..N-1 itself and drives them from rank 0.

Rank 0 runs the scheduler and the gRPC server; every step it broadcasts the
step's inputs, and all ranks run the same forward (the collectives inside the
parallel layers keep them in lockstep). Ranks talk over gloo on CPU and NCCL
on CUDA, all on this host: they meet through a file in a folder of this
worker's own and talk over loopback, so nothing listens on another interface.
Closing sends a stop message, then tears the group down.

A group with a rank gone can run no step again: rank 0 watches its ranks, and
when one exits it says which and how in one line and stops the worker (which
its supervisor starts anew, all ranks together). A rank goes when rank 0 goes,
however rank 0 goes, and leaves Ctrl-C to rank 0.
"""

import contextlib
import datetime
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from cloud_worker.engine.config import EngineConfig
from cloud_worker.parallel.tensor_parallel import TensorParallelError, run_collectives_on
from serving.atomic_dir import FOREIGN_IDLE_S, owner_gone, owner_tag

STEP_TIMEOUT_S = 120.0  # TANDEM_TP_STEP_TIMEOUT_S sets another


def step_timeout() -> datetime.timedelta:
    """The model's own collectives, inside a step: a rank that stalls past it fails the step, and the worker stops.
    ValueError for a setting that is no positive number of seconds (it was a traceback at import, --tp or not)."""
    raw = os.environ.get("TANDEM_TP_STEP_TIMEOUT_S", "")
    try:
        seconds = float(raw) if raw else STEP_TIMEOUT_S
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise ValueError(f"TANDEM_TP_STEP_TIMEOUT_S={raw!r}: seconds, a number above 0")
    return datetime.timedelta(seconds=seconds)


# The wait for the next step: as long as the worker is idle. Under the step timeout, a rank waiting 120 s for a
# step that did not come failed, and the worker stopped after two idle minutes (a review).
IDLE_TIMEOUT = datetime.timedelta(days=365)
log = logging.getLogger(__name__)


def _on_loopback() -> None:
    """The collectives' sockets on loopback, where this host has one named `lo` (Linux): gloo's and NCCL's
    bootstrap listened on the host's address (a review: a worker bound to 127.0.0.1 opened ports to the network)."""
    with contextlib.suppress(OSError):
        if "lo" in (name for _, name in socket.if_nameindex()):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


# How long the ranks wait for each other to start: each imports torch and loads its shard, slower on a busy node.
# Under the step timeout, a worker whose ranks took longer than it to meet failed to start (TANDEM_TP_STEP_TIMEOUT_S
# of 3 s, two ranks on a busy machine: CI), with a traceback. A rank that dies while starting is seen at once.
STARTUP_TIMEOUT = datetime.timedelta(minutes=10)


def _init(rank: int, world: int, init_method: str, config: EngineConfig, timeout: datetime.timedelta):
    """Joins the group; the model's collectives then run on a group under the step timeout (`timeout`); returns
    the group the steps' inputs are sent over (gloo, waiting as long as the worker is idle), every rank making them
    in the same order."""
    backend = "nccl" if config.device.startswith("cuda") else "gloo"
    _on_loopback()
    if backend == "nccl":
        torch.cuda.set_device(config.rank_device(rank))
    startup = max(timeout, STARTUP_TIMEOUT)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, timeout=startup)
    run_collectives_on(dist.new_group(backend=backend, timeout=timeout))
    return dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT)


def _how_it_ended(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


class TensorParallelPeers:
    """Rank 0's handle on ranks 1..N-1."""

    def __init__(self, model_dir: Path, config: EngineConfig, num_blocks: int, prepare_model) -> None:
        """`prepare_model(model_dir, config, rank)`: cloud_worker/build.py's, handed down (this package imports
        nothing above it)."""
        world = config.tensor_parallel_size
        self._timeout = step_timeout()
        # A file store in a folder only this user reads (0700), not a TCP store: torch's bound every interface
        # whatever host it was given, and took any key anyone sent it (a review)
        _remove_stores_left()
        self._store_dir = tempfile.mkdtemp(prefix=f"{STORE_PREFIX}{owner_tag()}-")
        init_method = f"file://{self._store_dir}/store"
        context = multiprocessing.get_context("spawn")
        self._processes = [
            context.Process(
                target=_rank_main,
                args=(rank, world, init_method, Path(model_dir), config, num_blocks, prepare_model, self._timeout),
                name=f"tandem-tp-rank-{rank}",
                daemon=True,
            )
            for rank in range(1, world)
        ]
        for process in self._processes:
            process.start()
        self.broken: str | None = None  # why the group can run no step again
        self._closing, self._started = False, False
        self._sending_since: float | None = None  # when rank 0's send of a step began, while it waits
        threading.Thread(target=self._watch, name="tandem-tp-watch", daemon=True).start()
        try:
            self._steps = _init(0, world, init_method, config, self._timeout)
        except RuntimeError as exc:  # the ranks did not meet: said in one line (it was torch's traceback)
            self._closing = True
            for process in self._processes:
                process.kill()
            self._remove_store()
            raise TensorParallelError(f"the {world} tensor-parallel ranks did not meet: {exc}") from None
        self._started = True

    def _watch(self) -> None:
        """A rank that exits while rank 0 needs it: said in one line, and this worker stops. A rank that failed to
        start left rank 0 waiting 120 s in init_process_group, then a traceback of 120 lines; a rank killed later
        left a worker that said SERVING and failed every request for good (a review)."""
        while not (gone := multiprocessing.connection.wait([p.sentinel for p in self._processes], timeout=1.0)):
            since = self._sending_since
            if since is not None and time.monotonic() - since > self._timeout.total_seconds():
                # A send waits for the rank to take it (gloo), over a group that waits as long as the worker idles: a
                # stalled rank held rank 0 for good, the worker saying it was healthy (a review). Its step fails now.
                self.abandon(f"a tensor-parallel rank took no step for {self._timeout.total_seconds():g} s (stalled?)")
                for process in self._processes:
                    process.kill()
        if self._closing:
            return
        process = next(p for p in self._processes if p.sentinel in gone)
        process.join(5)  # reaped: its exit code, and no zombie left
        self.abandon(f"tensor-parallel rank {process.name.rsplit('-', 1)[1]} exited ({_how_it_ended(process)})")
        if not self._started:  # rank 0 waits in init_process_group for a rank that will not come
            print(f"error: {self.broken} while starting", file=sys.stderr, flush=True)
            self._remove_store()
            os._exit(1)
        log.error("%s: the worker stops", self.broken)
        os.kill(os.getpid(), signal.SIGTERM)  # the worker drains and closes; close() then exits saying why

    def loaded(self) -> None:
        """Wait for every rank to have its shard (over the idle group: as long as they take): a step sent before
        that waited on a rank still loading, and the step timeout stopped a worker that was only starting."""
        dist.barrier(group=self._steps)

    def abandon(self, why: str) -> None:
        """The group can run no step again (a rank gone, a collective that failed): closing stops every rank."""
        self.broken = self.broken or why

    def send(self, inputs) -> None:
        self._sending_since = time.monotonic()
        try:
            dist.broadcast_object_list([inputs], src=0, group=self._steps)
        finally:
            self._sending_since = None

    def close(self) -> None:
        self._closing = True
        try:
            if self.broken:  # nothing to say to a group with a rank gone: a broadcast waits or fails
                for process in self._processes:
                    process.kill()
                    process.join(5)
                raise SystemExit(f"error: {self.broken}")
            self.send(None)
            for process in self._processes:
                process.join(timeout=30)
            dist.destroy_process_group()
        finally:
            self._remove_store()

    def _remove_store(self) -> None:
        shutil.rmtree(self._store_dir, ignore_errors=True)


STORE_PREFIX = "tandem-tp-"


def _remove_stores_left() -> None:
    """The rendezvous folders of workers that were killed (no close() to remove them): one a crash (a review)."""
    root = Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for folder in root.glob(f"{STORE_PREFIX}*"):
            tag = folder.name.removeprefix(STORE_PREFIX).rpartition("-")[0]  # PID-START-nNAMESPACE, then mkdtemp's
            stat = folder.lstat()
            mine = stat.st_uid == os.getuid() and folder.is_dir() and not folder.is_symlink()
            if not re.fullmatch(r"\d+(-\d+)?(-n\d+)?", tag):  # an earlier version's name: by its age alone
                gone = time.time() - stat.st_mtime > FOREIGN_IDLE_S
            else:
                gone = owner_gone(tag, folder)
            if mine and gone:
                shutil.rmtree(folder, ignore_errors=True)


def _die_with_rank_0() -> None:
    """Linux: this rank is killed when rank 0 goes, however it goes (SIGKILL, an OOM kill): a rank left behind sat
    in the store's retries for minutes, holding its GPU (a review)."""
    parent = multiprocessing.parent_process()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if parent is not None and os.getppid() != parent.pid:  # rank 0 went before the line above
        os._exit(1)


def _rank_main(
    rank: int,
    world: int,
    init_method: str,
    model_dir: Path,
    config: EngineConfig,
    num_blocks: int,
    prepare_model,
    timeout: datetime.timedelta,
) -> None:
    from cloud_worker.engine.model_runner import ModelRunner

    # Ctrl-C, and a stop sent to the whole process group (systemd's), reach every rank: rank 0 alone stops the
    # group, drained, and the others go with it (a rank's SIGTERM read as a crash; a review)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    _die_with_rank_0()
    torch.set_num_threads(max(1, torch.get_num_threads() // world))
    steps = _init(rank, world, init_method, config, timeout)
    model = prepare_model(model_dir, config, rank)
    runner = ModelRunner(model, num_blocks, config.block_size_tokens)
    dist.barrier(group=steps)  # loaded: rank 0 waits for this (TensorParallelPeers.loaded) before its first step
    while True:
        message = [None]
        dist.broadcast_object_list(message, src=0, group=steps)
        if message[0] is None:
            break
        inputs, extra_indices = message[0]
        runner.forward(inputs, extra_indices)  # the same rows as rank 0: the vocab-parallel head gathers them
    dist.destroy_process_group()
