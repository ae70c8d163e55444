"""`--tp N`: the worker starts ranks 1..N-1 itself and drives them from rank 0.

Rank 0 runs the scheduler and the gRPC server; every step it broadcasts the
step's inputs, and all ranks run the same forward (the collectives inside the
parallel layers keep them in lockstep). Ranks talk over gloo on CPU and NCCL
on CUDA. Closing sends a stop message, then tears the group down.
"""

import datetime
import multiprocessing
import socket
from pathlib import Path

import torch
import torch.distributed as dist

from cloud_worker.engine.config import EngineConfig

COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank: int, world: int, init_method: str, config: EngineConfig) -> None:
    backend = "nccl" if config.device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT)


class TensorParallelPeers:
    """Rank 0's handle on ranks 1..N-1."""

    def __init__(self, model_dir: Path, config: EngineConfig, num_blocks: int, prepare_model) -> None:
        """`prepare_model(model_dir, config, rank)`: cloud_worker/build.py's, handed down (this package imports
        nothing above it)."""
        world = config.tensor_parallel_size
        init_method = f"tcp://127.0.0.1:{_free_port()}"
        context = multiprocessing.get_context("spawn")
        self._processes = [
            context.Process(
                target=_rank_main,
                args=(rank, world, init_method, Path(model_dir), config, num_blocks, prepare_model),
                name=f"tandem-tp-rank-{rank}",
                daemon=True,
            )
            for rank in range(1, world)
        ]
        for process in self._processes:
            process.start()
        _init(0, world, init_method, config)

    def send(self, inputs) -> None:
        dist.broadcast_object_list([inputs], src=0)

    def close(self) -> None:
        self.send(None)
        for process in self._processes:
            process.join(timeout=30)
        dist.destroy_process_group()


def _rank_main(
    rank: int, world: int, init_method: str, model_dir: Path, config: EngineConfig, num_blocks: int, prepare_model
) -> None:
    from cloud_worker.engine.model_runner import ModelRunner

    torch.set_num_threads(max(1, torch.get_num_threads() // world))
    _init(rank, world, init_method, config)
    model = prepare_model(model_dir, config, rank)
    runner = ModelRunner(model, num_blocks, config.block_size_tokens)
    while True:
        message = [None]
        dist.broadcast_object_list(message, src=0)
        if message[0] is None:
            break
        inputs, extra_indices = message[0]
        runner.forward(inputs, extra_indices)  # the same rows as rank 0: the vocab-parallel head gathers them
    dist.destroy_process_group()
