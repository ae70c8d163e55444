"""Editing the policy file under a running gateway."""

import hashlib
import os
import shutil
import time

import httpx
import openai
import pytest
import yaml

from tests.conftest import free_port
from tests.stack import start_gateway, start_stack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(demo_checkpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("reload")
    s = start_stack(demo_checkpoint, work)
    yield s, work / "policy.yaml"
    s.stop()


@pytest.fixture
def stack(served):
    """The module's stack; each test edits its policy, and the file it started with serves again after."""
    s, policy_path = served
    original = policy_path.read_bytes()
    yield served
    write_atomically(policy_path, original.decode())
    wait_for(
        lambda: (
            serving_sha(s.url) == hashlib.sha256(original).hexdigest()
            and httpx.get(f"{s.url}/readyz").json()["policy"]["last_error"] is None
        ),
        "the original policy did not serve again",
    )


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


def reloads(url: str, result: str = "error") -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f'tandem_gateway_policy_reloads_total{{result="{result}"}}'):
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

    before = reloads(s.url)
    policy_path.write_text(policy_path.read_text().replace("route: edge", "route: nowhere", 1))
    deadline = time.monotonic() + 3
    while not httpx.get(f"{s.url}/readyz").json()["policy"]["last_error"]:
        assert time.monotonic() < deadline, "the broken edit was not noticed"
        time.sleep(0.05)
    error = httpx.get(f"{s.url}/readyz").json()["policy"]["last_error"]
    assert error.startswith(f"{policy_path}:") and "unknown pool 'nowhere'" in error
    assert reloads(s.url) == before + 1
    assert route_of(client) == "edge; rule=everything-else-on-the-edge"  # the last good policy still serves
    assert "policy change rejected" in (policy_path.parent / "logs" / "gateway.log").read_text()
    # /readyz names the policy that serves, not the file that was refused
    assert serving_sha(s.url) != hashlib.sha256(policy_path.read_bytes()).hexdigest()


def wait_for(predicate, what: str, seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize(
    "broken",
    [b"# caf\xe9\n", b"x: " + b"[" * 3000 + b"]" * 3000 + b"\n", b"version: 1\nversion: 1\n"],
    ids=["not-utf8", "nested-too-deep", "key-twice"],
)
def test_an_edit_that_cannot_be_read_is_refused_and_the_watch_goes_on(stack, broken):
    """A file that is not UTF-8 or nests too deeply ended the watch, silently: no later edit was ever read."""
    s, policy_path = stack
    client = openai.OpenAI(base_url=f"{s.url}/v1", api_key="unused", max_retries=0)
    good = policy_path.read_bytes()
    policy_path.write_bytes(good + broken)
    wait_for(lambda: httpx.get(f"{s.url}/readyz").json()["policy"]["last_error"], "the broken edit was not noticed")
    assert route_of(client) == "cloud; rule=default"
    policy_path.write_bytes(good)  # undone: the serving file again, and no error left standing
    wait_for(
        lambda: httpx.get(f"{s.url}/readyz").json()["policy"]["last_error"] is None, "the undone edit's error stayed"
    )
    policy = yaml.safe_load(good)
    policy["rules"][-1] = {"name": "later-edit", "route": "edge"}
    write_atomically(policy_path, yaml.safe_dump(policy))
    wait_for(lambda: route_of(client) == "edge; rule=later-edit", "the watch stopped after the broken edit")


def test_a_configmap_swap_and_an_edit_of_a_symlinks_target_elsewhere_are_read(stack, demo_checkpoint, tmp_path):
    """Kubernetes mounts a ConfigMap as policy.yaml -> ..data/policy.yaml and swaps `..data` (a symlink to a folder
    of its own per version) by a rename; an operator may link the policy to a file in another folder."""
    s, policy_path = stack
    mount = tmp_path / "mount"
    (mount / "..v1").mkdir(parents=True)
    policy = yaml.safe_load(policy_path.read_text())
    (mount / "..v1" / "policy.yaml").write_text(yaml.safe_dump(policy))
    (mount / "..data").symlink_to("..v1")
    (mount / "policy.yaml").symlink_to("..data/policy.yaml")
    port = free_port()
    gateway = start_gateway(demo_checkpoint, mount / "policy.yaml", port, {}, tmp_path / "gw")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    try:
        assert route_of(client) == "cloud; rule=default"
        policy["rules"][-1] = {"name": "after-the-swap", "route": "edge"}
        (mount / "..v2").mkdir()
        (mount / "..v2" / "policy.yaml").write_text(yaml.safe_dump(policy))
        (mount / "..data_tmp").symlink_to("..v2")
        os.replace(mount / "..data_tmp", mount / "..data")
        shutil.rmtree(mount / "..v1")  # as the kubelet does
        wait_for(lambda: route_of(client) == "edge; rule=after-the-swap", "the ConfigMap swap was not read")
    finally:
        gateway.stop()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "v3.yaml").write_text(yaml.safe_dump(policy))
    linked = tmp_path / "etc"
    linked.mkdir()
    (linked / "policy.yaml").symlink_to(elsewhere / "v3.yaml")
    gateway = start_gateway(demo_checkpoint, linked / "policy.yaml", port, {}, tmp_path / "gw2")
    try:
        assert route_of(client) == "edge; rule=after-the-swap"
        policy["rules"][-1] = {"name": "edited-in-place", "route": "cloud"}
        (elsewhere / "v3.yaml").write_text(yaml.safe_dump(policy))
        wait_for(lambda: route_of(client) == "cloud; rule=edited-in-place", "an edit of the link's target was not read")
        moved = tmp_path / "moved"  # the link re-pointed to a file in a third folder, then that file edited
        moved.mkdir()
        policy["rules"][-1] = {"name": "re-pointed", "route": "edge"}
        (moved / "v4.yaml").write_text(yaml.safe_dump(policy))
        (linked / "policy.tmp").symlink_to(moved / "v4.yaml")
        os.replace(linked / "policy.tmp", linked / "policy.yaml")
        wait_for(lambda: route_of(client) == "edge; rule=re-pointed", "the re-pointed link was not read")
        policy["rules"][-1] = {"name": "edited-after-the-move", "route": "cloud"}
        (moved / "v4.yaml").write_text(yaml.safe_dump(policy))
        wait_for(
            lambda: route_of(client) == "cloud; rule=edited-after-the-move", "an edit of the new target was missed"
        )
    finally:
        gateway.stop()


def test_a_file_written_in_place_is_read_once_it_is_whole(stack):
    """`cat > policy.yaml` truncates the file and writes it: a read in between saw a valid policy whose
    never_leave_device list was cut short, and served it until the rest arrived."""
    s, policy_path = stack
    policy = yaml.safe_load(policy_path.read_text())
    policy["rules"][-1] = {"name": "written-in-place", "route": "edge"}
    privacy = policy.pop("privacy")
    head = yaml.safe_dump(policy, sort_keys=False) + "privacy:\n  detectors: [email]\n  never_leave_device:\n"
    tags = [f"  - {tag}\n" for tag in privacy["never_leave_device"]]
    before = reloads(s.url, "ok")
    with policy_path.open("w") as f:
        f.write(head + "".join(tags[:-1]))  # valid alone: the last tag missing
        f.flush()
        time.sleep(0.15)  # a writer that pauses, three times watchfiles' debounce
        f.write(tags[-1])
    whole = policy_path.read_bytes()
    wait_for(lambda: serving_sha(s.url) == hashlib.sha256(whole).hexdigest(), "the whole file did not serve")
    time.sleep(0.5)
    assert reloads(s.url, "ok") == before + 1, "the half-written file served before the whole one"
