"""Explain (why a request goes where it goes) and replay (a policy over recorded traffic)."""

import json
from pathlib import Path

import pytest

from gateway.classify.classify import classify
from gateway.policy.explain import explain
from gateway.policy.loader import load_policy, parse_policy
from gateway.policy.replay import TraceError, differences, read_trace, replay
from gateway.routing.candidate import Candidate

POLICIES = Path(__file__).parents[4] / "policies"
DEFAULT = load_policy(POLICIES / "default.yaml")


def candidates(healthy=True, edge_reports="edge"):
    return {
        name: [Candidate(url, healthy, edge_reports if pool.kind == "edge" else pool.kind) for url in pool.endpoints]
        for name, pool in DEFAULT.pools.items()
    }


CASES = [
    # (name, classify kwargs, candidates, rules tried, pick pool)
    ("detected e-mail", dict(text="mail ann@example.com"), candidates(), ["private"], "edge"),
    ("detected SSN", dict(text="my SSN is 123-45-6789"), candidates(), ["private"], "edge"),
    ("detected SSN after a label", dict(text="Social Security No.: 123456789"), candidates(), ["private"], "edge"),
    ("detected SSN over two messages", dict(text="My SSN is 123-45-\n6789"), candidates(), ["private"], "edge"),
    (
        "detected written-out e-mail",
        dict(text="lee [at] cs [dot] stanford [dot] edu"),
        candidates(),
        ["private"],
        "edge",
    ),
    (
        "short on an NPU",
        dict(text="hi", device_header='{"npu": true}'),
        candidates(),
        ["private", "short-on-capable-device"],
        "edge",
    ),
    (
        "long on an NPU",
        dict(text="hi", prompt_tokens=900, device_header='{"npu": true}'),
        candidates(),
        ["private", "short-on-capable-device", "default"],
        "cloud",
    ),
    (
        "edge down: fallback",
        dict(text="hi", device_header='{"npu": true}'),
        {n: [Candidate(u, n == "cloud", p.kind) for u in p.endpoints] for n, p in DEFAULT.pools.items()},
        ["private", "short-on-capable-device"],
        "cloud",
    ),
    (
        "private, edge backend says it is cloud",
        dict(text="x", privacy_header="pii"),
        candidates(edge_reports="cloud"),
        ["private"],
        None,
    ),
]


@pytest.mark.parametrize("name, kwargs, cands, tried, pick", CASES, ids=[c[0] for c in CASES])
def test_explain(name, kwargs, cands, tried, pick):
    features = classify(DEFAULT, **({"prompt_tokens": 10, "max_tokens": 16} | kwargs))
    out = explain(DEFAULT, features, cands)
    assert [r["rule"] for r in out["rules"]] == tried
    assert [r["matched"] for r in out["rules"]] == [False] * (len(tried) - 1) + [True]
    assert all(r["reasons"] for r in out["rules"][:-1])  # every miss says why
    assert (out["pick"] or {}).get("pool") == pick
    json.dumps(out)  # the endpoint returns it as JSON


def test_explain_says_why_a_candidate_was_dropped():
    features = classify(DEFAULT, text="x", prompt_tokens=10, max_tokens=16, privacy_header="pii")
    out = explain(DEFAULT, features, candidates(edge_reports="cloud"))
    assert out["candidates"][0]["filtered_out_by"] == "privacy: backend reports kind=cloud"
    assert "only edge backends" in out["error"]
    assert explain(DEFAULT, features, candidates())["features"]["privacy_tags"] == ["pii"]


def write_trace(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps({"features": r, "rule": None}) + "\n" for r in records))
    return path


def feature(prompt_tokens, tags=(), device=None):
    return {"prompt_tokens": prompt_tokens, "max_tokens": 64, "privacy_tags": list(tags), "device": device,
            "tenant": "default", "priority": 0, "detected": []}  # fmt: skip


def test_replay_shares_and_differences(tmp_path):
    npu = {"npu": True, "ram_gb": 8, "battery": None, "network": None}
    trace = write_trace(
        tmp_path / "trace.jsonl",
        [feature(10, ["pii"]), feature(100, device=npu), feature(100), feature(1000), feature(2000)],
    )
    features = read_trace(trace)
    default, default_outcomes = replay(DEFAULT, features)
    cost, cost_outcomes = replay(load_policy(POLICIES / "cost-first.yaml"), features)
    assert default.as_dict()["pool_share"] == {"cloud": 0.6, "edge": 0.4}
    assert cost.as_dict()["pool_share"] == {"edge": 0.8, "cloud": 0.2}
    assert default.by_rule["private"] == cost.by_rule["private"] == 1
    diff = differences(default_outcomes, cost_outcomes)
    assert diff["requests_changing_pool"] == 2  # the short and the 1000-token public requests move to the edge
    assert diff["pool_moves"] == [{"from": "cloud", "to": "edge", "requests": 2}]


def test_replay_shows_requests_a_policy_would_refuse_for_a_tag_it_no_longer_knows(tmp_path):
    """An edit that drops the only rule naming `internal` turns those requests into 400s: replay says so first."""
    text = (POLICIES / "default.yaml").read_text()
    knows = text.replace("[private, pii, confidential]}", "[private, pii, confidential, internal]}")
    assert knows != text
    trace = read_trace(
        write_trace(tmp_path / "trace.jsonl", [feature(10, ["internal"]), feature(10), feature(9, ["pii"])])
    )
    before, before_outcomes = replay(parse_policy(knows, "before"), trace)
    after, after_outcomes = replay(DEFAULT, trace)
    assert before.as_dict()["unknown_privacy_tags"] == {} and before.by_pool["edge"] == 2
    assert after.as_dict()["unknown_privacy_tags"] == {"internal": 1} and after.by_pool == {
        "refused": 1,
        "cloud": 1,
        "edge": 1,
    }
    assert differences(before_outcomes, after_outcomes)["pool_moves"] == [
        {"from": "edge", "to": "refused", "requests": 1}
    ]


def test_a_bad_trace_line_is_named(tmp_path):
    path = tmp_path / "trace.jsonl"
    for bad in ("not json", json.dumps({"features": feature(5, tags=[1, "a"])})):
        path.write_text(json.dumps({"features": feature(5)}) + "\n" + bad + "\n")
        with pytest.raises(TraceError, match=r"trace.jsonl:2: not a decision record"):
            read_trace(path)


def test_replay_reads_an_older_gateways_tags_as_the_gateway_reads_them_now(tmp_path):
    trace = read_trace(write_trace(tmp_path / "trace.jsonl", [feature(10, ["ｐｒｉｖａｔｅ"])]))
    report, _ = replay(DEFAULT, trace)
    assert report.by_pool == {"edge": 1} and report.as_dict()["unknown_privacy_tags"] == {}
