import pytest
import torch

from cloud_worker.engine.sampler import SamplingBatch, sample
from serving.engine_api import RequestRejected, SamplingParams
from serving.sampling import request_seed, sample_token


def draws(logits, params, n):
    seed = request_seed(params)
    return [sample_token(logits, params, seed, step) for step in range(n)]


def test_greedy_is_argmax():
    logits = torch.tensor([0.1, 3.0, 2.9, -1.0])
    assert draws(logits, SamplingParams(temperature=0), 5) == [1] * 5


def test_same_seed_same_tokens_other_seed_differs():
    logits = torch.zeros(1000)
    params = SamplingParams(temperature=1.0, seed=7)
    assert draws(logits, params, 50) == draws(logits, params, 50)
    assert draws(logits, params, 50) != draws(logits, SamplingParams(temperature=1.0, seed=8), 50)


def test_top_k_never_leaves_the_k_best():
    logits = torch.arange(50, dtype=torch.float32) / 10
    picks = set(draws(logits, SamplingParams(temperature=2.0, top_k=3, seed=1), 2000))
    assert picks == {47, 48, 49}  # all three seen, nothing else


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    picks = draws(probs.log(), SamplingParams(temperature=1.0, top_p=0.8, seed=3), 4000)
    assert set(picks) == {0, 1}  # 0.5 + 0.3 reaches 0.8; 2 and 3 are cut
    share_of_0 = picks.count(0) / len(picks)
    assert abs(share_of_0 - 0.5 / 0.8) < 0.03  # renormalised within the kept set


def test_a_top_p_too_small_for_float32_keeps_the_most_likely_token():
    # 5e-324 is a valid top_p (> 0) that rounds to 0 in float32; the first token must still stay.
    logits = torch.tensor([0.1, 3.0, 2.9, -1.0])
    assert draws(logits, SamplingParams(temperature=1.0, top_p=5e-324, seed=1), 20) == [1] * 20


@pytest.mark.parametrize(
    "kwargs",
    [{"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -1}, {"max_tokens": -1}],
)
def test_bad_parameters_are_rejected(kwargs):
    with pytest.raises(RequestRejected):
        SamplingParams(**kwargs)


def test_no_tokens_is_the_prompt_alone_and_a_worker_caller_must_say_so():
    """max_tokens 0 is the prompt alone (completions' echo); over gRPC the field must be present, so a caller that
    forgot it (proto3 reads an absent field as 0) is refused, not answered with nothing."""
    from proto.gen import worker_pb2
    from serving.worker_service import request_from_proto

    assert SamplingParams(max_tokens=0).max_tokens == 0
    asked = worker_pb2.GenerateRequest(prompt_token_ids=[1, 2], sampling=worker_pb2.SamplingParams(max_tokens=0))
    assert request_from_proto(asked).sampling.max_tokens == 0
    with pytest.raises(RequestRejected, match="max_tokens is required"):
        request_from_proto(worker_pb2.GenerateRequest(prompt_token_ids=[1, 2]))


@pytest.mark.parametrize(
    "fields",
    [
        {"temperature": 1e-40},  # divides logits into overflow: every probability inf
        {"temperature": 0.009},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"top_p": float("nan")},
        {"min_p": float("nan")},
    ],
)
def test_values_that_would_break_a_sampler_are_refused_as_the_requests_fault(fields):
    with pytest.raises(RequestRejected):
        SamplingParams(**fields)


def test_the_sampler_refuses_probabilities_that_are_not_a_distribution():
    from serving.sampling import SamplingError

    params = SamplingParams(temperature=0.01, seed=1)  # 1e37 / 0.01 overflows: finite logits, no distribution
    for logits in ([0.0, float("nan"), 1.0], [float("-inf")] * 3, [0.0, float("inf")], [0.0, 1e37, 1e37]):
        with pytest.raises(SamplingError, match="not finite"):
            sample_token(torch.tensor(logits), params, 1, 0)


def test_the_edge_draws_what_the_cloud_draws_for_the_same_seed_and_logits():
    """One sampler for both tiers: the serial engine's token for (logits, params, seed, step) is the paged
    engine's for the same row in a batch of others."""
    gen = torch.Generator().manual_seed(0)
    params = [
        SamplingParams(temperature=t, top_k=k, top_p=p, min_p=m, seed=s)
        for s, (t, k, p, m) in enumerate(
            [(1.0, 0, 1.0, 0.0), (0.7, 40, 1.0, 0.0), (1.3, 0, 0.9, 0.0), (0.9, 0, 1.0, 0.05), (1.0, 5, 0.5, 0.1),
             (0.0, 0, 1.0, 0.0)]
        )
    ]  # fmt: skip
    for step in range(20):
        logits = torch.randn(len(params), 512, generator=gen) * 3
        seeds = [p.seed for p in params]
        cloud, _ = sample(logits, SamplingBatch.build(params, seeds, [step] * len(params), "cpu"))
        edge = [sample_token(logits[i], p, p.seed, step) for i, p in enumerate(params)]
        assert edge == cloud.tolist()
