"""The producer step: snapshot a pool's backends as candidates and, when the profile
scores prefix hits, fill in how much of this prompt each one holds.

Scorers stay pure; the one lookup (Redis or the gateway's history) happens here.
"""

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.backends.registry import BackendRegistry, PoolBackends
from gateway.backends.worker_backend import WorkerBackend
from gateway.hints.prefix_hints import PrefixHints
from gateway.routing.candidate import Candidate
from serving import spans

if TYPE_CHECKING:
    from gateway.policy.schema import Policy, Profile

tracer = spans.get_tracer(__name__)  # the SDK's spans at a fraction of their cost (serving/spans.py)


@dataclass(frozen=True)
class PromptKey:
    salt: str  # the tenant's cache salt (an HMAC of its name), never the name itself
    token_ids: Sequence[int]  # the prompt; a lookup reads its first MAX_LOOKUP_BLOCKS blocks


async def gather_candidates(
    pool: PoolBackends, profile: "Profile", prompt: PromptKey | None, hints: PrefixHints | None
) -> tuple[list[Candidate], list[bytes]]:
    """Candidates for the profile, and the prompt's block hashes (empty when hints are not used)."""
    backends = pool.backends
    if hints is None or prompt is None or not profile.uses_prefix_hints or not backends:
        now = time.monotonic()
        return [b.candidate(now) for b in backends], []
    # A healthy backend's (one serving another model, or dead, hashes no prompt of this pool's: a review saw an
    # unhealthy backend's size fail every request of its pool); where sizes differ the registry says so
    block_size = next((size for b in backends if (size := b.block_size_tokens) and b.is_healthy), 0)
    with spans.Stages.stage(tracer, "gateway.hint_lookup") as span:
        hashes = hints.hashes(prompt.salt, prompt.token_ids, block_size)
        matched = await hints.match_workers(hashes, pool.worker_ids)
        flow = hints.flow(hashes)
        span.set_attribute("tandem.prefix_hint_mode", hints.mode)
        span.set_attribute("tandem.prompt_blocks", len(hashes))
        span.set_attribute("tandem.best_match_blocks", max(matched.values(), default=0))
    now = time.monotonic()
    candidates = [b.candidate(now) for b in backends]
    blocks, with_prefix, positions = len(hashes), WorkerBackend.with_prefix, pool.positions
    for worker, held in matched.items():  # the few holding part of the prompt
        for i in positions.get(worker, ()):
            candidates[i] = with_prefix(candidates[i], blocks, held, flow)
    return candidates, hashes


@dataclass
class Gathered:
    """What a request's route is planned on: each pool's candidates, the clients behind them, and the prompt's
    block hashes per pool (empty where the pool does not score prefix hits)."""

    candidates: dict[str, list[Candidate]]
    backends: dict[str, Mapping[str, WorkerBackend]]  # pool -> endpoint -> client
    hashes: dict[str, list[bytes]]
    labels: dict[str, Mapping[str, str]]  # pool -> endpoint -> what callers are shown for it


async def gather_pools(
    registry: BackendRegistry,
    policy: "Policy",
    pools: Iterable[str],
    prompt: PromptKey | None,
    hints: PrefixHints | None,
) -> Gathered:
    """Snapshot the named pools' backends (the I/O before a plan: at most one hint lookup per pool)."""
    out = Gathered({}, {}, {}, {})
    for name in pools:
        pool = registry.pool(policy, name)
        out.backends[name], out.labels[name] = pool.by_endpoint, pool.labels
        out.candidates[name], out.hashes[name] = await gather_candidates(
            pool, policy.pools[name].profile, prompt, hints
        )
    return out
