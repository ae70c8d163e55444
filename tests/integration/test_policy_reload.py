"""Editing the policy file under a running gateway."""

import os
import time

import httpx
import openai
import pytest
import yaml

from tests.stack import start_stack

pytestmark = pytest.mark.integration


@pytest.fixture
def stack(demo_checkpoint, tmp_path):
    s = start_stack(demo_checkpoint, tmp_path)
    yield s, tmp_path / "policy.yaml"
    s.stop()


def route_of(client) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model="tandem-demo", messages=[{"role": "user", "content": "hello"}], max_tokens=2
    )
    return raw.headers["x-tandem-route"]


def write_atomically(path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def serving_sha(url: str) -> str:
    return httpx.get(f"{url}/readyz").json()["policy"]["sha256"]


def reload_errors(url: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith('tandem_gateway_policy_reloads_total{result="error"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_valid_edit_routes_the_next_request_differently_and_a_broken_one_is_rejected(stack):
    s, policy_path = stack
    client = openai.OpenAI(base_url=f"{s.url}/v1", api_key="unused", max_retries=0)
    assert route_of(client) == "cloud; rule=default"
    in_flight = client.chat.completions.create(
        model="tandem-demo", messages=[{"role": "user", "content": "go"}], max_tokens=40, stream=True
    )
    first = next(iter(in_flight))

    policy = yaml.safe_load(policy_path.read_text())
    policy["rules"][-1] = {"name": "everything-else-on-the-edge", "route": "edge"}
    old_sha = serving_sha(s.url)
    edited_at = time.monotonic()
    write_atomically(policy_path, yaml.safe_dump(policy))
    while serving_sha(s.url) == old_sha:  # measured at the gateway, not behind a busy worker
        assert time.monotonic() - edited_at < 1.0, "the new policy did not serve within a second of the edit"
        time.sleep(0.02)
    assert route_of(client) == "edge; rule=everything-else-on-the-edge"

    chunks = [first, *in_flight]  # the stream that started on the old policy finishes normally
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")

    before = reload_errors(s.url)
    policy_path.write_text(policy_path.read_text().replace("route: edge", "route: nowhere", 1))
    deadline = time.monotonic() + 3
    while not httpx.get(f"{s.url}/readyz").json()["policy"]["last_error"]:
        assert time.monotonic() < deadline, "the broken edit was not noticed"
        time.sleep(0.05)
    error = httpx.get(f"{s.url}/readyz").json()["policy"]["last_error"]
    assert error.startswith(f"{policy_path}:") and "unknown pool 'nowhere'" in error
    assert reload_errors(s.url) == before + 1
    assert route_of(client) == "edge; rule=everything-else-on-the-edge"  # the last good policy still serves
    assert "policy change rejected" in (policy_path.parent / "logs" / "gateway.log").read_text()
