"""The examples in README.md and docs/sdk.md, pasted as a user would, against a local stack: each runs, and where
the doc says what comes back (`X-Tandem-Route: …` in a comment, `served_by` …), that is what comes back.

A review that pasted the docs found examples that failed at their first line (an `api_key="tk-…"` placeholder the
SDK refuses) and banners whose requests got 401s; nothing had run them. The stack listens on other ports than the
docs' 8000 and the local agent's default, so the one change made to an example is those addresses.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.stack import start_local_stack
from tests.conftest import free_port
from tests.stack import write_policy

pytestmark = pytest.mark.integration
ROOT = Path(__file__).parents[2]
DOCS_URL = "http://127.0.0.1:8000"
_BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.M | re.S)
_ROUTE_SAID = re.compile(r"\(X-Tandem-Route: ([^)]+)\)")


def blocks(doc: str, language: str) -> list[tuple[str, str]]:
    text = (ROOT / doc).read_text()
    found = []
    for match in _BLOCK.finditer(text):
        if match.group(1) == language:
            line = text[: match.start()].count("\n") + 1
            found.append((f"{doc}:{line}", match.group(2)))
    return found


def curl_blocks(doc: str) -> list[tuple[str, str]]:
    """The bash blocks that only send requests to the gateway (not `make`, `pip` or `tandem` commands)."""
    return [
        (where, body)
        for where, body in blocks(doc, "bash")
        if all(line.startswith(("curl ", "#", " ")) or not line.strip() for line in body.splitlines())
    ]


PYTHON = blocks("README.md", "python") + blocks("docs/sdk.md", "python")
CURL = curl_blocks("README.md") + curl_blocks("docs/sdk.md")


@pytest.fixture(scope="module")
def stack(demo_checkpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("docs")
    policy = write_policy(work / "policy.yaml", free_port(), free_port())
    agent_port = free_port()
    s = start_local_stack(demo_checkpoint, policy, work, free_port(), local_agent_port=agent_port)
    yield s, f"http://127.0.0.1:{agent_port}"
    s.stop()


def at_stack(code: str, url: str, agent: str) -> str:
    code = code.replace(DOCS_URL, url)
    # The SDK finds the local agent at its default address; this stack's agent is elsewhere.
    return re.sub(r"\b(Async)?Client\(", lambda m: f'{m.group(0)}local_agent_url="{agent}", gateway_url=', code)


def test_the_docs_have_examples_to_run():
    assert len(PYTHON) >= 5 and len(CURL) >= 3, (PYTHON, CURL)


@pytest.mark.parametrize(("where", "code"), PYTHON, ids=[w for w, _ in PYTHON])
def test_a_python_example_runs_as_pasted(stack, where, code):
    s, agent = stack
    run = subprocess.run(
        [sys.executable, "-c", at_stack(code, s.url, agent)], capture_output=True, text=True, timeout=180, cwd=ROOT
    )
    assert run.returncode == 0, f"{where}:\n{run.stderr[-3000:]}"
    if "served_by" in code and "local-agent" in code:  # the doc's comment: the local agent answered
        assert "local-agent" in run.stdout, f"{where}: {run.stdout}"


@pytest.mark.parametrize(("where", "script"), CURL, ids=[w for w, _ in CURL])
def test_a_curl_example_gets_what_its_comment_says(stack, where, script):
    s, _ = stack
    run = subprocess.run(
        ["bash", "-c", script.replace(DOCS_URL, s.url)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert run.returncode == 0, f"{where}: {run.stderr}"
    statuses = re.findall(r"^HTTP/1\.1 (\d+)", run.stdout, re.M)
    assert all(status == "200" for status in statuses), f"{where}: {run.stdout[-2000:]}"
    assert '"error"' not in run.stdout, f"{where}: {run.stdout[-2000:]}"
    said = _ROUTE_SAID.findall(script)
    got = re.findall(r"^x-tandem-route: (.+?)\r?$", run.stdout, re.M | re.I)
    assert got[: len(said)] == said, f"{where}: the doc says {said}, the gateway said {got}"
