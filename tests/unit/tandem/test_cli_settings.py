"""`tandem gateway`: the documented TANDEM_* variables hold unless a flag is given (the CLI used to pass its own
defaults, so TANDEM_PORT and TANDEM_POLICY_FILE were ignored under it)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

import gateway.server
from tandem.cli import app

POLICY = Path(__file__).parents[3] / "policies" / "default.yaml"


@pytest.fixture
def started(monkeypatch) -> list:
    """The settings `tandem gateway` would serve with (the server itself is not started)."""
    runs = []
    monkeypatch.setattr(gateway.server, "run", lambda settings, log_level: runs.append(settings))
    monkeypatch.setenv("TANDEM_API_KEYS", "test:key")  # a gateway with no keys is refused before it would run
    monkeypatch.delenv("TANDEM_AUTH", raising=False)
    return runs


@pytest.mark.parametrize(
    ("env", "flags", "port", "host"),
    [
        ({}, [], 8000, "127.0.0.1"),
        ({"TANDEM_PORT": "9123", "TANDEM_HOST": "0.0.0.0"}, [], 9123, "0.0.0.0"),
        ({"TANDEM_PORT": "9123"}, ["--port", "9200"], 9200, "127.0.0.1"),
    ],
)
def test_variables_hold_unless_a_flag_is_given(started, demo_checkpoint, env, flags, port, host):
    result = CliRunner().invoke(app, ["gateway", "--model", str(demo_checkpoint), *flags], env=env)
    assert result.exit_code == 0, result.output
    assert (started[0].port, started[0].host) == (port, host)


def test_the_policy_file_variable_is_read_and_checked(started, demo_checkpoint, tmp_path):
    result = CliRunner().invoke(
        app, ["gateway", "--model", str(demo_checkpoint)], env={"TANDEM_POLICY_FILE": str(POLICY)}
    )
    assert result.exit_code == 0 and started[0].policy_file == POLICY
    missing = tmp_path / "nope.yaml"
    result = CliRunner().invoke(
        app, ["gateway", "--model", str(demo_checkpoint)], env={"TANDEM_POLICY_FILE": str(missing)}
    )
    assert result.exit_code == 1 and "nope.yaml" in result.output and not started[1:]


def test_a_bad_variable_is_an_error_naming_it(started, demo_checkpoint):
    result = CliRunner().invoke(app, ["gateway", "--model", str(demo_checkpoint)], env={"TANDEM_PORT": "eighty"})
    assert result.exit_code == 2 and "TANDEM_PORT" in result.output and "eighty" in result.output and not started


def test_the_model_variable_serves_for_the_flag(started, demo_checkpoint):
    """docs/operations.md sets the gateway up by TANDEM_* variables, TANDEM_MODEL_DIR among them: `tandem gateway`
    said "Missing option '--model'" under it."""
    result = CliRunner().invoke(app, ["gateway"], env={"TANDEM_MODEL_DIR": str(demo_checkpoint)})
    assert result.exit_code == 0, result.output
    assert Path(started[0].model_dir).resolve() == demo_checkpoint.resolve()


MANY_MODELS = """version: 1
pools:
  edge:  {kind: edge,  endpoints: [grpc://127.0.0.1:50061]}
  cloud: {kind: cloud, endpoints: [grpc://127.0.0.1:50051]}
  big:   {kind: cloud, endpoints: [grpc://10.0.0.7:50051]}
models:
  tandem-demo: {pools: [edge, cloud]}
  qwen3-8b:    {pools: [big], owned_by: acme}
rules:
  - {name: private, match: {privacy: [private, pii, confidential]}, route: edge, fallback: []}
  - {name: default, route: cloud, fallback: [edge]}
  - {name: big-model, match: {model: [qwen3-8b]}, route: big}
"""


@pytest.mark.parametrize(("flags", "pool"), [([], "cloud"), (["--model-id", "qwen3-8b"], "big")])
def test_offline_explain_routes_the_checkpoints_model_as_the_gateway_would(demo_checkpoint, tmp_path, flags, pool):
    """Offline explain sent the model id '' and so matched no rule of a policy with `models` (docs/policy.md's
    own example), then advised adding a catch-all rule the policy had."""
    import json

    policy = tmp_path / "many.yaml"
    policy.write_text(MANY_MODELS)
    args = ["policy", "explain", str(policy), "--model", str(demo_checkpoint), "--message", "hi", *flags]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["features"]["model"] == (flags[-1] if flags else demo_checkpoint.name)
    assert out["pick"]["pool"] == pool, out
