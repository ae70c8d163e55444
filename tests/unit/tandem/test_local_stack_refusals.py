"""`tandem up` is a stack on this host with no API keys: what would open it, or cannot be started, is refused before
any process starts, in one line."""

import pytest

from tandem.stack import StackError, _port_from_env, start_local_stack

POLICY = (
    "version: 1\npools:\n  edge: {{kind: edge, endpoints: ['{edge}']}}\n  cloud: {{kind: cloud, endpoints: ['{cloud}']}}\n"
    "rules:\n  - {{name: private, match: {{privacy: [private, pii, confidential]}}, route: edge}}\n"
    "  - {{name: default, route: cloud}}\n"
)


@pytest.mark.parametrize(
    ("env", "edge", "cloud", "said"),
    [
        ({"TANDEM_HOST": "0.0.0.0"}, "grpc://127.0.0.1:1", "grpc://127.0.0.1:2", "TANDEM_HOST='0.0.0.0'"),
        ({"TANDEM_HOST": ""}, "grpc://127.0.0.1:1", "grpc://127.0.0.1:2", "TANDEM_HOST=''"),
        ({}, "grpc://127.0.0.1:1", "grpc://10.0.0.7:2", "grpc://10.0.0.7:2: a local stack starts a Tandem worker"),
        ({}, "grpc://127.0.0.1:1", "https://api.example.com", "https://api.example.com: a local stack"),
    ],
)
def test_what_would_open_the_stack_or_cannot_be_started_is_refused(tmp_path, monkeypatch, env, edge, cloud, said):
    for name in ("TANDEM_HOST", "TANDEM_API_KEYS", "TANDEM_TENANTS_FILE", "TANDEM_AUTH"):
        monkeypatch.delenv(name, raising=False)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.format(edge=edge, cloud=cloud))
    with pytest.raises(StackError) as err:
        start_local_stack(tmp_path / "no-model", policy, tmp_path, 1, env)
    assert said in str(err.value)
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").iterdir())  # nothing was started


@pytest.mark.parametrize("value", ["abc", "99999", "0", "-1", "８０００", "", " "])
def test_a_port_variable_that_is_no_port_is_named(monkeypatch, value):
    monkeypatch.setenv("TANDEM_PORT", value)
    with pytest.raises(StackError, match="TANDEM_PORT"):
        _port_from_env("TANDEM_PORT", 8000)
    monkeypatch.setenv("TANDEM_PORT", " 8001 ")
    assert _port_from_env("TANDEM_PORT", 8000) == 8001


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"REDIS_URL": "notaurl"}, "Redis URL must specify"),
        ({"TANDEM_TOOL_FORMAT": "bogus"}, "TANDEM_TOOL_FORMAT must be one of"),
        ({"TANDEM_DECISION_LOG": "/nonexistent/x.jsonl"}, "TANDEM_DECISION_LOG"),
        ({"TANDEM_DECISION_LOG": "/proc/x.jsonl"}, "cannot append to it"),
        # (a review) a pipe without a reader held the start for ever, silent, the port never bound
        ({"TANDEM_DECISION_LOG": "{fifo}"}, "cannot append to it: No such device or address"),
        ({"TANDEM_MODEL_DIRS": "/nonexistent"}, "no checkpoint directory"),
        ({"TANDEM_MODEL_DIRS": "q="}, "TANDEM_MODEL_DIRS: 'q=' names no checkpoint directory after '='"),  # was `.`
        ({"TANDEM_HEALTH_INTERVAL_S": "0"}, "TANDEM_HEALTH_INTERVAL_S: Input should be greater than or equal to 0.05"),
        ({"TANDEM_API_KEYS": "acme:k"}, "TANDEM_AUTH=none checks no keys, and TANDEM_API_KEYS is set"),
        # (a review) a second model the default policy does not place: a traceback in the lifespan
        ({"TANDEM_MODEL_DIRS": "{other}"}, "the policy must say which pools serve each"),
        ({"TANDEM_MODEL_DIRS": "{damaged}"}, "tokenizer.json: not a tokenizer"),  # a traceback after the port
    ],
)
def test_the_gateway_says_what_is_wrong_with_its_settings_in_one_line(
    demo_checkpoint, monkeypatch, tmp_path, env, said
):
    """Each was a traceback, several inside uvicorn's lifespan after the port was bound."""
    import subprocess
    import sys

    if env.get("TANDEM_MODEL_DIRS") in ("{other}", "{damaged}"):
        other = tmp_path / "other"
        __import__("shutil").copytree(demo_checkpoint, other)
        if env["TANDEM_MODEL_DIRS"] == "{damaged}":
            (other / "tokenizer.json").write_text("{broken")
        env = {"TANDEM_MODEL_DIRS": str(other)}
    if env.get("TANDEM_DECISION_LOG") == "{fifo}":
        __import__("os").mkfifo(tmp_path / "decisions.pipe")
        env = {"TANDEM_DECISION_LOG": str(tmp_path / "decisions.pipe")}
    full = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TANDEM_")} | {"TANDEM_AUTH": "none"}
    command = [sys.executable, "-m", "tandem.cli", "gateway", "--model", str(demo_checkpoint), "--port", "1"]
    done = subprocess.run(command, env=full | env, capture_output=True, text=True, timeout=60)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {done.stderr.strip().removeprefix('error: ')}"]
    assert said in done.stderr


def test_an_open_local_stack_drops_an_exported_ops_token():
    """tandem up runs without keys; an ops token left in the shell would make the gateway refuse to start."""
    from tandem.stack import local_env

    env = local_env({"TANDEM_OPS_TOKEN": "x"})
    assert env["TANDEM_AUTH"] == "none" and "TANDEM_OPS_TOKEN" not in env
    keyed = local_env({"TANDEM_OPS_TOKEN": "x", "TANDEM_API_KEYS": "acme:k"})
    assert "TANDEM_AUTH" not in keyed and keyed["TANDEM_OPS_TOKEN"] == "x"
    # (a review) auth none beside keys is refused by the gateway, naming what is set: never a token made here
    assert "TANDEM_OPS_TOKEN" not in local_env({"TANDEM_AUTH": "none", "TANDEM_API_KEYS": "acme:k"})


@pytest.mark.parametrize("keys", ["acme:tdm-secret-key", ""])
def test_the_banners_requests_send_a_key_when_the_stack_checks_keys(monkeypatch, tmp_path, keys):
    """With TANDEM_API_KEYS set, the banner printed curls without a key: both got a 401 as pasted."""
    from io import StringIO

    from rich.console import Console

    import tandem.stack

    for name in ("TANDEM_API_KEYS", "TANDEM_TENANTS_FILE", "TANDEM_AUTH", "TANDEM_OPS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    if keys:
        monkeypatch.setenv("TANDEM_API_KEYS", keys)
    out = StringIO()
    monkeypatch.setattr(tandem.stack, "console", Console(file=out, width=300))
    tandem.stack._print_banner("http://127.0.0.1:8000", tmp_path / "logs", tmp_path / "policy.yaml")
    curls = [line for line in out.getvalue().splitlines() if line.startswith("curl ")]
    assert len(curls) == 2
    for curl in curls:
        assert ('-H "Authorization: Bearer $TANDEM_KEY"' in curl) == bool(keys)
    assert "tdm-secret-key" not in out.getvalue()  # the key is read from the shell, never printed
    assert ("export TANDEM_KEY=" in out.getvalue()) == bool(keys)
    # (a review) with keys, the ops token the launcher made is no one's: the banner says how to have one
    assert ("start with TANDEM_OPS_TOKEN=" in out.getvalue()) == bool(keys)
    assert "local agent (the device SDK's private prompts): http://127.0.0.1:50062\n" in out.getvalue()
    # (a review) moved by TANDEM_LOCAL_AGENT_PORT, it was said nowhere, and the SDK looks at 50062
    tandem.stack._print_banner("http://127.0.0.1:8000", tmp_path / "logs", tmp_path / "policy.yaml", [], 51362)
    assert "http://127.0.0.1:51362 (not the SDK's default: Client(local_agent_url=...) must name it)" in out.getvalue()


def test_a_port_in_use_names_the_process_holding_it(tmp_path):
    """The next `make up` after a lost terminal said only "another `make up`?": it names the process to stop."""
    import subprocess
    import sys

    from tests.conftest import free_port

    port = free_port()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1',{port})); s.listen();"
         "print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "up"
        policy = tmp_path / "policy.yaml"
        policy.write_text(POLICY.format(edge="grpc://127.0.0.1:1", cloud="grpc://127.0.0.1:2"))
        with pytest.raises(StackError) as err:
            start_local_stack(tmp_path / "no-model", policy, tmp_path, port, {"TANDEM_AUTH": "none"})
        assert f"port(s) [{port}] already in use by pid {holder.pid} (" in str(err.value)
        assert f"kill {holder.pid}" in str(err.value)
        assert f"move {port} with TANDEM_PORT" in str(err.value)  # which setting moves it
    finally:
        holder.kill()
        holder.wait()


def test_a_new_start_keeps_the_run_befores_log(tmp_path):
    """(a review) Each start wrote over the logs: a crashed run's gateway log was gone by the time anyone looked."""
    import os

    from tandem.stack import spawn

    (tmp_path / "gateway.log").write_text("Traceback: the crash before\n")
    child = spawn("gateway", None, "", ["--help"], tmp_path, dict(os.environ))
    child.process.wait(timeout=60)
    assert (tmp_path / "gateway.log.1").read_text() == "Traceback: the crash before\n"
    assert "usage" in (tmp_path / "gateway.log").read_text().lower()


@pytest.mark.parametrize("variable", ["TANDEM_OPS_TOKEN", "TANDEM_EDGE_TOKEN"])
def test_a_refused_secret_is_named_never_printed(demo_checkpoint, variable):
    """(a review) `TANDEM_OPS_TOKEN: must be printable ASCII… (got 's3cr3t-ops token')`: a pod's log keeps it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")} | {variable: "s3cr3t-ops token"}
    command = [sys.executable, "-m", "tandem.cli", "gateway", "--model", str(demo_checkpoint), "--port", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode in (1, 2) and variable in done.stderr, done.stderr
    assert "s3cr3t" not in done.stderr + done.stdout


def test_keys_hash_reads_the_key_from_standard_input():
    """A key given as an argument shows in the process list and the shell's history."""
    import subprocess
    import sys

    from gateway.tenants import hash_key

    done = subprocess.run([sys.executable, "-m", "tandem.cli", "keys", "hash"], input="tdm-abc\n", capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.stdout.strip() == hash_key("tdm-abc")
    empty = subprocess.run([sys.executable, "-m", "tandem.cli", "keys", "hash"], input="", capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert empty.returncode == 2 and "a key is printable ASCII" in empty.stderr


def test_a_state_folder_that_takes_no_files_is_named(tmp_path):
    """(a review) `tandem up --state-dir FILE` and a read-only state folder were tracebacks."""
    import os

    from tandem.stack import _own_state_dir

    (tmp_path / "file").write_text("x")
    for where in (tmp_path / "file", tmp_path / "file" / "under"):
        with pytest.raises(StackError, match="cannot keep the stack's files there"):
            _own_state_dir(where)
    os.close(_own_state_dir(tmp_path / "new" / "state"))  # made
    assert [p.name for p in (tmp_path / "new" / "state").iterdir()] == ["up.lock"]


def test_a_second_tandem_up_on_one_state_folder_names_the_first(tmp_path):
    """(a new user's trial) Two `make up`s at once raced for the ports, and the one that lost wrote its gateway's log
    over the winner's: the state folder is one `tandem up`'s at a time, and the lock goes with a killed process."""
    import os

    from tandem.stack import _own_state_dir

    held = _own_state_dir(tmp_path)
    try:
        with pytest.raises(StackError, match=f"another `tandem up` \\(pid {os.getpid()}\\) runs with the state folder"):
            _own_state_dir(tmp_path)
    finally:
        os.close(held)  # as a process that exits (or is killed) lets go
    os.close(_own_state_dir(tmp_path))


def test_what_the_gateway_says_of_a_policy_edit_is_shown_where_tandem_up_prints(tmp_path):
    """(a new user's trial) A rejected live edit showed only in the gateway's log and /readyz: `tandem up` shows the
    reload and the rejection with its reasons, and nothing else of the log."""
    from tandem.stack import PolicyNews

    log = tmp_path / "gateway.log"
    log.write_text("2026-12-05 07:00:00,000 INFO gateway.lifespan: started\n")
    news = PolicyNews(log)
    with log.open("a") as out:
        out.write("2026-12-05 07:01:00,000 ERROR gateway.policy.reloader: policy change rejected, the previous policy ")
        out.write("keeps serving:\npolicies/default.yaml:35: rules.1.fallbak: Extra inputs are not permitted\n")
        out.write('INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n2026-12-05 07:02:00,00')
    assert news.read() == [
        "2026-12-05 07:01:00,000 ERROR gateway.policy.reloader: policy change rejected, the previous policy keeps "
        "serving:",
        "policies/default.yaml:35: rules.1.fallbak: Extra inputs are not permitted",
    ]
    with log.open("a") as out:  # the rest of a line written in two pieces
        out.write("0 INFO gateway.policy.reloader: policy reloaded from policies/default.yaml (sha256 ab): 2 pools\n")
    assert news.read() == [
        "2026-12-05 07:02:00,000 INFO gateway.policy.reloader: policy reloaded from policies/default.yaml (sha256 ab): "
        "2 pools"
    ]
    assert news.read() == []
