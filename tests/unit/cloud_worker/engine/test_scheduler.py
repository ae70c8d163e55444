"""Scheduler: token budget, chunked prefill, priorities, preemption order, leaving in the same step."""

from cloud_worker.engine.block_manager import BlockManager
from cloud_worker.engine.config import EngineConfig
from cloud_worker.engine.scheduler import Scheduler
from cloud_worker.engine.sequence import Sequence, SequenceStatus
from serving.engine_api import GenerationRequest

B = 4


def seq(name: str, num_tokens: int, priority: int = 0) -> Sequence:
    return Sequence(GenerationRequest(name, tuple(range(1000, 1000 + num_tokens)), priority=priority), "m", B, seed=0)


def run_step(scheduler: Scheduler) -> dict[str, int]:
    """Schedule, pretend the model ran, append a token to every sampling sequence."""
    scheduled = scheduler.schedule()
    scheduler.finish_step(scheduled)
    for item in scheduled:
        if item.is_sampling:
            item.seq.token_ids.append(7)
    return {item.seq.request_id: item.num_new_tokens for item in scheduled}


def test_prompts_are_chunked_to_the_token_budget_and_decodes_go_first():
    s = Scheduler(EngineConfig(max_num_batched_tokens=8), BlockManager(64, B))
    a, b = seq("a", 3), seq("b", 20)
    s.add(a)
    s.add(b)
    assert run_step(s) == {"a": 3, "b": 5}
    assert run_step(s) == {"a": 1, "b": 7}  # a decodes, b's prefill continues in chunks
    assert run_step(s) == {"a": 1, "b": 7}
    assert run_step(s) == {"a": 1, "b": 1}  # b's last chunk, then both decode


def test_higher_priority_is_admitted_first():
    s = Scheduler(EngineConfig(max_num_batched_tokens=4), BlockManager(64, B))
    low, high = seq("low", 4, priority=0), seq("high", 4, priority=5)
    s.add(low)
    s.add(high)
    assert run_step(s) == {"high": 4}


def test_preemption_takes_lowest_priority_then_newest_and_recomputes_it():
    s = Scheduler(EngineConfig(max_num_batched_tokens=64), BlockManager(6, B))
    old, new, vip = seq("old", 4), seq("new", 4), seq("vip", 4, priority=1)
    for x in (old, new, vip):
        s.add(x)
    run_step(s)  # each holds one full block plus needs a second for its next token
    assert [x.request_id for x in s.running] == ["vip", "old", "new"]
    run_step(s)  # 3 sequences need 2 blocks each: all fit in 6
    for _ in range(4):
        run_step(s)  # now each needs a third block: only two sequences fit
    assert new.status is SequenceStatus.WAITING and new.num_preemptions == 1 and new.block_table == []
    assert old.status is vip.status is SequenceStatus.RUNNING
    s.block_manager.check_invariants(s.running)


def test_a_finished_sequence_frees_its_blocks_in_the_same_step():
    bm = BlockManager(8, B)
    s = Scheduler(EngineConfig(), bm)
    a = seq("a", 6)
    s.add(a)
    run_step(s)
    assert bm.num_used_blocks == 2
    s.finish(a)
    assert bm.num_used_blocks == 0 and not s.has_work()
    waiting = seq("w", 4)
    s.add(waiting)
    s.finish(waiting)  # cancelled before it ever ran
    assert not s.has_work()
