"""`tandem up` (what `make up` runs): builds the demo model, serves, stops cleanly on Ctrl-C."""

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

from tandem.demo_model import DemoShape, write_demo_checkpoint
from tests.conftest import free_port
from tests.stack import write_policy

pytestmark = pytest.mark.integration


def is_listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_up_serves_both_routes_and_a_second_model_and_stops_on_ctrl_c(tmp_path):
    cloud_port, edge_port, gateway_port = free_port(), free_port(), free_port()
    policy = write_policy(tmp_path / "policy.yaml", cloud_port, edge_port)
    second = write_demo_checkpoint(tmp_path / "second-model", DemoShape(max_position_embeddings=1024, fit_steps=0))
    up = ["up", "--state-dir", str(tmp_path / "state"), "--policy", str(policy), "--model", str(second)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", *up],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ
        | {"TANDEM_PORT": str(gateway_port), "TANDEM_LOCAL_AGENT_PORT": str(free_port()), "COLUMNS": "200"},
    )
    try:
        banner = []
        deadline = time.monotonic() + 120
        while not any("Tandem is up" in line for line in banner):
            assert time.monotonic() < deadline and process.poll() is None, "".join(banner)
            banner.append(process.stdout.readline())
        url = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
        body = {"model": "tandem-demo", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        private = httpx.post(url, json=body | {"metadata": {"privacy": "pii"}}, timeout=30)
        assert private.headers["x-tandem-route"] == "edge; rule=private"
        long_body = body | {"messages": [{"role": "user", "content": "tell me more. " * 100}]}
        long = httpx.post(url, json=long_body, headers={"X-Tandem-Device": '{"npu": true}'}, timeout=30)
        assert long.headers["x-tandem-route"] == "cloud; rule=default"
        assert (tmp_path / "state" / "models" / "tandem-demo" / "model.safetensors").is_file()
        check_two_models(f"http://127.0.0.1:{gateway_port}/v1", cloud_port, edge_port)
        check_a_killed_worker_is_restarted(process.pid, url, body, cloud_port)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        # read through the same text wrapper as the banner: communicate() reads the pipe's descriptor and would
        # miss what readline() had already buffered (the line after "Tandem is up", at times)
        output = "".join(banner) + process.stdout.read()
    assert process.returncode == 0, output
    assert "stopped." in output
    assert "models: tandem-demo, second-model" in output  # the banner names both
    assert f"restarting cloud-{cloud_port}" in output
    assert not any(is_listening(p) for p in (cloud_port, edge_port, gateway_port))


def check_a_killed_worker_is_restarted(up_pid: int, url: str, body: dict, cloud_port: int) -> None:
    """A worker killed under `tandem up` stopped the whole stack (gateway and edge agent too); now it is started
    again, and until then its requests go where the policy's fallback says."""
    children = open(f"/proc/{up_pid}/task/{up_pid}/children").read().split()
    worker = next(int(p) for p in children if f"--port\0{cloud_port}\0" in open(f"/proc/{p}/cmdline").read())
    os.kill(worker, signal.SIGKILL)
    long_body = body | {"messages": [{"role": "user", "content": "tell me more. " * 100}]}
    routes, deadline = [], time.monotonic() + 90
    while not routes or routes[-1] != "cloud; rule=default":  # the fallback (edge) first, then the cloud again
        assert time.monotonic() < deadline, routes
        reply = httpx.post(url, json=long_body, timeout=30)
        assert reply.status_code == 200, reply.text  # never an error: the edge answers meanwhile
        routes.append(reply.headers["x-tandem-route"])
        time.sleep(0.5)
    assert routes[0] == "edge; rule=default", routes  # it was down: the default rule's fallback served


def check_two_models(base_url: str, cloud_port: int, edge_port: int) -> None:
    """Each model is listed with its context, answered by its own pool only; an unknown one is a 404 naming it."""
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    listed = {m.id: m for m in client.models.list().data}
    assert set(listed) == {"tandem-demo", "second-model"}
    assert listed["tandem-demo"].context_length == 2048 and listed["second-model"].context_length == 1024
    assert client.models.retrieve("second-model").owned_by == "tandem"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("third-model")
    assert "third-model" in missing.value.message and missing.value.code == "model_not_found"
    for model, not_on in (("second-model", (cloud_port, edge_port)), ("tandem-demo", ())):
        reply = client.chat.completions.with_raw_response.create(
            model=model, max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
        backend = reply.headers["x-tandem-backend"]
        assert reply.parse().model == model
        assert not any(backend.endswith(f":{port}") for port in not_on), backend
    assert backend.endswith((f":{cloud_port}", f":{edge_port}"))  # the demo model: its own pools
    with pytest.raises(openai.InternalServerError) as refused:  # no edge pool serves the second model
        client.chat.completions.create(
            model="second-model", max_tokens=4, messages=[{"role": "user", "content": "mail me at ana@example.org"}]
        )
    assert refused.value.status_code == 503 and "private" in refused.value.message
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="third-model", max_tokens=4, messages=[{"role": "user", "content": "hi"}])


def test_a_killed_up_takes_its_workers_with_it(tmp_path):
    """SIGKILL of `tandem up` (no chance to clean up): its workers stop too, so the next start finds its ports free."""
    model = write_demo_checkpoint(tmp_path / "model", DemoShape(fit_steps=0))
    port = free_port()
    parent = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time; from pathlib import Path; from tandem.stack import spawn, local_env; import os\n"
            f"child = spawn('sim', 'cloud', '', ['sim-worker', '--model', {str(model)!r}, '--port', '{port}'],"
            f" Path({str(tmp_path)!r}), local_env(dict(os.environ)))\n"
            "print(child.process.pid, flush=True); time.sleep(600)"
        )],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 60
    while not is_listening(port):
        assert time.monotonic() < deadline, (tmp_path / "sim.log").read_text()
        time.sleep(0.2)
    parent.kill()
    parent.wait()
    try:
        deadline = time.monotonic() + 15
        while is_listening(port) or not _gone(child):
            assert time.monotonic() < deadline, "the worker outlived the killed parent"
            time.sleep(0.2)
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)  # the test failed: leave nothing behind


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for init to reap it."""
    try:
        return "zombie" in open(f"/proc/{pid}/status").read().lower()
    except OSError:
        return True


@pytest.mark.parametrize(
    ("how", "after_s"),
    [("background", 0.5), ("terminal", 0.5), ("terminal", 2.0)],
)
def test_an_interrupt_during_the_first_build_stops_up_cleanly(tmp_path, how, after_s):
    """An interrupt at any moment of the first build stops `tandem up` with 130 and one line, and keeps nothing
    half-built. `background`: `make up &` from a script starts with SIGINT ignored; the handler was set after the
    demo's build, so the interrupt was lost and the whole stack started (a review). `terminal`: Ctrl-C signals the
    whole foreground process group. Either, landing while torch's optimizer imported triton, aborted the process
    (`terminate called after throwing an instance of 'nanobind::python_error'`, exit -6; CI)."""
    policy = write_policy(tmp_path / "policy.yaml", free_port(), free_port())
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "up", "--state-dir", str(tmp_path / "state"), "--policy", str(policy)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"TANDEM_PORT": str(free_port()), "TANDEM_LOCAL_AGENT_PORT": str(free_port())},
        start_new_session=how == "terminal",  # a group of its own, as a terminal's foreground job
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if how == "background" else None,
    )
    try:
        said = []
        while not any("building the demo model" in line for line in said):
            line = process.stdout.readline()
            assert line or process.poll() is None, "".join(said)
            said.append(line)
        time.sleep(after_s)  # inside the build
        if how == "terminal":
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130, "".join(said) + process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
    said = "".join(said) + process.stdout.read()
    assert "stopped while building the demo model" in said
    assert "Traceback" not in said and "terminate called" not in said, said
    assert list((tmp_path / "state").glob("models/*")) == []  # neither the demo nor a half-built folder
