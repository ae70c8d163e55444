"""Explain over HTTP against live backends; the decision log replayed by the CLI."""

import json
import subprocess
import sys

import httpx
import openai
import pytest

from tandem.stack import start_local_stack
from tests.conftest import free_port
from tests.stack import write_policy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def logged_stack(demo_checkpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("decisions")
    policy = write_policy(work / "policy.yaml", free_port(), free_port())
    log = work / "decisions.jsonl"
    stack = start_local_stack(demo_checkpoint, policy, work, free_port(), {"TANDEM_DECISION_LOG": str(log)})
    yield stack, log
    stack.stop()


def test_explain_endpoint_shows_rules_candidates_and_pick(logged_stack):
    stack, _ = logged_stack
    body = {"model": "tandem-demo", "messages": [{"role": "user", "content": "reach me at ann@example.com"}]}
    out = httpx.post(f"{stack.url}/v1/route/explain", json=body).json()
    assert out["features"]["detected"] == ["email"] and "pii" in out["features"]["privacy_tags"]
    assert out["rules"] == [{"rule": "private", "matched": True, "reasons": []}]
    assert out["pick"]["pool"] == "edge" and out["candidates"][0]["kind"] == "edge"
    assert out["candidates"][0]["healthy"] is True and out["candidates"][0]["rank"] == 1
    assert out["policy"]["sha256"]


def test_decision_log_has_no_prompt_text_and_replays(logged_stack, tmp_path):
    stack, log = logged_stack
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    secret = "the launch code is tangerine"
    for content in (secret, "short one", "write to ann@example.com", "tell me more. " * 100):
        client.chat.completions.create(
            model="tandem-demo", messages=[{"role": "user", "content": content}], max_tokens=2, user="u-42",
            extra_headers={"X-Request-Id": f"ops-{len(content)}"},
        )  # fmt: skip
    records = [json.loads(line) for line in log.read_text().splitlines()]
    lines = [r for r in records if r.get("kind") != "usage"]
    assert len(lines) >= 4
    assert "tangerine" not in log.read_text() and "ann@example.com" not in log.read_text()
    record = lines[-1]
    assert record["rule"] == "default" and record["pool"] == "cloud" and record["status"] == "routed"
    assert record["x_request_id"] == f"ops-{len('tell me more. ' * 100)}"  # the id the caller's logs have
    # A usage record per request as it ends: tokens per tenant, and OpenAI's `user` unless the request was private.
    usage = {r["request_id"]: r for r in records if r.get("kind") == "usage"}
    assert usage[record["request_id"]] | {"ts": 0} == {
        "kind": "usage", "ts": 0, "request_id": record["request_id"], "tenant": "default", "user": "u-42",
        "status": "ok", "prompt_tokens": record["features"]["prompt_tokens"], "completion_tokens": 2,
        "cached_tokens": 0,
    }  # fmt: skip
    private = next(r for r in lines if r["rule"] == "private")
    assert usage[private["request_id"]]["user"] is None

    result = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "policy", "replay", str(log), "--policy", "policies/default.yaml",
         "--against", "policies/cost-first.yaml", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    out = json.loads(result.stdout)
    assert out["policy"]["requests"] == len(lines)
    assert out["policy"]["rule_share"]["private"] == pytest.approx(1 / len(lines), abs=1e-3)
    assert out["differences"]["requests_changing_pool"] >= 2  # short public requests move to the edge


def test_each_prompt_of_a_batch_is_a_decision_of_its_own(logged_stack):
    """A batch's prompts are routed apart (a short one from an NPU device stays on the edge, a long one goes to the
    cloud): the log has each, numbered, so a replay sees every prompt, not the first alone."""
    stack, log = logged_stack
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    answer = client.completions.create(
        model="tandem-demo", prompt=["hi there", "tell me more. " * 100], max_tokens=2,
        extra_headers={"X-Tandem-Device": '{"npu": true}'},
    )  # fmt: skip
    records = [json.loads(line) for line in log.read_text().splitlines()]
    mine = [r for r in records if r["request_id"] == answer.id and r.get("kind") != "usage"]
    assert [(r["prompt"], r["pool"], r["rule"]) for r in mine] == [
        (0, "edge", "short-on-capable-device"), (1, "cloud", "default"),
    ]  # fmt: skip
    assert mine[0]["features"]["prompt_tokens"] < 16 < mine[1]["features"]["prompt_tokens"]


def test_the_usage_lines_of_n_choices_add_up_to_the_usage_the_caller_was_told(logged_stack):
    """(a review) n=3 wrote three usage lines each with the whole prompt: a tenant's lines, summed, billed the
    prompt three times where the response counted it once."""
    stack, log = logged_stack
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(
        model="tandem-demo", messages=[{"role": "user", "content": "tell me more. " * 30}], max_tokens=3, n=3,
        temperature=1.0, seed=1,
    )  # fmt: skip
    records = [json.loads(line) for line in log.read_text().splitlines()]
    mine = sorted((r for r in records if r["request_id"] == answer.id and r.get("kind") == "usage"),
                  key=lambda r: r["choice"])  # fmt: skip
    assert [r["choice"] for r in mine] == [0, 1, 2]
    assert sum(r["prompt_tokens"] for r in mine) == answer.usage.prompt_tokens > 0
    assert sum(r["completion_tokens"] for r in mine) == answer.usage.completion_tokens
    assert [r["prompt_tokens"] > 0 for r in mine] == [True, False, False]
