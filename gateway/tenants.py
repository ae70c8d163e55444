"""Tenants: who a request is from (by API key) and what it may use.

Keys are kept only as SHA-256 hashes (`tandem keys new` prints a key and its
hash). The tenants file (TANDEM_TENANTS_FILE):

    default_limits: {requests_per_minute: 600}
    tenants:
      acme:
        keys: [sha256:9f86d081884c7d65…]
        requests_per_minute: 120
        tokens_per_minute: 50000
        max_concurrent: 4
        max_priority: 5     # a request's `priority` above this is clamped (default 0)

TANDEM_API_KEYS (`[tenant:]key,…`, plaintext, hashed on load) suits a laptop.
The gateway refuses to start without keys unless TANDEM_AUTH=none says, in
so many words, that it is open (the tenant then comes from X-Tandem-Tenant,
default "default"). Each tenant's prefix hashes are salted with an HMAC of
its name under TANDEM_CACHE_SALT_SECRET.
"""

import asyncio
import hashlib
import logging
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from gateway import metrics
from gateway.policy.loader import PolicyError, line_of, parse_yaml, read_policy_text
from gateway.policy.reloader import digest, settled_text, watch_file
from proto.prefix_hash import tenant_salt

log = logging.getLogger(__name__)
HASH_PREFIX = "sha256:"
_HASHED = re.compile(r"sha256:[0-9a-f]{64}", re.IGNORECASE)


def is_header_token(text: str) -> bool:
    """Whether a bearer header can carry `text`: printable ASCII without spaces, not empty."""
    return bool(text) and text.isascii() and text.isprintable() and " " not in text


# What X-Tandem-Tenant may say (auth: none): a caller's own word, a label of every metric and a key in Redis
_TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TENANT_NAME_RULE = "a tenant's name is 1-64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"
# What an operator may name a tenant (the tenants file, TANDEM_API_KEYS): any text a log line, a metric's label and a
# Redis key carry whole. Looser than the header's: names such as `acme@corp` or `team/ml` served before this was
# checked, and renaming a tenant changes its cache salt, its Redis buckets and its metrics (a review).
MAX_TENANT_NAME = 256
TENANT_NAME_WRITTEN = f"a tenant's name is 1-{MAX_TENANT_NAME} printable characters, no blank at either end"


def is_tenant_name(name: object) -> bool:
    """A name X-Tandem-Tenant may give (TENANT_NAME_RULE)."""
    return isinstance(name, str) and _TENANT_NAME.fullmatch(name) is not None


def tenant_name_problem(name: object) -> str | None:
    """What is wrong with a tenant's name an operator wrote (TENANT_NAME_WRITTEN), or None."""
    if not isinstance(name, str):
        shown = "true or false" if isinstance(name, bool) else "nothing" if name is None else "a number"
        return f"{name!r}: YAML reads this name as {shown}; write it in quotes ('{name}')"
    if not (0 < len(name) <= MAX_TENANT_NAME and name.isprintable() and name == name.strip()):
        return f"{name!r}: {TENANT_NAME_WRITTEN}"
    return None


def hash_key(key: str) -> str:
    return HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return "tdm-" + secrets.token_urlsafe(32)


class TenantsError(ValueError):
    """The tenants configuration cannot be used; the message says where and why."""


DEFAULT_MAX_PRIORITY = 0  # a request asking for more runs at this, unless the tenants file grants more


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    max_concurrent: int | None = Field(default=None, ge=1)
    max_priority: int | None = Field(
        default=None, ge=-(2**31), lt=2**31, description=f"highest priority honoured (default {DEFAULT_MAX_PRIORITY})"
    )


class TenantConfig(Limits):
    keys: list[str] = []

    @field_validator("keys")
    @classmethod
    def _hashed(cls, keys: list[str]) -> list[str]:
        for key in keys:
            digest = key.removeprefix(HASH_PREFIX)
            if not key.startswith(HASH_PREFIX) or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
                raise ValueError("keys are stored hashed: 'sha256:<64 hex digits>' (`tandem keys hash KEY` prints one)")
        return keys


class TenantsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default_limits: Limits = Limits()
    tenants: dict[str, TenantConfig] = {}
    _sha256: str | None = PrivateAttr(default=None)  # of the text it was read from (None: no file)

    @field_validator("tenants", mode="before")
    @classmethod
    def _named(cls, tenants: object) -> object:
        if isinstance(tenants, dict):  # (`true:` and `123:` are no names; a line break in one breaks every log line)
            for name in tenants:
                if problem := tenant_name_problem(name):
                    raise ValueError(problem)
        return tenants


class Tenants:
    def __init__(self, config: TenantsFile, salt_secret: bytes | None = None) -> None:
        self._config, self._by_hash = config, _by_hash(config)
        if salt_secret is None:
            log.warning("TANDEM_CACHE_SALT_SECRET is not set: prefix-cache salts are random to this process")
        self._salt_secret = salt_secret or secrets.token_bytes(32)

    def cache_salt(self, tenant: str) -> str:
        """What salts the tenant's prefix hashes: an HMAC of its name under the server secret."""
        return tenant_salt(self._salt_secret, tenant)

    @classmethod
    def load(cls, path: Path | None, env_keys: list[str], salt_secret: bytes | None = None) -> "Tenants":
        return cls(read_tenants(path, env_keys), salt_secret)

    def serve(self, config: TenantsFile) -> None:
        """Serve `config` from now on (a reload): its keys, its tenants and their limits; the salt stays."""
        self._config, self._by_hash = config, _by_hash(config)

    @property
    def file_sha256(self) -> str | None:
        """The digest of the tenants file's text these tenants were read from."""
        return self._config._sha256

    @property
    def requires_key(self) -> bool:
        return bool(self._by_hash)

    def authenticate(self, presented_key: str) -> str | None:
        """The tenant whose key this is, or None.

        A dict lookup of the SHA-256 of the presented key: what is compared is a hash of
        the caller's own input, so its timing says nothing about the stored keys.
        """
        return self._by_hash.get(hash_key(presented_key))

    def allowed_priority(self, tenant: str, requested: int) -> int:
        """The priority a request runs at: what it asked for, clamped to its tenant's allowance."""
        allowance = self.limits(tenant).max_priority
        return min(requested, DEFAULT_MAX_PRIORITY if allowance is None else allowance)

    def limits(self, tenant: str) -> Limits:
        own = self._config.tenants.get(tenant)
        base = self._config.default_limits
        if own is None:
            return base
        return Limits(**{f: _first_set(getattr(own, f), getattr(base, f)) for f in Limits.model_fields})


def read_tenants(path: Path | None, env_keys: list[str]) -> TenantsFile:
    """The tenants file at `path` (none: no tenants) with TANDEM_API_KEYS' entries added; TenantsError names each
    problem and its line."""
    config = TenantsFile()
    if path is not None:
        root = None
        try:  # read as the policy is: no FIFO waited on, a key given twice refused, not the first one dropped
            text = _read_text(Path(path))
            root, raw = parse_yaml(text, str(path))
            listed = raw.get("tenants") if isinstance(raw, dict) else None
            for name in listed if isinstance(listed, dict) else ():  # named with the line each is on
                if problem := tenant_name_problem(name):
                    raise TenantsError(f"{path}:{line_of(root, ('tenants', name))}: tenants: {problem}")
            config = TenantsFile.model_validate(raw or {}, strict=True)  # `true` or '4' is no number (as the policy)
            config._sha256 = digest(text)
        except PolicyError as exc:
            raise TenantsError(str(exc)) from exc
        except ValidationError as exc:  # each problem on a line of its own, with the file's line where known
            raise TenantsError("\n".join(_said(path, root, error) for error in exc.errors())) from exc
    for entry in env_keys:
        # `tenant:key`, split at the first colon (a key may hold one); a key alone is the default tenant's
        tenant, sep, key = entry.partition(":")
        tenant, key = (tenant, key) if sep else ("default", tenant)
        if not key or not tenant:
            raise TenantsError(f"TANDEM_API_KEYS: an entry has an empty {'key' if not key else 'tenant'}")
        if problem := tenant_name_problem(tenant):
            raise TenantsError(f"TANDEM_API_KEYS: {problem}")
        if not is_header_token(key):
            raise TenantsError(
                f"TANDEM_API_KEYS: tenant {tenant!r}'s key is not printable ASCII (no bearer can carry it)"
            )
        if _HASHED.fullmatch(key) or _HASHED.fullmatch(entry):  # (a review: the hash itself became the key)
            raise TenantsError(
                f"TANDEM_API_KEYS: tenant {tenant!r} is given a key's hash, which belongs in the tenants file's keys; "
                "TANDEM_API_KEYS takes the key itself"
            )
        existing = config.tenants.get(tenant, TenantConfig())
        config.tenants[tenant] = existing.model_copy(update={"keys": [*existing.keys, hash_key(key)]})
    owners: dict[str, str] = {}
    for name, tenant in config.tenants.items():
        for key in tenant.keys:
            if owners.setdefault(key, name) != name:  # it would silently belong to whichever came last
                raise TenantsError(f"one API key is given to tenants {owners[key]!r} and {name!r}: a key names one")
    return config


def _by_hash(config: TenantsFile) -> dict[str, str]:
    return {key: name for name, tenant in config.tenants.items() for key in tenant.keys}


MAX_TENANTS_BYTES = 16 * 1024 * 1024  # tens of thousands of tenants (a policy's limit is 1 MiB)


def _said(path, root, error: dict) -> str:
    loc = tuple(error["loc"])
    line = line_of(root, loc)
    field = ".".join(str(part) for part in loc) or "(top level)"
    return f"{path}{f':{line}' if line else ''}: {field}: {error['msg'].removeprefix('Value error, ')}"


def _first_set(own, base):
    return base if own is None else own


class TenantsReloader:
    """TANDEM_TENANTS_FILE read again when it changes (TANDEM_WATCH_TENANTS), so a key removed there stops opening
    the gateway within seconds on every replica that reads the file (a review: it was read once, and revoking a
    leaked key took a restart of every replica). A file that cannot be used is refused as at start, naming its
    line, and the tenants before it keep serving; `tandem_gateway_tenants_reloads_total{result}` counts both.
    `read` reads the file (with TANDEM_API_KEYS' entries) and checks it as the gateway's start does."""

    def __init__(self, tenants: Tenants, path: Path, read: Callable[[], TenantsFile]) -> None:
        self._tenants, self._path, self._read = tenants, Path(path), read
        # The digest of the text serving: the one read at start, not the file's when the watch begins (a review: a
        # key removed while the gateway started, its backends polled and tokenizers read, was taken as served)
        self._serving: str | None = tenants.file_sha256
        self._refused: str | None = None  # of the last text refused: not reported again until it changes

    async def run(self) -> None:
        await self._reload_logged()  # what changed since it was read
        await watch_file(self._path, self._reload_logged, "tenants file")

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except Exception:  # noqa: BLE001 - the watch must outlive any one edit
            log.exception("tenants file reload failed; the tenants before it keep serving")
            metrics.TENANTS_RELOADS.labels("error").inc()

    async def reload(self) -> bool:
        """Serve the file if its text changed and it can be used; True when it now serves."""
        try:
            text = await settled_text(self._path, _read_text)
        except PolicyError as exc:  # gone, unreadable: the keys it held stay as they were, said once
            return self._refuse(digest(str(exc)), str(exc))
        now = digest(text)
        if now == self._serving:  # (a refused edit undone: said again if it comes back)
            self._refused = None
            return False
        if now == self._refused:
            return False
        try:  # off the event loop: tens of thousands of tenants take a while to read
            config = await asyncio.to_thread(self._read)
        except TenantsError as exc:
            return self._refuse(now, str(exc))
        self._tenants.serve(config)
        self._serving, self._refused = config._sha256, None
        metrics.TENANTS_RELOADS.labels("ok").inc()
        keys = sum(len(tenant.keys) for tenant in config.tenants.values())
        log.info("tenants reloaded from %s: %d tenants, %d keys", self._path, len(config.tenants), keys)
        return True

    def _refuse(self, seen: str, error: str) -> bool:
        if seen != self._refused:
            self._refused = seen
            metrics.TENANTS_RELOADS.labels("error").inc()
            log.error("tenants file change refused, the tenants before it keep serving:\n%s", error)
        return False


def _read_text(path: Path) -> str:
    return read_policy_text(path, "a tenants file is YAML (docs/operations.md)", MAX_TENANTS_BYTES)
