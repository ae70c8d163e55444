"""The policy YAML's schema. These models are the truth; docs follow them.

Unknown keys are errors (a typo must not silently change routing), and every
name a rule uses must be a pool, checked when the policy loads.
"""

import functools
import ipaddress
import reprlib
import socket
from typing import Annotated, Literal, Union
from urllib.parse import urlparse

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from tandem_sdk.detectors import DETECTORS
from tandem_sdk.tags import MAX_TAG_CHARS, TAG_SEPARATORS, normalize_tag

from gateway import privacy
from gateway.routing.healthy_filter import Healthy
from gateway.routing.max_score_picker import MaxScore
from gateway.routing.plugin import PluginConfig
from gateway.routing.profile import CompiledProfile, compile_profile
from gateway.routing.queue_depth_scorer import QueueDepth
from gateway.routing.registry import FILTERS, PICKERS, SCORERS
from serving.tls_files import read_files, tls_files_problem


def _known(kind: str, value: str | list[str], registry: dict) -> str | list[str]:
    """Validator body: every name in value must be a key of registry (one plugin or detector, or a list)."""
    names = [value] if isinstance(value, str) else value
    unknown = [n for n in names if n not in registry]
    if unknown:
        what = f"{kind} {value!r}" if isinstance(value, str) else f"{kind}(s) {unknown}"
        raise ValueError(f"unknown {what}; known: {sorted(registry)}")
    return value


def _tag(value: object) -> object:
    """A privacy tag in the policy reads as a request's tag does (tandem_sdk.tags.normalize_tag), so `PII` in the
    file matches a request tagged `pii`; one that no request could carry does not load."""
    if not isinstance(value, str):
        return value
    tag = normalize_tag(value)
    if not tag or TAG_SEPARATORS.search(tag):
        raise ValueError(f"privacy tag {shown(value)} must be one non-empty tag, without commas")
    if len(tag) > MAX_TAG_CHARS:
        raise ValueError(
            f"privacy tag {shown(value)} is {len(tag)} characters; a request's tags have at most {MAX_TAG_CHARS}"
        )
    return tag


Tag = Annotated[str, BeforeValidator(_tag)]


class _Strict(BaseModel):
    """Unknown keys are errors, and a value is taken only as written: `'yes'` or `1` is no truth, `'5'` or `5.0` no
    whole number (the loader also validates the plugins' settings strictly)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class IntRange(_Strict):
    min: int | None = None
    max: int | None = None

    @model_validator(mode="after")
    def _holds_a_number(self) -> "IntRange":
        if self.min is not None and self.max is not None and self.min > self.max:
            raise PolicyFieldError(
                ("min",), f"min {self.min} is above max {self.max}: no number is within, so the rule never matches"
            )
        return self

    def contains(self, value: int) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


class DeviceMatch(_Strict):
    npu: bool | None = None
    min_ram_gb: float | None = None
    min_battery: float | None = Field(default=None, ge=0, le=1)
    network: list[str] | None = None


class Match(_Strict):
    """All given fields must hold; an empty match matches every request."""

    privacy: list[Tag] | None = Field(default=None, description="any of these tags")
    prompt_tokens: IntRange | None = None
    max_tokens: IntRange | None = None
    device: DeviceMatch | None = None
    tenant: list[str] | None = None
    priority: IntRange | None = None
    model: list[str] | None = Field(default=None, description="any of these model ids (the request's `model`)")

    @model_validator(mode="after")
    def _can_match(self) -> "Match":
        """A field no request can meet loaded, its rule dead (as `min` above `max` does not; a review)."""
        lists = {"privacy": self.privacy, "tenant": self.tenant, "model": self.model}
        lists["device.network"] = self.device.network if self.device is not None else None
        for name, value in lists.items():
            if value is not None and not value:
                raise PolicyFieldError(
                    tuple(name.split(".")), "an empty list matches no request, so the rule never matches; leave the "
                    "field out to match every request",
                )  # fmt: skip
        for name, bounds in (("prompt_tokens", self.prompt_tokens), ("max_tokens", self.max_tokens)):
            if bounds is not None and bounds.max is not None and bounds.max < 0:
                raise PolicyFieldError(
                    (name, "max"), f"max {bounds.max}: no request has fewer than 0 tokens, so the rule never matches"
                )
        return self


# Pool and rule names go into the X-Tandem-Route header, metric labels and logs: letters, digits, '.', '_', '-'.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class Rule(_Strict):
    name: Name
    match: Match = Match()
    route: str
    fallback: list[str] = []


def _plugin_field(kind: str, classes: tuple[type[PluginConfig], ...]):
    """A list item (or the picker) of one kind: `{type: …, settings…}` validated by that type's config class, or
    the type's name alone for its defaults (`healthy`, `max-score`)."""
    known = {c.model_fields["type"].default: c for c in classes}

    def name_to_mapping(value: object) -> object:
        if isinstance(value, str):
            value = {"type": value}
        if isinstance(value, dict):
            if "type" not in value:
                raise ValueError(f"a {kind} needs a `type`; known: {sorted(known)}")
            if not isinstance(value["type"], str):
                raise PolicyFieldError(
                    ("type",), f"a {kind}'s `type` is one name of {sorted(known)}, not {shown(value['type'])}"
                )
            _known(kind, value["type"], known)
        return value

    union = Annotated[Union[classes], Field(discriminator="type")]  # noqa: UP007 - a tuple of classes
    by_name = Literal[tuple(sorted(known))]  # what the YAML may hold: a name, or a mapping
    return Annotated[union, BeforeValidator(name_to_mapping, json_schema_input_type=Union[by_name, union])]  # noqa: UP007


PLUGIN_TYPES = frozenset(c.model_fields["type"].default for c in (*FILTERS, *SCORERS, *PICKERS))


def shown(value: object) -> str:
    """`value` in at most 40 characters for a message, never written out whole first: a billion laughs' list took
    seconds and gigabytes to write before it was cut (a review)."""
    text = _SHORT.repr(value)
    return text if len(text) <= 40 else f"{text[:37]}…"


_SHORT = reprlib.Repr()  # (Python 3.11's takes no arguments)
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother = 2, 4, 4, 40, 40


def plain_loc(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """An error's place in the file: pydantic names the plugin type a setting was checked against
    (`scorers.0.queue-depth.half_at`), which is not a key of the YAML."""
    return tuple(
        part for i, part in enumerate(loc)
        if not (part in PLUGIN_TYPES and i and (isinstance(loc[i - 1], int) or loc[i - 1] == "picker"))
    )  # fmt: skip


FilterSpec = _plugin_field("filter", FILTERS)
ScorerSpec = _plugin_field("scorer", SCORERS)
PickerSpec = _plugin_field("picker", PICKERS)


class Profile(_Strict):
    """How a pool ranks its backends for a request. Each plugin takes its own settings, so a type may appear
    twice with different ones (e.g. two `queue-depth` scorers with different `half_at`)."""

    filters: list[FilterSpec] = [Healthy()]
    scorers: list[ScorerSpec] = [QueueDepth()]
    picker: PickerSpec = MaxScore()

    @property
    def uses_prefix_hints(self) -> bool:
        return any(s.type == "prefix-hit" for s in self.scorers)

    @functools.cached_property
    def compiled(self) -> CompiledProfile:
        return compile_profile(self)


class GrpcTls(_Strict):
    """TLS to a pool's gRPC workers (grpc:// and dns:// endpoints): the workers serve with a certificate
    (TANDEM_TLS_CERT_FILE and TANDEM_TLS_KEY_FILE), and the gateway checks it against these roots."""

    ca_file: str | None = Field(
        default=None, description="PEM file of the roots the workers' certificates chain to (default: the system's)"
    )
    cert_file: str | None = Field(
        default=None,
        description="PEM file of this gateway's client certificate, for workers that ask for one "
        "(TANDEM_TLS_CLIENT_CA_FILE); with key_file",
    )
    key_file: str | None = Field(default=None, description="PEM file of the client certificate's private key")
    server_name: str | None = Field(
        default=None,
        min_length=1,
        description="the name the workers' certificates carry, where it is not the endpoint's host (required for "
        "dns:// endpoints: their addresses are dialled)",
    )

    @model_validator(mode="after")
    def _files(self) -> "GrpcTls":
        """Each file a readable PEM file, the roots certificates, the client key the certificate's: checked at load,
        where a bad one is said with its field (gRPC would fail every handshake, naming no file)."""
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: a client certificate needs its key")
        found = tls_files_problem(("ca_file", self.ca_file), ("cert_file", self.cert_file), ("key_file", self.key_file))
        if found is not None:
            name, problem = found
            raise PolicyFieldError((name,), f"{name} {problem}")
        return self

    def read(self) -> tuple[bytes | None, ...]:
        """The roots, the client key and its certificate chain, as gRPC takes them (read when a client is made)."""
        return read_files(self.ca_file, self.key_file, self.cert_file)


class Pool(_Strict):
    kind: Literal["edge", "cloud"]
    endpoints: list[str] = Field(
        min_length=1,
        description="grpc://host:port (a Tandem worker), dns://name:port (every address of the name: a headless "
        "Service's worker pods) or http(s)://host:port (an OpenAI-compatible server)",
    )
    profile: Profile = Profile()
    upstream_model: str | None = Field(
        default=None, description="for http(s) endpoints: the model name to send (default: the gateway's model id)"
    )
    prompt_format: Literal["token_ids", "text"] = Field(
        default="token_ids", description="for http(s) endpoints: text for servers that take no token ids (Ollama)"
    )
    send_cache_salt: bool = Field(
        default=False,
        description="for http(s) endpoints: send each tenant's prefix-cache salt as `cache_salt`, so tenants never "
        "share cached prefixes there (vLLM >= 0.9 takes it; a server that refuses unknown fields does not)",
    )
    trust_remote_http: bool = Field(
        default=False,
        description="an edge pool's http(s) endpoints on other hosts are trusted with private prompts. An HTTP "
        "server cannot report its kind: without this, an edge pool's HTTP servers must be on this host (loopback)",
    )
    tls: GrpcTls | None = Field(
        default=None, description="TLS to this pool's grpc:// and dns:// workers (unset: plaintext gRPC)"
    )
    plaintext_grpc: bool = Field(
        default=False,
        description="an edge pool's gRPC workers on other hosts are reached without TLS: private prompts cross the "
        "network unencrypted. Only where that network is trusted (a service mesh's mutual TLS, one host's "
        "bridge); without this or `tls`, an edge pool's gRPC workers must be on this host (loopback)",
    )

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        for url in value:
            try:
                parsed = urlparse(url)
                port = parsed.port
            except ValueError as exc:  # a port that is no number or out of range
                raise ValueError(f"endpoint {url!r}: {exc}") from None
            if parsed.scheme not in ("grpc", "dns", "http", "https") or not parsed.hostname:
                raise ValueError(
                    f"endpoint {url!r} must look like grpc://host:port, dns://name:port or http(s)://host[:port]"
                )
            if parsed.scheme in ("grpc", "dns") and not port:
                raise ValueError(f"endpoint {url!r} needs a port")
            if parsed.scheme in ("grpc", "dns") and (parsed.path not in ("", "/") or parsed.query or parsed.fragment):
                raise ValueError(f"endpoint {url!r}: a worker is dialled at host:port alone; the rest would be dropped")
            if problem := endpoint_host_problem(parsed.hostname):
                raise ValueError(f"endpoint {url!r}: {problem}")
            if parsed.username is not None or parsed.password is not None:
                raise ValueError(
                    f"endpoint {parsed.scheme}://…@{parsed.hostname}: credentials in an endpoint would be shown in "
                    "the logs and the metrics (and X-Tandem-Backend where addresses are shown); remove them"
                )
        seen: dict[tuple[str, int | None], int] = {}
        for j, url in enumerate(value):  # once per server: twice would double its share of requests
            i = seen.setdefault(server_of(url), j)
            if i != j:
                same = "" if value[i] == url else f" (as {value[i]})"
                raise PolicyFieldError((j,), f"{url} is listed twice in this pool{same}; list each server once")
        return value

    @model_validator(mode="after")
    def _http_settings_are_for_http_endpoints(self) -> "Pool":
        """A setting only an HTTP server reads, on a pool of none, loaded and did nothing (a review)."""
        if any(urlparse(url).scheme in ("http", "https") for url in self.endpoints):
            return self
        for name, default in (("upstream_model", None), ("prompt_format", "token_ids"), ("send_cache_salt", False),
                              ("trust_remote_http", False)):  # fmt: skip
            if getattr(self, name) != default:
                raise PolicyFieldError(
                    (name,), f"{name} is for a pool's http(s) endpoints, and this one has none: it would do nothing"
                )
        return self

    @model_validator(mode="after")
    def _tls_is_for_grpc(self) -> "Pool":
        if self.tls is None:
            if self.plaintext_grpc and self.kind != "edge":
                raise PolicyFieldError(("plaintext_grpc",), "plaintext_grpc is an edge pool's: a cloud pool's gRPC "
                                       "is plaintext unless it has `tls`")  # fmt: skip
            return self
        if self.plaintext_grpc:
            raise PolicyFieldError(("plaintext_grpc",), "a pool with `tls` is not plaintext: remove one of the two")
        for j, url in enumerate(self.endpoints):
            parsed = urlparse(url)
            if parsed.scheme in ("http", "https"):
                raise PolicyFieldError(
                    ("endpoints", j),
                    f"{url}: `tls` is for gRPC workers; an HTTP server's TLS is its https:// endpoint (a pool of "
                    "both kinds of server is two pools)",
                )
            if parsed.scheme == "dns" and self.tls.server_name is None:
                raise PolicyFieldError(
                    ("tls", "server_name"),
                    f"{url} is dialled by the addresses its name resolves to: set tls.server_name to the name the "
                    "workers' certificates carry",
                )
        return self

    @model_validator(mode="after")
    def _a_server_on_another_host_in_an_edge_pool_is_said_to_be_trusted_in_so_many_words(self) -> "Pool":
        """Private prompts go only to edge pools: a server on another host gets them only as the pool says."""
        if self.kind != "edge":
            return self
        for j, url in enumerate(self.endpoints):
            parsed = urlparse(url)
            if is_loopback(parsed.hostname):
                continue
            if parsed.scheme in ("http", "https") and not self.trust_remote_http:
                problem = (
                    "is an HTTP server on another host in an edge pool: it would get private prompts, and an HTTP "
                    "server cannot say it is an edge. Put it in a cloud pool, or set trust_remote_http: true on this "
                    "pool if it is inside the device's trust boundary"
                )
            elif parsed.scheme in ("grpc", "dns") and self.tls is None and not self.plaintext_grpc:
                problem = (
                    "is a worker on another host in an edge pool, over plaintext gRPC: private prompts would cross "
                    "the network unencrypted. Give the pool `tls:` (its workers serve with TANDEM_TLS_CERT_FILE and "
                    "TANDEM_TLS_KEY_FILE), or set plaintext_grpc: true on it if the network between them is trusted "
                    "(a service mesh's mutual TLS)"
                )
            else:
                continue
            raise PolicyFieldError(("endpoints", j), f"{url} {problem}")
        return self


class Privacy(_Strict):
    never_leave_device: list[Tag] = ["private", "pii", "confidential"]
    detectors: list[str] = Field(
        default_factory=lambda: list(DETECTORS),
        description=f"content detectors to run (default: all, {sorted(DETECTORS)}); `[]` turns detection off, "
        "and the gateway logs a warning",
    )
    detected_tag: Tag = Field(
        default="pii", description="the tag a request gets when any detector fires; must be in never_leave_device"
    )
    known_tags: list[Tag] = Field(
        default_factory=list,
        description="tags callers may send that no rule names (say, for logs); a request carrying a tag that is "
        "none of these, never_leave_device, detected_tag or a rule's match.privacy is refused with a 400, so a "
        "misspelled private tag never routes as if untagged",
    )

    @field_validator("detectors")
    @classmethod
    def _known_detectors(cls, value: list[str]) -> list[str]:
        return _known("detector", value, DETECTORS)


class ModelSpec(_Strict):
    """A model the gateway serves (its tokenizer from TANDEM_MODEL_DIR or TANDEM_MODEL_DIRS) and the pools whose
    workers run it."""

    pools: list[str] = Field(min_length=1, description="the pools serving this model; a pool serves one model")
    owned_by: str = Field(default="tandem", description="`owned_by` in /v1/models")


def _the_number(value: object) -> object:
    """`version: true` and `version: 1.0` equal 1 to Python, even in strict mode; the file must say 1."""
    if isinstance(value, bool | float):
        raise PolicyFieldError((), f"write the number 1, the only version (got {shown(value)})")
    return value


class Policy(_Strict):
    version: Annotated[Literal[1], BeforeValidator(_the_number)]
    privacy: Privacy = Privacy()
    pools: dict[Name, Pool] = Field(min_length=1)
    models: dict[str, ModelSpec] = Field(
        default_factory=dict,
        description="model id -> the pools serving it (every pool in exactly one); empty: the gateway's one model, "
        "served by every pool",
    )
    rules: list[Rule] = Field(min_length=1)

    @functools.cached_property
    def known_privacy_tags(self) -> frozenset[str]:
        """Every tag a request may carry: any other is refused (gateway.privacy.request_tags)."""
        named = (tag for rule in self.rules for tag in rule.match.privacy or ())
        p = self.privacy
        return frozenset((*p.never_leave_device, p.detected_tag, *p.known_tags, *named))

    def pools_serving(self, model: str) -> frozenset[str] | None:
        """The pools that serve `model`; None when the policy names no models (every pool serves the one model)."""
        if not self.models:
            return None
        spec = self.models.get(model)
        return frozenset(spec.pools) if spec else frozenset()

    def model_of(self, pool: str, default: str) -> str:
        """The model a pool's workers run: the one whose `pools` names it; without `models`, the gateway's one."""
        return next((name for name, spec in self.models.items() if pool in spec.pools), default)

    @model_validator(mode="after")
    def _references(self) -> "Policy":
        served_by: dict[str, str] = {}
        for name, spec in self.models.items():
            for j, pool in enumerate(spec.pools):
                if pool not in self.pools:
                    raise PolicyFieldError(
                        ("models", name, "pools", j),
                        f"model {name!r} names unknown pool {pool!r}; pools: {sorted(self.pools)}",
                    )
                if pool in served_by and served_by[pool] != name:
                    raise PolicyFieldError(
                        ("models", name, "pools", j),
                        f"pool {pool!r} is named by models {served_by[pool]!r} and {name!r}; a pool's workers run one model",
                    )
                served_by[pool] = name
        if self.models and (unserved := sorted(set(self.pools) - set(served_by))):
            raise PolicyFieldError(
                ("models",), f"pool(s) {unserved} serve no model: with `models`, each pool is named by one model"
            )
        runs: dict[str, tuple[str, str]] = {}  # endpoint -> (its model, a pool naming it)
        for pool_name, pool in self.pools.items():
            model = served_by.get(pool_name, "")
            for url in pool.endpoints:
                other = runs.setdefault(url, (model, pool_name))
                if other[0] != model:
                    raise PolicyFieldError(
                        ("pools", pool_name, "endpoints"),
                        f"endpoint {url!r} is in pools {other[1]!r} and {pool_name!r}, which serve different models",
                    )
        names = [rule.name for rule in self.rules]
        for i, rule in enumerate(self.rules):
            if rule.match.model is not None and not self.models:
                raise PolicyFieldError(
                    ("rules", i, "match", "model"),
                    f"rule {rule.name!r} matches on model, but the policy names no `models` (one model: every rule "
                    "is for it)",
                )
            unknown = [m for m in rule.match.model or () if m not in self.models]
            if unknown:
                raise PolicyFieldError(
                    ("rules", i, "match", "model"),
                    f"rule {rule.name!r} matches unknown model(s) {unknown}; models: {sorted(self.models)}",
                )
            if names.index(rule.name) != i:
                raise PolicyFieldError(
                    ("rules", i, "name"), f"rule name {rule.name!r} is used twice; names must be unique"
                )
            for j, pool in enumerate([rule.route, *rule.fallback]):
                if pool not in self.pools:
                    where = ("rules", i, "route") if j == 0 else ("rules", i, "fallback", j - 1)
                    raise PolicyFieldError(
                        where, f"rule {rule.name!r} routes to unknown pool {pool!r}; pools: {sorted(self.pools)}"
                    )
        return self

    @model_validator(mode="after")
    def _one_kind_per_endpoint(self) -> "Policy":
        """A server in an edge pool and a cloud pool would get private prompts as an edge. Endpoints are compared as
        the servers they reach: scheme, case, default ports, a trailing /v1 and the names of this host aside
        (http://localhost:8000/v1 is http://127.0.0.1:8000)."""
        kinds: dict[tuple[str, int | None], tuple[str, str, str]] = {}
        for name, pool in self.pools.items():
            for j, url in enumerate(pool.endpoints):
                other = kinds.setdefault(server_of(url), (pool.kind, name, url))
                if other[0] != pool.kind:
                    same = "" if other[2] == url else f" (as {other[2]})"
                    raise PolicyFieldError(
                        ("pools", name, "endpoints", j),
                        f"{url} is in {other[0]} pool {other[1]!r}{same} and {pool.kind} pool {name!r}; a backend has "
                        "one kind",
                    )
        return self

    @model_validator(mode="after")
    def _private_tags_never_reach_cloud(self) -> "Policy":
        """Refuse a policy that could let a never-leave tag reach a cloud pool (gateway.privacy says which)."""
        for loc, message in privacy.policy_problems(self):
            raise PolicyFieldError(loc, message)
        return self


_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint_host_problem(host: str) -> str | None:
    """Why an endpoint's host is refused, or None. An address is written one way (127.0.0.1, [::1]): clients read
    127.1, 0x7f.0.0.1, 2130706433, [::ffff:127.0.0.1] and 127。0。0。1 as 127.0.0.1 too, so one server could be in an
    edge pool and a cloud pool under two spellings; 0.0.0.0 and [::] are no address to dial (they reach this host)."""
    if not host.isascii():
        return f"host {host!r}: write it in ASCII (a name as its xn-- form, an address in digits and dots)"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is None:
        try:
            packed = socket.inet_aton(host)  # what getaddrinfo accepts as IPv4: 127.1, 0x7f.0.0.1, 2130706433, 0
        except OSError:
            return None  # a DNS name
        address = ipaddress.IPv4Address(packed)
        if not address.is_unspecified:
            return f"host {host!r}: write the address as {address}"
    if address.is_unspecified:
        return f"host {host!r}: no address to dial (it reaches this host: write 127.0.0.1)"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return f"host {host!r}: write the address as {address.ipv4_mapped}"
    if str(address) != host.lower():
        return f"host {host!r}: write the address as {address}"
    return None


def is_loopback(host: str | None) -> bool:
    """Whether an endpoint's host is this host: `localhost` itself or a loopback address (127.0.0.0/8, ::1). A name
    is not resolved, so `foo.localhost` is no loopback here: a resolver may send it to DNS; nor is `localhost.`, which
    neither getaddrinfo nor gRPC's resolver reads from /etc/hosts: they ask the network's DNS (a review)."""
    if host is None:
        return False
    host = host.lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_of(url: str) -> tuple[str, int | None]:
    """The server an endpoint reaches, as far as its text says: host (this host's names as one) and port. The
    hosts are checked to be in one spelling first (endpoint_host_problem)."""
    parsed = urlparse(url)
    host = (parsed.hostname or "").lower().rstrip(".")
    return ("loopback" if is_loopback(host) else host), parsed.port or _DEFAULT_PORTS.get(parsed.scheme)


class PolicyFieldError(ValueError):
    """A semantic error that knows where in the file it is (pydantic keeps model-level errors at the top)."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
