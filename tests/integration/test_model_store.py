"""The tiered model store against a real S3-compatible server on loopback (moto in server mode).

Everything goes through the `tandem model` CLI and real processes, as a cache warmer or worker would.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import httpx
import pytest

from tandem.model_store import FileEntry, Manifest, ModelStore, ObjectStore, StoreError, push
from tests.conftest import free_port
from tests.stack import start_worker_process

pytestmark = pytest.mark.integration
BUCKET = "models"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server; yields the environment that points boto3 (and so Tandem) at it."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            assert process.poll() is None and time.monotonic() < deadline, "moto server did not start"
            time.sleep(0.1)
    env = {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    ).create_bucket(Bucket=BUCKET)
    yield env
    process.terminate()
    process.wait(timeout=10)


def tandem(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "tandem.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def ref(s3, demo_checkpoint):
    pushed = tandem("model", "push", str(demo_checkpoint), f"s3://{BUCKET}/demo/tandem-demo", env=s3)
    reference = pushed.stdout.strip()
    assert reference.startswith(f"s3://{BUCKET}/demo/tandem-demo@sha256:")
    return reference


def fetch(ref: str, cache: Path, env: dict[str, str], *extra: str, check: bool = True):
    return tandem("model", "fetch", ref, "--cache-dir", str(cache), *extra, env=env, check=check)


def same_files(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir() if not p.name.startswith("."))
    return names == sorted(p.name for p in b.iterdir() if not p.name.startswith(".")) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )


def test_cold_fetch_then_warm_hit_without_the_object_store(s3, ref, demo_checkpoint, tmp_path):
    cold = fetch(ref, tmp_path, s3)
    path = Path(cold.stdout.strip())
    assert same_files(path, demo_checkpoint)
    assert "fetched s3://" in cold.stderr and "MB/s" in cold.stderr  # progress is shown
    offline = s3 | {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}  # nothing listens there
    warm = fetch(ref, tmp_path, offline)
    assert Path(warm.stdout.strip()) == path
    assert "fetch" not in warm.stderr  # served from the node-local cache


def test_the_latest_push_resolves_an_unpinned_reference(s3, ref, tmp_path):
    unpinned = ref.split("@")[0]
    out = fetch(unpinned, tmp_path, s3)
    assert Path(out.stdout.strip()).name == "sha256-" + ref.split("sha256:")[1]
    assert "not pinned" in out.stderr


def test_a_corrupted_cache_entry_is_detected_and_fetched_again(s3, ref, demo_checkpoint, tmp_path):
    path = Path(fetch(ref, tmp_path, s3).stdout.strip())
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    again = fetch(ref, tmp_path, s3)
    assert "unusable" in again.stderr and "changed after it was installed" in again.stderr
    assert same_files(Path(again.stdout.strip()), demo_checkpoint)


def test_full_verification_catches_what_the_stamp_cannot(s3, ref, tmp_path):
    path = Path(fetch(ref, tmp_path, s3).stdout.strip())
    weights = path / "model.safetensors"
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[100] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same time: only a hash tells
    assert "unusable" not in fetch(ref, tmp_path, s3).stderr
    assert "fails its SHA-256 check" in fetch(ref, tmp_path, s3, "--verify", "full").stderr


def test_concurrent_loaders_on_one_node_download_once(s3, ref, demo_checkpoint, tmp_path):
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: fetch(ref, tmp_path, s3), range(4)))
    paths = {r.stdout.strip() for r in results}
    assert len(paths) == 1
    assert sum("fetched s3://" in r.stderr for r in results) == 1  # the others waited for it
    assert same_files(Path(paths.pop()), demo_checkpoint)
    assert not list(tmp_path.glob(".tmp-*"))


def test_the_shared_file_system_tier_serves_a_node_with_no_object_store(s3, ref, demo_checkpoint, tmp_path):
    shared = tmp_path / "shared"
    fetch(ref, shared, s3)  # an operator fills the shared directory once
    offline = s3 | {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}", "TANDEM_MODEL_SHARED_DIR": str(shared)}
    out = fetch(ref, tmp_path / "local", offline)
    assert "from the shared file system" in out.stderr
    assert same_files(Path(out.stdout.strip()), demo_checkpoint)


def test_the_cache_is_bounded_and_evicts_the_least_recently_used(s3, ref, demo_checkpoint, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    for f in demo_checkpoint.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    (other / "README.md").write_text("a second model: same weights, one more file\n")
    other_ref = tandem("model", "push", str(other), f"s3://{BUCKET}/demo/other", env=s3).stdout.strip()
    size = sum(f.stat().st_size for f in demo_checkpoint.iterdir())
    bounded = s3 | {"TANDEM_MODEL_CACHE_MAX_BYTES": str(int(size * 1.5))}  # room for one model
    cache = tmp_path / "cache"
    first = Path(fetch(ref, cache, bounded).stdout.strip())
    second = Path(fetch(other_ref, cache, bounded).stdout.strip())
    assert second.is_dir() and not first.exists()
    assert "evicted" in fetch(ref, cache, bounded).stderr  # back again: now the other one goes


def test_a_running_worker_holds_its_model_against_eviction(s3, ref, demo_checkpoint, tmp_path):
    cache = tmp_path / "cache"
    env = s3 | {"TANDEM_MODEL_CACHE_DIR": str(cache), "TANDEM_MODEL_CACHE_MAX_BYTES": "1"}
    worker = start_worker_process(["cloud-worker", "--model", ref, "--port", str(free_port())], env)
    try:
        path = cache / ("sha256-" + ref.split("sha256:")[1])
        assert path.is_dir()
        other = tmp_path / "other"
        other.mkdir()
        (other / "config.json").write_text("{}")
        other_ref = tandem("model", "push", str(other), f"s3://{BUCKET}/demo/tiny", env=s3).stdout.strip()
        out = fetch(other_ref, cache, env)  # over the 1-byte bound: evict what it can
        assert path.is_dir() and "the rest is in use" in out.stderr
    finally:
        worker.terminate()
        worker.wait(timeout=15)


def test_bad_references_get_clear_errors(s3, ref, tmp_path):
    missing = ref[:-8] + "00000000"
    out = fetch(missing, tmp_path, s3, check=False)
    assert out.returncode == 1 and "NoSuchKey" in out.stderr and "Traceback" not in out.stderr
    out = fetch(f"s3://{BUCKET}/demo/tandem-demo@md5:abc", tmp_path, s3, check=False)
    assert out.returncode == 1 and "@sha256:<64 lowercase hex digits>" in out.stderr
    worker = tandem("cloud-worker", "--model", "s3://nobucket", "--port", str(free_port()), env=s3, check=False)
    message = " ".join(re.sub("[│╭╮╰╯─]", " ", worker.stderr).split())  # typer draws a box around it
    assert worker.returncode == 2 and "'s3://nobucket': expected s3://bucket/path/to/model" in message


# -- hostile values from the object store -------------------------------------------------------------------------

HOSTILE_LATEST = [
    pytest.param(b"../../etc", id="dot-dot"),
    pytest.param(b"sha256-abc", id="prefixed-short"),
    pytest.param(b"a" * 63, id="63-hex"),
    pytest.param(b"a" * 65, id="65-hex"),
    pytest.param(b"AB" * 32, id="uppercase"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff" * 64, id="not-utf8"),
]

HOSTILE_NAMES = [
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param("../x", id="dot-dot"),
    pytest.param("a/../../x", id="dot-dot-inside"),
    pytest.param("C:\\x", id="windows-drive"),
    pytest.param("a\\..\\x", id="backslashes"),
    pytest.param("", id="empty"),
    pytest.param("a\0b", id="nul"),
]


@pytest.fixture
def s3_client(s3):
    return boto3.client(
        "s3",
        endpoint_url=s3["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


@pytest.fixture
def store(s3, monkeypatch, tmp_path):
    """A model store in this process against the moto server, its cache three levels inside tmp_path (so a path
    that climbs out of the cache would still land, and be seen, in tmp_path)."""
    for name, value in s3.items():
        monkeypatch.setenv(name, value)
    return ModelStore(tmp_path / "node" / "models" / "cache")


def written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


@pytest.mark.parametrize("latest", HOSTILE_LATEST)
def test_a_latest_object_that_is_not_a_digest_is_refused(s3_client, store, tmp_path, request, latest):
    prefix = f"hostile/latest/{request.node.callspec.id}"
    s3_client.put_object(Bucket=BUCKET, Key=f"{prefix}/manifests/latest", Body=latest)
    with pytest.raises(StoreError, match=rf"^s3://{BUCKET}/{prefix}/manifests/latest holds .*, not a sha256 digest"):
        store.resolve(f"s3://{BUCKET}/{prefix}")
    assert written(tmp_path) == []  # refused before anything touched the disk


def test_a_latest_object_with_a_trailing_newline_resolves(s3_client, store, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    pinned = push(model, f"s3://{BUCKET}/hostile/newline", ObjectStore())
    s3_client.put_object(Bucket=BUCKET, Key="hostile/newline/manifests/latest", Body=f" {pinned.digest}\r\n".encode())
    assert store.resolve(f"s3://{BUCKET}/hostile/newline").name == f"sha256-{pinned.digest}"


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_manifest_listing_an_unsafe_path_writes_nothing(s3_client, store, tmp_path, request, name):
    prefix = f"hostile/names/{request.node.callspec.id}"
    payload = b"written by a hostile manifest"
    blob = hashlib.sha256(payload).hexdigest()
    s3_client.put_object(Bucket=BUCKET, Key=f"{prefix}/blobs/sha256-{blob}", Body=payload)
    manifest = Manifest((FileEntry(name, len(payload), blob),)).to_json()  # built unchecked, as an attacker would
    digest = hashlib.sha256(manifest).hexdigest()
    key = f"{prefix}/manifests/sha256-{digest}.json"
    s3_client.put_object(Bucket=BUCKET, Key=key, Body=manifest)
    s3_client.put_object(Bucket=BUCKET, Key=f"{prefix}/manifests/latest", Body=digest.encode())
    for reference in (f"s3://{BUCKET}/{prefix}@sha256:{digest}", f"s3://{BUCKET}/{prefix}"):
        with pytest.raises(StoreError, match=rf"^s3://{BUCKET}/{re.escape(key)}: unsafe path .* in the manifest"):
            store.resolve(reference)
        assert written(tmp_path) == [f"node/models/cache/sha256-{digest}.lock"]  # no file, no entry, no temporary


def test_the_cli_refuses_a_hostile_latest_object_cleanly(s3, s3_client, tmp_path):
    s3_client.put_object(Bucket=BUCKET, Key="hostile/cli/manifests/latest", Body=b"../../etc\n")
    out = fetch(f"s3://{BUCKET}/hostile/cli", tmp_path / "cache", s3, check=False)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"s3://{BUCKET}/hostile/cli/manifests/latest holds '../../etc\\n', not a sha256 digest" in out.stderr
    assert written(tmp_path) == []


# -- what killed processes leave behind ----------------------------------------------------------------------------


def test_trash_and_temporaries_a_killed_fetch_left_are_swept_and_block_nothing(s3, ref, demo_checkpoint, tmp_path):
    """A fetch killed between moving a damaged entry aside and deleting it left `.trash-ENTRY-1`; in a container
    (PID 1 every start) the next replacement tried that same name and failed, on every start after."""
    cache = tmp_path / "cache"
    path = Path(fetch(ref, cache, s3).stdout.strip())
    for leftover in (f".trash-{path.name}-1", f".trash-{path.name}@1-5-abcdef01", f".tmp-{path.name}@1-5"):
        (cache / leftover).mkdir()
        (cache / leftover / "model.safetensors").write_bytes(b"half")
    os.utime(path / "config.json")  # touched: the entry must be replaced
    again = fetch(ref, cache, s3)
    assert "unusable" in again.stderr and same_files(Path(again.stdout.strip()), demo_checkpoint)
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith(".")) == []  # PID 1 here is not the same one


def test_a_damaged_entry_another_process_holds_is_a_clear_error_not_a_silent_wait(store, ref, monkeypatch, caplog):
    """A worker holds its model for its life; a fetch that found the entry damaged waited for it, forever, silently."""
    import tandem.model_store.cache as cache_module

    monkeypatch.setattr(cache_module, "REPLACE_WAIT_S", 1.0)
    path = store.resolve(ref)  # held, as a running worker holds it
    os.utime(path / "config.json")
    second = ModelStore(store.cache_dir)
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"is unusable \(config.json changed after it was installed\) and in use"):
        second.resolve(ref)
    assert time.monotonic() - started < 10
    assert "waiting (at most 1 s)" in caplog.text
    store.release()  # the holder stops: now it is replaced
    assert same_files(second.resolve(ref), path) and second._check(path) is None


@pytest.mark.parametrize("trouble", ["no-bucket", "no-endpoint"])
def test_a_push_that_cannot_write_says_so_in_one_line(s3, demo_checkpoint, trouble):
    """(a review) A missing bucket, an endpoint nobody answers at, missing credentials: each was a traceback."""
    env, address = s3, "s3://no-such-bucket/models/demo"
    if trouble == "no-endpoint":
        env, address = s3 | {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}, f"s3://{BUCKET}/models/demo"
    done = tandem("model", "push", str(demo_checkpoint), address, env=env, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: s3://"), done.stderr


def test_an_s3_model_is_served_by_its_references_name_by_the_gateway_and_the_worker_alike(s3, ref, tmp_path):
    """Cached under its digest (the gateway's tokenizer-only fetch under the digest and a hash of its files), the
    model was `sha256-…` to the worker and `sha256-…-b71b1ad2` to the gateway: every request a 503, no gateway ever
    ready, `model: tandem-demo` a 404 (a review of the manifests). Both serve the reference's name now."""
    from tests.stack import write_policy

    cloud_port, edge_port, gateway_port = free_port(), free_port(), free_port()
    env = s3 | {"TANDEM_MODEL_CACHE_DIR": str(tmp_path / "worker-cache")}
    worker = start_worker_process(["cloud-worker", "--model", ref, "--port", str(cloud_port)], env)
    policy = write_policy(tmp_path / "policy.yaml", cloud_port, edge_port)
    gateway_env = {**os.environ, **s3, "TANDEM_MODEL_CACHE_DIR": str(tmp_path / "gateway-cache"), "TANDEM_AUTH": "none",
                   "TANDEM_POLICY_FILE": str(policy)}  # fmt: skip
    gateway_env.pop("TANDEM_MODEL_ID", None)
    gateway = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "gateway", "--model", ref, "--port", str(gateway_port)],
        env=gateway_env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{gateway_port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert gateway.poll() is None and time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.2)
        assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == ["tandem-demo"]
        body = {"model": "tandem-demo", "max_tokens": 2, "messages": [{"role": "user", "content": "hi " * 300}]}
        answered = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Tandem-Device": "{}"}, timeout=30)
        assert answered.status_code == 200 and answered.headers["x-tandem-route"].startswith("cloud"), answered.text
    finally:
        for process in (gateway, worker):
            process.terminate()
            process.wait(timeout=15)


def test_a_gateways_tokenizer_fetch_brings_the_chat_template_files(s3, store, demo_checkpoint, tmp_path):
    """(a review) A checkpoint saved today keeps its template in chat_template.jinja (and others in
    additional_chat_templates/): the gateway's `--model s3://…` fetched the tokenizer files alone, and every chat
    request was a 400 "no chat template" (or rendered with an older template the config still held)."""
    from serving.openai.chat_tokenizer import ChatTokenizer
    from tandem.model_store import TOKENIZER_FILES

    model = tmp_path / "saved-today"
    shutil.copytree(demo_checkpoint, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    (model / "additional_chat_templates").mkdir()
    (model / "additional_chat_templates" / "tool_use.jinja").write_text("{{ messages[0]['content'] }}")
    del config["chat_template"]
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    pinned = push(model, f"s3://{BUCKET}/today/model", ObjectStore())
    fetched = store.resolve(str(pinned), TOKENIZER_FILES)
    assert not (fetched / "model.safetensors").exists()  # the tokenizer's files only
    assert (fetched / "additional_chat_templates" / "tool_use.jinja").is_file()
    assert ChatTokenizer(fetched).render([{"role": "user", "content": "hi"}]) == "[hi]"


class WrittenMeanwhile(ObjectStore):
    """An object store whose first upload finds the checkpoint's weights written again since they were hashed (a
    training job still saving it): the moment a review placed a writer's last write."""

    def __init__(self, weights: Path) -> None:
        super().__init__()
        self.weights, self.uploads = weights, 0

    def put_file(self, bucket, key, path, progress=None):
        if self.uploads == 0:
            self.weights.write_bytes(self.weights.read_bytes()[::-1])
        self.uploads += 1
        super().put_file(bucket, key, path, progress)


def test_a_checkpoint_written_while_it_is_pushed_is_refused_and_a_wrong_blob_is_written_again(
    s3, s3_client, store, demo_checkpoint, tmp_path
):
    """(a review) Push hashed each file, then read it again to upload: a file written meanwhile was stored under the
    hash of other bytes, push said it was done, and its reference could never be fetched; pushing the right bytes
    again skipped that blob, as it was there. Now push refuses a file that changed, points nothing at what it sent,
    and writes again a blob whose size is not its file's; a fetch that finds wrong bytes names the object."""
    model = tmp_path / "model"
    shutil.copytree(demo_checkpoint, model)
    address = f"s3://{BUCKET}/meanwhile/model"
    with pytest.raises(StoreError, match="model.safetensors changed while it was pushed"):
        push(model, address, WrittenMeanwhile(model / "model.safetensors"))
    listed = s3_client.list_objects_v2(Bucket=BUCKET, Prefix="meanwhile/model/manifests/").get("Contents", [])
    assert listed == []  # no manifest, no latest: nothing points at the blob sent
    pinned = push(model, address, ObjectStore())  # nothing writes it now: pushed whole
    assert store.resolve(str(pinned)).is_dir()

    weights = model / "model.safetensors"
    blob = f"meanwhile/model/blobs/sha256-{hashlib.sha256(weights.read_bytes()).hexdigest()}"
    s3_client.put_object(Bucket=BUCKET, Key=blob, Body=b"cut short")  # a blob of the wrong size
    push(model, address, ObjectStore())
    assert s3_client.head_object(Bucket=BUCKET, Key=blob)["ContentLength"] == weights.stat().st_size
    s3_client.put_object(Bucket=BUCKET, Key=blob, Body=bytes(weights.stat().st_size))  # right size, wrong bytes
    with pytest.raises(StoreError, match=rf"model.safetensors does not hash to its manifest's sha256: s3://{BUCKET}/"
                                         rf"{re.escape(blob)} holds other bytes; delete that object"):  # fmt: skip
        ModelStore(tmp_path / "another-cache").resolve(str(pinned))
