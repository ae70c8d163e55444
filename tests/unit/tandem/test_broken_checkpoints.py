"""A checkpoint folder damaged or written by hand: every command that reads one says what is wrong in one line,
naming the file (a review found tracebacks in `edge export`, `policy explain`, `cloud-worker` and the gateway's start,
and a layer count of 1e9 that allocated until the process was killed)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modeling.loader import read_config
from modeling.model_config import CheckpointError
from serving.openai.chat_tokenizer import ChatTokenizer
from tandem.demo_model import demo_is_whole


def damaged(demo: Path, out: Path, file: str, content: bytes | None) -> Path:
    shutil.copytree(demo, out)
    if content is None:
        (out / file).unlink()
    else:
        (out / file).write_bytes(content)
    return out


def with_config(demo: Path, out: Path, **changes) -> Path:
    config = json.loads((demo / "config.json").read_text()) | changes
    return damaged(demo, out, "config.json", json.dumps({k: v for k, v in config.items() if v != "-"}).encode())


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"num_hidden_layers": 10**9}, "num_hidden_layers is 1000000000; a whole number from 1 to 1024"),
        ({"num_hidden_layers": "2"}, "num_hidden_layers is '2'"),
        ({"hidden_size": -64}, "hidden_size is -64"),
        ({"vocab_size": 1.5}, "vocab_size is 1.5"),
        ({"vocab_size": "-"}, "has no vocab_size"),
        ({"rms_norm_eps": float("nan")}, "rms_norm_eps is nan"),
        ({"num_key_value_heads": 3}, "no multiple of num_key_value_heads 3"),
    ],
)
def test_a_config_out_of_shape_is_named(demo_checkpoint, tmp_path, changes, said):
    path = with_config(demo_checkpoint, tmp_path / "m", **changes)
    with pytest.raises(CheckpointError, match="config.json") as refused:
        read_config(path)
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("file", "content", "said"),
    [
        ("config.json", b"[1, 2]", "config.json: a JSON object, not list"),
        ("config.json", b"{broken", "config.json: not valid JSON"),
        ("tokenizer.json", b"{broken", "tokenizer.json: not a tokenizer"),
        ("tokenizer.json", None, "no tokenizer.json"),
        ("tokenizer_config.json", b"{", "tokenizer_config.json: not valid JSON"),
        ("tokenizer_config.json", b'{"chat_template": "{% for %}"}', "not valid Jinja"),
        ("tokenizer_config.json", b'{"chat_template": 5}', "chat_template is no text"),
        ("generation_config.json", b"[]", "generation_config.json: a JSON object"),
    ],
)
def test_what_the_gateway_reads_of_a_checkpoint_is_named_where_it_is_damaged(demo_checkpoint, tmp_path, file, content,
                                                                             said):  # fmt: skip
    path = damaged(demo_checkpoint, tmp_path / "m", file, content)
    with pytest.raises(CheckpointError, match=said):
        ChatTokenizer(path)


def one_line_error(*command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tandem.cli", *command], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def test_edge_export_and_policy_explain_say_it_in_one_line(demo_checkpoint, tmp_path):
    broken = with_config(demo_checkpoint, tmp_path / "m", num_hidden_layers=10**9)
    assert "num_hidden_layers" in one_line_error("edge", "export", str(broken), str(tmp_path / "out"))
    untokenized = damaged(demo_checkpoint, tmp_path / "t", "tokenizer.json", b"{broken")
    policy = Path(__file__).parents[3] / "policies" / "default.yaml"
    said = one_line_error("policy", "explain", str(policy), "--model", str(untokenized), "--message", "hi")
    assert "tokenizer.json" in said


def test_a_damaged_demo_is_built_again_not_kept(demo_checkpoint, tmp_path):
    """`tandem model demo` said it had written the demo, and kept one whose weights were cut short."""
    demo = damaged(demo_checkpoint, tmp_path / "demo", "model.safetensors",
                   (demo_checkpoint / "model.safetensors").read_bytes()[:1000])  # fmt: skip
    (demo / "config.json").write_text("{broken")
    assert not demo_is_whole(demo) and demo_is_whole(demo_checkpoint)
    done = subprocess.run([sys.executable, "-m", "tandem.cli", "model", "demo", str(demo)], capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert demo_is_whole(demo)
    assert (demo / "model.safetensors").read_bytes() == (demo_checkpoint / "model.safetensors").read_bytes()


def test_the_edge_agent_says_what_it_cannot_read_or_write_in_one_line(demo_checkpoint, tmp_path):
    """A damaged checkpoint, or an export cache it cannot write (full, read-only, under a file), ended the agent
    with a traceback of 120 lines that did not name the folder (a review)."""
    broken = damaged(demo_checkpoint, tmp_path / "m", "config.json", b"{")
    (tmp_path / "a-file").write_text("")
    for model, cache in ((broken, tmp_path / "cache"), (demo_checkpoint, tmp_path / "a-file" / "cache")):
        done = subprocess.run([sys.executable, "-m", "tandem.cli", "edge-agent", "--model", str(model), "--cache-dir",
                               str(cache), "--port", "1", "--log-level", "warning"],
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ") and ("config.json" in last or "a-file" in last), done.stderr
