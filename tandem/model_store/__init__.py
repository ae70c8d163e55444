"""Tiered model store: a model reference becomes a local checkpoint directory.

A reference is a local directory (used as it is) or an object-store address:

    s3://bucket/models/llama-3-8b@sha256:<manifest digest>   pinned
    s3://bucket/models/llama-3-8b                            the version last pushed (logged as unpinned)
    demo://tandem-demo                                       the deterministic demo checkpoint, built here once

It resolves through three tiers, fastest first:

1. the node-local cache (`TANDEM_MODEL_CACHE_DIR`: an NVMe or RAM-disk directory), one directory per
   manifest digest, bounded in size (`TANDEM_MODEL_CACHE_MAX_BYTES`) by evicting the least recently used
   entry that no running process holds;
2. a shared file system (`TANDEM_MODEL_SHARED_DIR`, e.g. NFS) laid out like the cache, copied from;
3. the object store (S3-compatible; `AWS_ENDPOINT_URL` for MinIO, Ceph, R2 …), read with parallel ranged GETs.

Under the model's prefix the object store holds `manifests/sha256-<digest>.json` (every file's path, size and
SHA-256; the digest is the SHA-256 of that JSON), `manifests/latest` (the digest last pushed) and
`blobs/sha256-<file hash>`. `tandem model push` writes them.

Every install is checked against the manifest, built in a temporary directory and renamed into place, under
an exclusive lock per digest: several workers on one node download once, and none sees half a model. A cache
hit checks each file's size and modification time against what was installed (a changed file is re-fetched);
`verify="full"` re-hashes everything. Processes that serve a model hold a shared lock on its entry, so eviction
never removes a model in use.
"""

from tandem.model_store.cache import ModelStore
from tandem.model_store.manifest import FileEntry, Manifest, file_sha256
from tandem.model_store.object_store import ObjectStore, push
from tandem.model_store.progress import Progress
from tandem.model_store.reference import TOKENIZER_FILES, ModelRef, StoreError, checked_digest, checked_name, file_in

__all__ = [
    "TOKENIZER_FILES", "FileEntry", "Manifest", "ModelRef", "ModelStore", "ObjectStore", "Progress", "StoreError",
    "checked_digest", "checked_name", "file_in", "file_sha256", "push",
]  # fmt: skip
