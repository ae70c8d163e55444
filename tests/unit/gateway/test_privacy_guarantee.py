"""The privacy guarantee, end to end inside the gateway, as a property.

Hypothesis generates policies (checked ones, and unchecked ones that skip the
load-time check, to test the layers below it), requests with tags, pools
whose backends fail or lie about their kind, and asserts at the backend
client, the last point before the wire, that no request tagged
never-leave-device ever reaches a backend that is not an edge backend.
"""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.classify.features import RequestFeatures
from gateway.dispatch import dispatch
from gateway.policy.schema import IntRange, Match, ModelSpec, Policy, Pool, Privacy, Profile, Rule
from gateway.privacy import PrivacyViolation
from proto.gen import worker_pb2
from serving.openai.errors import NoBackend
from tests.scripted_backend import FAIL, registry_for, scripted

TAGS = ["private", "pii", "confidential", "public", "marketing"]
POOL_NAMES = ["p0", "p1", "p2", "p3"]
MODELS = ["m0", "m1"]


@st.composite
def scenarios(draw):
    kinds = {name: draw(st.sampled_from(["edge", "cloud"])) for name in POOL_NAMES}
    endpoints = {name: [f"grpc://{name}-{i}:1" for i in range(draw(st.integers(1, 2)))] for name in POOL_NAMES}
    rules = []
    for i in range(draw(st.integers(0, 3))):
        privacy = draw(st.none() | st.lists(st.sampled_from(TAGS), min_size=1, max_size=3))
        max_tokens = draw(st.none() | st.integers(0, 4096))
        rules.append(
            (
                f"r{i}",
                privacy,
                max_tokens,
                draw(st.sampled_from(POOL_NAMES)),
                draw(st.lists(st.sampled_from(POOL_NAMES), max_size=3)),
            )
        )
    rules.append(
        (
            "catch-all",
            None,
            None,
            draw(st.sampled_from(POOL_NAMES)),
            draw(st.lists(st.sampled_from(POOL_NAMES), max_size=3)),
        )
    )
    all_endpoints = [e for es in endpoints.values() for e in es]
    failing = set(draw(st.lists(st.sampled_from(all_endpoints), max_size=len(all_endpoints))))
    # Mostly honest backends; sometimes one in an edge pool reports kind=cloud (a mislabelled pool).
    liars = set(draw(st.lists(st.sampled_from(all_endpoints), max_size=2)))
    reported = {e: ("cloud" if e in liars else kind) for name, kind in kinds.items() for e in endpoints[name]}
    never = sorted({"private", *draw(st.lists(st.sampled_from(TAGS), max_size=3))})  # one without it does not load
    tags = frozenset(draw(st.lists(st.sampled_from(TAGS), max_size=3)))
    # Sometimes two models, each pool serving one of them; the request names one.
    owners = draw(st.none() | st.lists(st.sampled_from(MODELS), min_size=len(POOL_NAMES), max_size=len(POOL_NAMES)))
    models = {m: [p for p, o in zip(POOL_NAMES, owners, strict=True) if o == m] for m in MODELS} if owners else {}
    model = draw(st.sampled_from(MODELS)) if models else ""
    return kinds, endpoints, rules, never, failing, reported, (tags, models, model)


def raw_policy(kinds, endpoints, rules, never, models) -> dict:
    def match(privacy, max_tokens):
        return {
            k: v
            for k, v in {
                "privacy": privacy,
                "prompt_tokens": {"max": max_tokens} if max_tokens is not None else None,
            }.items()
            if v is not None
        }

    return {
        "version": 1,
        "privacy": {"never_leave_device": never},
        "pools": {n: {"kind": kinds[n], "endpoints": endpoints[n]} for n in POOL_NAMES},
        "rules": [{"name": n, "match": match(p, m), "route": r, "fallback": f} for n, p, m, r, f in rules],
        "models": {m: {"pools": pools} for m, pools in models.items()},
    }


def unchecked_policy(kinds, endpoints, rules, never, models) -> Policy:
    """Bypasses every validator, as if the load-time privacy check had a bug."""
    return Policy.model_construct(
        version=1,
        models={m: ModelSpec.model_construct(pools=pools, owned_by="t") for m, pools in models.items()},
        privacy=Privacy.model_construct(never_leave_device=never, detectors=[], detected_tag="pii"),
        pools={n: Pool.model_construct(kind=kinds[n], endpoints=endpoints[n], profile=Profile()) for n in POOL_NAMES},
        rules=[
            Rule.model_construct(
                name=n,
                match=Match.model_construct(privacy=p, prompt_tokens=None if m is None else IntRange(max=m)),
                route=r,
                fallback=f,
            )
            for n, p, m, r, f in rules
        ],
    )


def run(policy: Policy, failing, reported, tags, prompt_tokens=100, model=""):
    factory = scripted({e: FAIL for e in failing}, reported)

    async def go():
        registry = registry_for(policy, factory)
        features = RequestFeatures(prompt_tokens, 16, tags, None, "t", model=model)
        request = worker_pb2.GenerateRequest(request_id="r", prompt_token_ids=[1, 2, 3])
        try:
            routed = await dispatch(policy, registry, features, request, timeout_s=1.0)
            await routed.aclose()
            outcome = routed.pool
        except NoBackend:
            outcome = None
        await registry.close()
        return outcome

    return asyncio.run(go()), factory.wire_log


def assert_private_stays_on_edge(policy, tags, wire_log, outcome, model=""):
    private = bool(tags & set(policy.privacy.never_leave_device))
    serving = policy.pools_serving(model)
    assert outcome is None or serving is None or outcome in serving, f"{model!r} was served by pool {outcome!r}"
    for endpoint, pool_kind, reported_kind, sent_private in wire_log:
        assert sent_private == private
        if private:
            assert (pool_kind, reported_kind) == ("edge", "edge"), f"private request reached {endpoint}"
    if private and outcome is not None:
        assert policy.pools[outcome].kind == "edge"


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_no_tagged_request_reaches_a_cloud_backend_with_checked_policies(scenario):
    kinds, endpoints, rules, never, failing, reported, (tags, models, model) = scenario
    try:
        policy = Policy.model_validate(raw_policy(kinds, endpoints, rules, never, models))
    except ValidationError:
        return  # refused at load: it never serves anyone
    outcome, wire_log = run(policy, failing, reported, tags, model=model)
    assert_private_stays_on_edge(policy, tags, wire_log, outcome, model)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_no_tagged_request_reaches_a_cloud_backend_even_if_the_load_check_were_bypassed(scenario):
    kinds, endpoints, rules, never, failing, reported, (tags, models, model) = scenario
    policy = unchecked_policy(kinds, endpoints, rules, never, models)
    outcome, wire_log = run(policy, failing, reported, tags, model=model)
    assert_private_stays_on_edge(policy, tags, wire_log, outcome, model)


def test_the_backend_client_itself_refuses_a_private_request_for_a_cloud_backend():
    factory = scripted({}, {"grpc://c:1": "cloud"})

    async def go():
        backend = factory("grpc://c:1", "m", "cloud")
        stream = backend.generate(worker_pb2.GenerateRequest(private=True), 1.0)
        with pytest.raises(PrivacyViolation):
            await anext(stream)
        await backend.close()

    asyncio.run(go())
    assert factory.wire_log == []  # nothing reached the wire
