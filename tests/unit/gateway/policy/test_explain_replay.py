"""Explain (why a request goes where it goes) and replay (a policy over recorded traffic)."""

import json
import re
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
    features = read_trace(trace).features
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
    ).features
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
    trace = read_trace(write_trace(tmp_path / "trace.jsonl", [feature(10, ["ｐｒｉｖａｔｅ"])])).features
    report, _ = replay(DEFAULT, trace)
    assert report.by_pool == {"edge": 1} and report.as_dict()["unknown_privacy_tags"] == {}


def recorded(tmp_path, **kwargs) -> list:
    """Requests classified by DEFAULT and written by the gateway's own decision log, read back."""
    from gateway.decision_log import DecisionLog

    log = DecisionLog(tmp_path / "decisions.jsonl")
    for i, kw in enumerate(kwargs.values()):
        log.record(f"r{i}", classify(DEFAULT, prompt_tokens=10, max_tokens=16, **kw), "x", "edge", None, "ok")
    log.close()
    return read_trace(tmp_path / "decisions.jsonl").features


def test_replay_tags_each_request_as_the_replayed_policy_would(tmp_path):
    """The tags recorded held the recording policy's detection: an e-mail replayed against a policy without the
    e-mail detector said edge, where that policy sends it to the cloud (the unsafe direction), and against one whose
    detected_tag is `sensitive` said refused for a tag `pii` it does not know (a review). Replay now tags as
    `explain` and the gateway do."""
    from gateway.policy.route_plan import plan_route

    trace = recorded(tmp_path, mail=dict(text="mail ann@example.com"), tagged=dict(text="hi", privacy_header="pii"))
    text = (POLICIES / "default.yaml").read_text()
    phone_only = parse_policy(text.replace("detectors: [", "detectors: [phone] #"), "phone-only")
    assert list(phone_only.privacy.detectors) == ["phone"]
    report, outcomes = replay(phone_only, trace)
    live = plan_route(
        phone_only, classify(phone_only, text="mail ann@example.com", prompt_tokens=10, max_tokens=16), {}
    )
    assert outcomes[0].pool == live.decision.pools[0] == "cloud"
    assert outcomes[1].pool == "edge"  # the caller's own tag, whatever the detectors
    assert "tagged_as_recorded" not in report.as_dict()
    sensitive = parse_policy(
        text.replace("detected_tag: pii", "detected_tag: sensitive").replace(
            "[private, pii, confidential]", "[sensitive, private, pii, confidential]"
        ),
        "sensitive",
    )
    _, outcomes = replay(sensitive, trace)
    assert [o.pool for o in outcomes] == ["edge", "edge"] and outcomes[0].unknown_tags == ()


def test_an_older_records_tags_are_replayed_as_recorded_and_counted(tmp_path):
    old = feature(10, ["pii"]) | {"detected": ["email"]}  # no `tagged`: the tags as the recording policy gave them
    trace = read_trace(write_trace(tmp_path / "trace.jsonl", [old, feature(5)])).features
    report, outcomes = replay(DEFAULT, trace)
    assert outcomes[0].pool == "edge" and report.as_dict()["tagged_as_recorded"] == 1


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("prompt_tokens", 1e400, "prompt_tokens is a whole number from 0"),
        ("prompt_tokens", 1.9, "prompt_tokens is a whole number from 0, not 1.9"),
        ("max_tokens", True, "max_tokens is a whole number from 0, not true"),
        ("prompt_tokens", -5, "not -5"),
        ("detected", "email", "detected is a list of names"),
        ("device", {"battery": "low"}, "device: battery must be a number"),
        ("device", {"battery": 7}, "battery"),
        ("tenant", 5, "tenant is text"),
    ],
)
def test_a_records_field_of_the_wrong_type_is_named_not_read_otherwise(tmp_path, field, value, said):
    """1e400 was a traceback (OverflowError), `"battery": "low"` one at the first rule on battery; 1.9 read as 1,
    true as 1, -5 as -5, and "email" as five detectors named by a letter (a review)."""
    path = tmp_path / "trace.jsonl"
    path.write_text(
        json.dumps({"features": feature(5)}) + "\n" + json.dumps({"features": feature(5) | {field: value}}) + "\n"
    )
    with pytest.raises(TraceError, match=rf"trace.jsonl:2: not a decision record \(.*{re.escape(said)}"):
        read_trace(path)


def test_a_record_cut_short_by_a_crash_is_left_out_and_counted_and_the_next_start_ends_its_line(tmp_path):
    """A crash mid-write left a line without its end; the restarted gateway wrote its next record on it, and replay
    refused the whole log there for good (a review). The gateway ends such a line as it starts, and replay leaves a
    record cut short out, counting it; a line that is no record at all is still named."""
    from gateway.decision_log import DecisionLog

    path = tmp_path / "decisions.jsonl"
    whole = json.dumps({"features": feature(5)}) + "\n"
    path.write_text(whole + whole[: len(whole) // 2])  # the crash
    log = DecisionLog(path)  # the next start
    log.record("r", classify(DEFAULT, text="hi", prompt_tokens=7, max_tokens=16), "default", "cloud", None, "ok")
    log.close()
    path.write_text(path.read_text() + whole[:-20])  # and the last line cut short too
    read = read_trace(path)
    assert [f.prompt_tokens for f in read.features] == [5, 7] and read.torn == 2
    path.write_text(whole + "not json\n" + whole)
    with pytest.raises(TraceError, match="trace|decisions.jsonl:2: not a decision record"):
        read_trace(path)


def test_a_record_cut_at_any_byte_is_left_out(tmp_path):
    """(a review) Cut inside a string, where JSON's error points at the string's start, 244 of 327 cuts of a real
    record refused the whole log."""
    from gateway.decision_log import DecisionLog

    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    log.record("chatcmpl-1f2e", classify(DEFAULT, text="hi", prompt_tokens=7, max_tokens=16), "default", "cloud",
               "grpc://10.0.0.5:50051", "routed", "req-0123456789abcdef")  # fmt: skip
    log.close()
    whole = path.read_text()
    for cut in range(1, len(whole) - 1):
        path.write_text(whole + whole[:cut])
        read = read_trace(path)
        assert [f.prompt_tokens for f in read.features] == [7] and read.torn == 1, cut
    path.write_text(whole + "\0" * 300 + "\n" + whole)  # a crash's unwritten end, then the next start's records
    assert [f.prompt_tokens for f in read_trace(path).features] == [7, 7] and read_trace(path).torn == 1
    path.write_text(whole + whole.rstrip() + ",\n")  # a whole record and more: no record cut short, named
    with pytest.raises(TraceError, match="decisions.jsonl:2: not a decision record"):
        read_trace(path)
