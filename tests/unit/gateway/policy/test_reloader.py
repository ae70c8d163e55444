"""A refused edit is counted and shown, whatever is wrong with the file: the previous policy keeps serving."""

import asyncio
import os
import time
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from gateway.policy import reloader
from gateway.policy.loader import load_policy
from gateway.policy.reloader import PolicyReloader, PolicyStatus, digest

GOOD = """version: 1
pools:
  edge: {kind: edge, endpoints: ['grpc://127.0.0.1:1']}
  cloud: {kind: cloud, endpoints: ['grpc://h:2']}
rules:
  - {name: private, match: {privacy: [private, pii, confidential]}, route: edge}
  - {name: default, route: cloud}
"""


def errors_counted() -> float:
    return REGISTRY.get_sample_value("tandem_gateway_policy_reloads_total", {"result": "error"}) or 0.0


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(reloader, "SETTLE_S", 0.0)
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    policy = load_policy(path)
    return SimpleNamespace(
        policy=policy,
        policy_status=PolicyStatus(path, digest(GOOD), time.time()),
        check_models=lambda policy: None,
    )


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            GOOD.replace("['grpc://127.0.0.1:1']}", "['grpc://127.0.0.1:1'], profile: {picker: {type: }}}"),
            "picker.type",
        ),
        (
            GOOD.replace("['grpc://127.0.0.1:1']}", "['grpc://127.0.0.1:1'], profile: {picker: {type: 5}}}"),
            "picker.type",
        ),
        (GOOD.replace("version: 1", "version: !!timestamp 1"), "!!timestamp"),
        (GOOD.replace("route: cloud}", f"route: cloud, match: {{priority: {{min: {'9' * 5000}}}}}}}"), "5000 digits"),
        (
            GOOD.replace("['grpc://127.0.0.1:1']}", "['grpc://127.0.0.1:1'], trust_remote_http: 'yes'}"),
            "trust_remote_http",
        ),
    ],
)
async def test_a_refused_edit_is_counted_and_names_the_file(state, edit, said):
    serving, before = state.policy, errors_counted()
    state.policy_status.path.write_text(edit)
    assert await PolicyReloader(state).reload() is False
    error = state.policy_status.last_error
    assert error.startswith(str(state.policy_status.path)) and said in error, error
    assert errors_counted() == before + 1
    assert state.policy is serving


async def test_a_reload_that_fails_otherwise_is_counted_too(state, monkeypatch):
    """The watch's last resort (a bug, not the file) used to set last_error without counting it: an alert on
    `result="error"` never fired."""

    async def one_change(*folders, **kwargs):
        yield {("modified", str(state.policy_status.path))}
        raise asyncio.CancelledError  # the watch would go on; the test ends here

    async def broken(self):
        raise RuntimeError("bug")

    monkeypatch.setattr(reloader, "awatch", one_change)
    monkeypatch.setattr(PolicyReloader, "reload", broken)
    before = errors_counted()
    with pytest.raises(asyncio.CancelledError):
        await PolicyReloader(state).run()
    assert state.policy_status.last_error.endswith("reload failed; see the gateway log")
    assert errors_counted() == before + 1


def test_every_folder_a_policy_is_linked_through_is_watched(tmp_path):
    """A review linked the policy to a ConfigMap's file, itself a link into `..data`: `cm/`, where `..data` is
    swapped, was not watched, and the swap was missed until something else changed there."""
    (tmp_path / "cm" / "..a").mkdir(parents=True)
    (tmp_path / "cm" / "..a" / "policy.yaml").write_text(GOOD)
    (tmp_path / "cm" / "..data").symlink_to("..a")
    (tmp_path / "cm" / "policy.yaml").symlink_to("..data/policy.yaml")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "policy.yaml").symlink_to(tmp_path / "cm" / "policy.yaml")
    chain = reloader.link_chain(tmp_path / "etc" / "policy.yaml")
    assert {link.parent for link in chain} == {tmp_path / "etc", tmp_path / "cm", tmp_path / "cm" / "..data",
                                               (tmp_path / "cm" / "..a").resolve()}  # fmt: skip
    (tmp_path / "cm" / "..b").mkdir()
    (tmp_path / "cm" / "..b" / "policy.yaml").write_text(GOOD)
    (tmp_path / "cm" / "..tmp").symlink_to("..b")
    (tmp_path / "cm" / "..tmp").replace(tmp_path / "cm" / "..data")
    assert reloader.link_chain(tmp_path / "etc" / "policy.yaml") != chain  # the watch starts again on the new one
    (tmp_path / "loop").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop")
    assert len(reloader.link_chain(tmp_path / "loop")) <= 3  # a loop of links ends


EDITED = GOOD.replace("name: default", "name: edited")


@pytest.fixture
def watched(tmp_path, monkeypatch):
    """A policy at pdir/policy.yaml and a running reloader: yields (the path, a wait for the edited policy)."""
    monkeypatch.setattr(reloader, "SETTLE_S", 0.0)
    monkeypatch.setattr(reloader, "POLL_S", 0.2)
    (tmp_path / "pdir").mkdir()
    path = tmp_path / "pdir" / "policy.yaml"
    path.write_text(GOOD)

    async def apply(policy):
        pass

    state = SimpleNamespace(
        policy=load_policy(path),
        policy_status=PolicyStatus(path, digest(GOOD), time.time()),
        check_models=lambda policy: None,
        registry=SimpleNamespace(apply=apply),
    )

    async def edited(within: float = 5.0) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if any(rule.name == "edited" for rule in state.policy.rules):
                return True
            await asyncio.sleep(0.05)
        return False

    return path, state, edited


async def _running(state):
    task = asyncio.create_task(PolicyReloader(state).run())
    await asyncio.sleep(0.3)  # the watch is on
    return task


async def test_a_link_into_a_folder_not_made_yet_leaves_the_watch_on(watched, tmp_path):
    """(a review) The policy linked into a folder that did not exist yet: the watch raised FileNotFoundError and
    died, and no edit after was read, silently."""
    path, state, edited = watched
    task = await _running(state)
    try:
        path.unlink()
        path.symlink_to(tmp_path / "not-yet" / "policy.yaml")
        await asyncio.sleep(0.6)
        assert "cannot read" in (state.policy_status.last_error or "")
        (tmp_path / "not-yet").mkdir()
        (tmp_path / "not-yet" / "policy.yaml").write_text(EDITED)
        assert await edited(), state.policy_status.last_error
        assert state.policy_status.last_error is None
    finally:
        task.cancel()


async def test_a_folder_deleted_and_made_again_is_watched_again(watched):
    """(a review) A deploy tool replaced the policy's folder: the watch stayed on the deleted one and heard nothing
    more."""
    path, state, edited = watched
    task = await _running(state)
    try:
        path.unlink()
        path.parent.rmdir()
        await asyncio.sleep(0.6)
        path.parent.mkdir()
        path.write_text(EDITED)
        assert await edited(), state.policy_status.last_error
    finally:
        task.cancel()


async def test_a_fifo_at_the_policy_path_is_refused_not_waited_on(watched):
    """(a review) open() on a FIFO waits for a writer: on the event loop, every request waited with it."""
    path, state, edited = watched
    serving = state.policy
    task = await _running(state)
    try:
        path.unlink()
        os.mkfifo(path)
        started = time.monotonic()
        while "not a regular file" not in (state.policy_status.last_error or "") and time.monotonic() - started < 5:
            await asyncio.sleep(0.05)  # the loop runs: nothing waits on the FIFO
        assert "not a regular file" in state.policy_status.last_error
        assert state.policy is serving
        path.unlink()
        path.write_text(EDITED)
        assert await edited()
    finally:
        task.cancel()
