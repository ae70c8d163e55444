"""Every command that reads a policy says what is wrong with it in one line, never a traceback; `tandem up` reads
TANDEM_POLICY_FILE as `tandem gateway` does."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

import tandem.stack
from tandem.cli import app

GOOD = Path(__file__).parents[3] / "policies" / "default.yaml"
BAD = {  # each raised a Python exception out of the loader
    "picker type left empty": GOOD.read_text().replace("{type: cache-affinity,", "{type: ,"),
    "picker type a number": GOOD.read_text().replace("{type: cache-affinity,", "{type: 5,"),
    "a constructor's own failure": GOOD.read_text().replace("version: 1", "version: !!timestamp 1"),
    "an integer Python will not read": GOOD.read_text().replace("max: 512", f"max: {'9' * 5000}"),
}


@pytest.mark.parametrize("text", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("command", ["check", "replay", "explain"])
def test_a_bad_policy_is_one_line_of_error(tmp_path, demo_checkpoint, text, command):
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("")
    args = {
        "check": ["policy", "check", str(policy)],
        "replay": ["policy", "replay", str(trace), "--policy", str(policy)],
        "explain": ["policy", "explain", str(policy), "--model", str(demo_checkpoint), "--message", "hi"],
    }[command]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert result.output.startswith(f"error: {policy}:") and len(result.output.splitlines()) == 1, result.output


@pytest.fixture
def stack_runs(monkeypatch) -> list:
    runs = []
    monkeypatch.setattr(tandem.stack, "run_stack", lambda state_dir, policy, models: runs.append(policy) or 0)
    return runs


@pytest.mark.parametrize(
    ("env", "flags", "used"),
    [
        ({}, [], "policies/default.yaml"),
        ({"TANDEM_POLICY_FILE": "mine.yaml"}, [], "mine.yaml"),
        ({"TANDEM_POLICY_FILE": "mine.yaml"}, ["--policy", "flag.yaml"], "flag.yaml"),
    ],
)
def test_up_reads_the_policy_variable_unless_a_flag_is_given(stack_runs, monkeypatch, env, flags, used):
    monkeypatch.delenv("TANDEM_POLICY_FILE", raising=False)
    result = CliRunner().invoke(app, ["up", *flags], env=env)
    assert result.exit_code == 0, result.output
    assert stack_runs == [Path(used)]


@pytest.mark.parametrize("text", BAD.values(), ids=BAD.keys())
def test_the_gateway_refuses_a_bad_policy_in_one_line(tmp_path, demo_checkpoint, monkeypatch, text):
    import gateway.server

    monkeypatch.setattr(gateway.server, "run", lambda settings, log_level: pytest.fail("the gateway was started"))
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    env = {"TANDEM_POLICY_FILE": str(policy), "TANDEM_API_KEYS": "test:key", "TANDEM_AUTH": "api-key"}
    result = CliRunner().invoke(app, ["gateway", "--model", str(demo_checkpoint)], env=env)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert f"error: {policy}:" in result.output and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("trace", ["fifo", "[1, 2]", '{"features": 5}', "[" * 100_000, "missing", "a folder"])
def test_a_trace_that_is_none_is_one_line_of_error(tmp_path, trace):
    """(a review) A FIFO as the trace waited for ever; a JSON array line, a `features` that is no object and deep
    nesting were tracebacks."""
    import os
    import subprocess
    import sys

    path = tmp_path / "trace.jsonl"
    if trace == "fifo":
        os.mkfifo(path)
    elif trace == "a folder":  # (these two were typer's box of many lines, exit 2)
        path.mkdir()
    elif trace != "missing":
        path.write_text(trace + "\n")
    policy = Path(__file__).parents[3] / "policies" / "default.yaml"
    done = subprocess.run([sys.executable, "-m", "tandem.cli", "policy", "replay", str(path), "--policy", str(policy)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_check_says_what_the_gateway_says_of_a_policy_without_detection(tmp_path):
    """`policy check` said a bare "ok" of a file the gateway loads with PRIVACY GUARANTEE IS OFF (a review)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        GOOD.read_text().replace("detectors: [email, phone, credit-card, cn-id, iban, ssn]", "detectors: []")
    )
    result = CliRunner().invoke(app, ["policy", "check", str(policy)])
    assert (
        result.exit_code == 0
        and "warning: privacy.detectors is [] in the policy: PII detection is OFF" in result.output
    )
    assert "ok (2 pools" in result.output


def test_explain_takes_the_priority_and_refuses_what_the_gateway_refuses(tmp_path, demo_checkpoint):
    """Rules match on priority, which explain could not be told; and a request past the model's context was routed
    by explain where the gateway answers 400 (a review)."""
    import json

    text = GOOD.read_text()
    rules_at = text.index("rules:")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        text[:rules_at]
        + "rules:\n  - {name: urgent, match: {priority: {min: 5}}, route: edge}\n"
        + text[rules_at + 7 :]
    )
    base = ["policy", "explain", str(policy), "--model", str(demo_checkpoint), "--message", "hi"]
    urgent = CliRunner().invoke(app, [*base, "--priority", "7"])
    assert urgent.exit_code == 0, urgent.output
    assert json.loads(urgent.output)["rules"][0]["matched"] is True
    plain = json.loads(CliRunner().invoke(app, base).output)
    assert plain["rules"][0]["matched"] is False
    too_long = CliRunner().invoke(app, [*base, "--max-tokens", "100000"])
    assert too_long.exit_code == 1 and "context_length_exceeded" in too_long.output, too_long.output
