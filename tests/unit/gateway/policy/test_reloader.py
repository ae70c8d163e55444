"""A refused edit is counted and shown, whatever is wrong with the file: the previous policy keeps serving."""

import asyncio
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
        (GOOD.replace("['grpc://127.0.0.1:1']}", "['grpc://127.0.0.1:1'], profile: {picker: {type: }}}"), "picker.type"),
        (GOOD.replace("['grpc://127.0.0.1:1']}", "['grpc://127.0.0.1:1'], profile: {picker: {type: 5}}}"), "picker.type"),
        (GOOD.replace("version: 1", "version: !!timestamp 1"), "!!timestamp"),
        (GOOD.replace("route: cloud}", f"route: cloud, match: {{priority: {{min: {'9' * 5000}}}}}}}"), "5000 digits"),
        (GOOD.replace("['grpc://127.0.0.1:1']}", "['grpc://127.0.0.1:1'], trust_remote_http: 'yes'}"), "trust_remote_http"),
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
