"""Model references and manifests: parsing, digests, and the demo model's reference."""

import pytest

from tandem.model_store import FileEntry, Manifest, ModelRef, ModelStore, StoreError

DIGEST = "ab" * 32


def test_references_parse_and_print_back():
    ref = ModelRef.parse(f"s3://models/team/llama@sha256:{DIGEST}")
    assert (ref.bucket, ref.prefix, ref.digest) == ("models", "team/llama", DIGEST)
    assert str(ref) == f"s3://models/team/llama@sha256:{DIGEST}"
    assert ModelRef.parse("s3://models/llama").digest is None
    assert ModelRef.parse("/data/llama") is None  # a local directory


@pytest.mark.parametrize(
    "bad",
    ["s3://models", "s3:///llama", f"s3://m/l@md5:{DIGEST}", "s3://m/l@sha256:abc", f"s3://m/l@sha256:{'AB' * 32}"],
)
def test_bad_references_say_what_is_expected(bad):
    with pytest.raises(StoreError, match="s3://bucket/path/to/model|@sha256:<64 lowercase hex digits>"):
        ModelRef.parse(bad)


def test_the_digest_depends_on_content_not_on_file_order():
    a, b = FileEntry("a.json", 3, "1" * 64), FileEntry("b.bin", 5, "2" * 64)
    assert Manifest((a, b)).digest == Manifest((b, a)).digest
    assert Manifest((a, b)).digest != Manifest((a, FileEntry("b.bin", 5, "3" * 64))).digest
    assert Manifest.from_json(Manifest((a, b)).to_json(), "x").digest == Manifest((a, b)).digest


def test_a_manifest_cannot_write_outside_its_directory():
    evil = b'{"format": 1, "files": [{"path": "../../etc/cron.d/x", "size": 1, "sha256": "00"}]}'
    with pytest.raises(StoreError, match="unsafe path"):
        Manifest.from_json(evil, "s3://m/x")


def test_the_demo_reference_builds_one_checkpoint(tmp_path):
    store = ModelStore(tmp_path)
    first = store.resolve("demo://tandem-demo")
    assert (first / "config.json").is_file() and first.name == "tandem-demo"  # the model id clients send
    assert store.resolve("demo://tandem-demo") == first
    with pytest.raises(StoreError, match="demo://tandem-demo"):
        store.resolve("demo://other")
