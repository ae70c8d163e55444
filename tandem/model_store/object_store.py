"""The object-store tier: S3-compatible, through boto3's transfer manager; and `tandem model push`."""

import os
import sys
from pathlib import Path

from tandem.model_store.manifest import Manifest, file_stamp
from tandem.model_store.progress import Progress
from tandem.model_store.reference import HASH_CHUNK, PART_BYTES, ModelRef, StoreError, whole_number_from_env


class ObjectStore:
    """S3-compatible object store through boto3; the endpoint and credentials come from the AWS_* variables."""

    def __init__(
        self, endpoint_url: str | None = None, max_workers: int | None = None, part_bytes: int = PART_BYTES
    ) -> None:
        import boto3
        from botocore.config import Config

        max_workers = max_workers or whole_number_from_env("TANDEM_MODEL_FETCH_STREAMS", "a whole number", 1, "8") or 8
        assert max_workers >= 1, max_workers
        self.max_workers, self.part_bytes = max_workers, part_bytes
        # An endpoint that takes the connection and never answers: boto3's own 60 s a read, 5 tries, was six silent
        # minutes before a word (a review); a read that waits this long is a failure, tried again twice.
        config = Config(
            max_pool_connections=max_workers * 2,
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=10,
            read_timeout=STALL_S,
        )
        self._s3 = boto3.client(
            "s3",
            endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None,
            region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            config=config,
        )

    def get_bytes(self, bucket: str, key: str) -> bytes:
        try:
            return self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:  # noqa: BLE001 - botocore raises many kinds; all mean "cannot read it"
            raise StoreError(f"s3://{bucket}/{key}: {_describe(exc)}") from exc

    def size_of(self, bucket: str, key: str) -> int | None:
        """The object's size; None where it is absent (or cannot be read: either way, write it)."""
        try:
            return int(self._s3.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except Exception:  # noqa: BLE001 - absent, or unreadable: either way, write it
            return None

    def download(self, bucket: str, key: str, size: int, dest: Path, progress: Progress) -> None:
        """One object to `dest`, through boto3's transfer manager: ranged GETs in parallel, retried, and the
        size checked.

        Parts are at least `part_bytes` and at most one per worker: enough streams to fill the link, and few
        requests (some S3-compatible servers pay for the whole object on every ranged GET).
        """
        from boto3.s3.transfer import TransferConfig

        part_bytes = max(self.part_bytes, -(-size // self.max_workers))
        config = TransferConfig(
            multipart_threshold=part_bytes + 1 if size <= part_bytes else part_bytes,  # one part: a plain GET
            multipart_chunksize=part_bytes,
            max_concurrency=self.max_workers,
            io_chunksize=HASH_CHUNK,
        )
        try:
            self._s3.download_file(bucket, key, str(dest), Config=config, Callback=progress.add)
        except Exception as exc:  # noqa: BLE001 - botocore and s3transfer raise many kinds; all mean "cannot read it"
            raise StoreError(f"s3://{bucket}/{key}: {_describe(exc)}") from exc
        got = dest.stat().st_size
        if got != size:
            raise StoreError(f"s3://{bucket}/{key}: {got} bytes, the manifest says {size}")

    def put_file(self, bucket: str, key: str, path: Path, progress: Progress | None = None) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_chunksize=self.part_bytes, max_concurrency=self.max_workers)
        try:
            self._s3.upload_file(str(path), bucket, key, Config=config, Callback=progress.add if progress else None)
        except Exception as exc:  # noqa: BLE001 - a missing bucket, no credentials, no endpoint: "cannot write it"
            raise StoreError(f"s3://{bucket}/{key}: {_describe(exc)}") from exc

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        try:
            self._s3.put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as exc:  # noqa: BLE001 - as put_file's (a review: each was a traceback)
            raise StoreError(f"s3://{bucket}/{key}: {_describe(exc)}") from exc


STALL_S = 30  # an object store that sends nothing for this long is failing (each read, each try)


def _describe(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response["Error"]
        return f"{error.get('Code')}: {error.get('Message') or 'no message'}"
    return str(exc) or type(exc).__name__


def push(directory: Path, address: str, store: ObjectStore | None = None) -> ModelRef:
    """Upload a checkpoint directory (blobs not already there, then its manifest); return the pinned reference."""
    ref = ModelRef.parse(address)
    if ref is None or ref.digest:
        raise StoreError(f"{address!r}: push to an unpinned s3://bucket/path/to/model address")
    store = store or ObjectStore()
    print(f"hashing {directory}", file=sys.stderr)
    stamps: dict[str, tuple[int, int]] = {}
    manifest = Manifest.of_directory(directory, stamps)
    # A blob there already is skipped only at its size (one left by a push of other bytes is written again)
    sending = [f for f in manifest.files if store.size_of(ref.bucket, ref.key("blobs", f"sha256-{f.sha256}")) != f.size]
    progress = Progress(f"{len(sending)} of {len(manifest.files)} files to {ref}", sum(f.size for f in sending), None,
                        ("uploading", "uploaded"))  # fmt: skip
    for f in sending:
        store.put_file(ref.bucket, ref.key("blobs", f"sha256-{f.sha256}"), directory / f.path, progress)
    for f in manifest.files:  # each file as it was hashed: one written meanwhile sent other bytes than its hash
        if file_stamp(directory / f.path) != stamps[f.path]:
            raise StoreError(
                f"{directory / f.path} changed while it was pushed (is something still writing the checkpoint?); "
                "push again once it is finished: nothing points at what was sent"
            )
    progress.finish()
    store.put_bytes(ref.bucket, ref.key("manifests", f"sha256-{manifest.digest}.json"), manifest.to_json())
    store.put_bytes(ref.bucket, ref.key("manifests", "latest"), manifest.digest.encode())
    return ref.pinned(manifest.digest)
