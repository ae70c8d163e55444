"""One owner of the privacy invariant: every path that could let a private request out asks gateway.privacy.

A table names each path (load, classify, dispatch, failover, explain, replay,
the backend client) and the decision it must take from gateway/privacy.py.
Each row runs the real path on a private request, with that decision wrapped
to count its calls, and asserts both that it was asked and that the request
stayed on the edge.
"""

import asyncio
from unittest import mock

import pytest

from gateway import privacy
from gateway.classify.classify import classify
from gateway.classify.features import RequestFeatures
from gateway.dispatch import dispatch
from gateway.policy.explain import explain
from gateway.policy.loader import parse_policy
from gateway.policy.replay import replay
from gateway.routing.candidate import Candidate
from proto.gen import worker_pb2
from serving.openai.errors import NoBackend
from tests.scripted_backend import FAIL, registry_for, scripted

POLICY_TEXT = """
version: 1
pools:
  edge: {kind: edge, endpoints: ["grpc://e1:1", "grpc://e2:1"], plaintext_grpc: true}
  cloud: {kind: cloud, endpoints: ["grpc://c1:1"]}
rules:
  - {name: private, match: {privacy: [private, pii, confidential]}, route: edge, fallback: []}
  - {name: default, route: cloud, fallback: [edge]}
"""
POLICY = parse_policy(POLICY_TEXT, "policy.yaml")
PRIVATE = RequestFeatures(10, 8, frozenset({"pii"}), None, "t")
EDGE_DOWN = {"grpc://e1:1": FAIL, "grpc://e2:1": FAIL}


def run_dispatch(behaviour=None, hints=None):
    factory = scripted(behaviour or {})

    async def go():
        registry = registry_for(POLICY, factory)
        request = worker_pb2.GenerateRequest(request_id="r", prompt_token_ids=[1, 2, 3])
        try:
            routed = await dispatch(POLICY, registry, PRIVATE, request, timeout_s=1.0, hints=hints)
            await routed.aclose()
            return routed.pool
        except NoBackend as exc:
            return exc.message
        finally:
            await registry.close()

    pool = asyncio.run(go())
    return pool, factory.wire_log


def explained():
    candidates = {n: [Candidate(url, True, p.kind) for url in p.endpoints] for n, p in POLICY.pools.items()}
    return explain(POLICY, PRIVATE, candidates)


class NoHashing:
    """Prefix hints that fail the test if a private prompt is hashed or recorded."""

    mode = "approximate"

    def hashes(self, *args):
        raise AssertionError("a private prompt was hashed into prefix hints")

    def record(self, *args):
        raise AssertionError("a private prompt was recorded in prefix hints")


PATHS = [
    # (path, the decision it must ask, run the path -> where the private request went)
    ("load: a rule sending pii to the cloud", "policy_problems",
     lambda: parse_policy(POLICY_TEXT.replace("route: edge, fallback: []", "route: cloud"), "p.yaml")),
    ("classify: detectors on the request text", "detected",
     lambda: classify(POLICY, text="mail ann@example.com", prompt_tokens=3, max_tokens=8).privacy_tags),
    ("classify: tags from body and header", "request_tags",
     lambda: classify(POLICY, text="", prompt_tokens=3, max_tokens=8, privacy_header="PII").privacy_tags),
    ("dispatch: which pools", "allowed_pools", lambda: run_dispatch()[0]),
    ("dispatch: which backends of a pool", "candidate_refusal", lambda: run_dispatch()[0]),
    ("dispatch: the backend client before the wire", "check_before_wire", lambda: run_dispatch()[1]),
    ("dispatch: no prefix hashing", "hints_for", lambda: run_dispatch(hints=NoHashing())[0]),
    ("failover: every edge backend fails", "check_before_wire", lambda: run_dispatch(EDGE_DOWN)[1]),
    ("explain", "allowed_pools", lambda: explained()["decision"]["pools"]),
    ("explain: candidates", "candidate_refusal", lambda: explained()["pick"]),
    ("replay", "is_private", lambda: replay(POLICY, [PRIVATE])[1][0].pool),
]  # fmt: skip


@pytest.mark.parametrize(("path", "decision", "run"), PATHS, ids=[p[0] for p in PATHS])
def test_every_path_asks_the_privacy_module(path, decision, run):
    original = getattr(privacy, decision)
    with mock.patch.object(privacy, decision, wraps=original) as asked:
        try:
            outcome = run()
        except ValueError as exc:  # the load path refuses the policy
            outcome = str(exc)
    assert asked.call_count >= 1, f"{path} did not ask gateway.privacy.{decision}"
    assert "cloud" not in str(outcome) or "names cloud pool" in str(outcome), f"{path}: {outcome}"


def test_a_failover_tries_every_edge_backend_and_never_the_cloud():
    outcome, wire = run_dispatch(EDGE_DOWN)
    assert "private request: only edge pools may serve it" in outcome
    assert sorted((endpoint, sent_private) for endpoint, _, _, sent_private in wire) == [
        ("grpc://e1:1", True),
        ("grpc://e2:1", True),
    ]


@pytest.mark.parametrize(
    ("privacy_yaml", "error"),
    [
        ("privacy: {detected_tag: flagged}", "privacy.detected_tag"),  # detection would tag but not protect
        ("privacy: {never_leave_device: [secret], detected_tag: pii}", "privacy.detected_tag"),
    ],
)
def test_a_detected_tag_outside_never_leave_device_does_not_load(privacy_yaml, error):
    text = POLICY_TEXT.replace("version: 1\n", f"version: 1\n{privacy_yaml}\n")
    with pytest.raises(ValueError, match=rf"p.yaml:3: {error}.*not in privacy.never_leave_device"):
        parse_policy(text, "p.yaml")


def test_a_policy_that_lets_the_private_tag_leave_does_not_load():
    """A review: `never_leave_device: [pii, confidential]` with `known_tags: [private]` loaded, with a note at INFO,
    and requests tagged private (as the SDK and the API docs tell callers to mark them) went to the cloud."""
    dropped = "version: 1\nprivacy: {never_leave_device: [pii, confidential], known_tags: [private]}\n"
    with pytest.raises(
        ValueError, match=r"p.yaml:3: privacy.never_leave_device: \['confidential', 'pii'\] leaves out 'private'"
    ):
        parse_policy(POLICY_TEXT.replace("version: 1\n", dropped), "p.yaml")


def test_detection_is_on_unless_the_policy_writes_detectors_empty():
    assert POLICY.privacy.detectors == ["email", "phone", "credit-card", "cn-id", "iban", "ssn"]
    assert privacy.detection_warning(POLICY) is None
    off = parse_policy(POLICY_TEXT.replace("version: 1\n", "version: 1\nprivacy: {detectors: []}\n"), "p.yaml")
    assert off.privacy.detectors == []
    assert "detection is OFF" in privacy.detection_warning(off)
    no_guarantee = "version: 1\nprivacy: {never_leave_device: [], detectors: []}\n"
    none_kept = parse_policy(POLICY_TEXT.replace("version: 1\n", no_guarantee), "p.yaml")
    assert "PRIVACY GUARANTEE IS OFF" in privacy.detection_warning(none_kept)
