"""Gateway settings: environment variables with the TANDEM_ prefix, one cached object."""

import ipaddress
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gateway.tenants import is_header_token
from serving.checkpoint import model_id_for

DAY_S = 86_400.0  # any time setting: past a day a deadline is a mistake (gRPC's overflows at ~1e10 s)
# A time setting: finite, above 0, at most a day (a deadline of 0, nan or 1e10 failed every request)
Seconds = Annotated[float, Field(gt=0, le=DAY_S, allow_inf_nan=False)]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TANDEM_")

    host: str = Field(default="127.0.0.1", min_length=1, description="the address to listen on (empty is refused)")
    port: int = Field(default=8000, ge=1, le=65535)
    model_dir: Path = Field(description="checkpoint directory whose tokenizer the gateway uses")
    model_id: str | None = Field(default=None, description="id clients send as `model`; default: model_dir's name")
    model_dirs: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="further models, comma-separated `[id=]checkpoint_dir` (id default: the directory's name); the "
        "policy's `models` says which pools serve each",
    )
    policy_file: Path = Path("policies/default.yaml")
    auth: Literal["api-key", "none"] = Field(
        default="api-key",
        description="api-key: every request needs a key (TANDEM_API_KEYS or a tenants file), the key decides the "
        "tenant; none: no keys, the tenant is X-Tandem-Tenant or 'default' (a local stack only: `tandem up`)",
    )
    cache_salt_secret: SecretStr | None = Field(
        default=None,
        description="key of the HMAC that salts each tenant's prefix hashes; replicas must share it (a Kubernetes "
        "Secret). Unset: a random one per process, so replicas do not share prefix hints",
    )
    ops_token: SecretStr | None = Field(
        default=None,
        description="bearer token for /metrics and the details of /readyz (auth api-key); unset: not served",
    )
    drain_delay_s: float = Field(
        default=2.0,
        ge=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="SIGTERM: readiness false at once, new requests still served this long",
    )
    shutdown_grace_s: Seconds = Field(
        default=20.0, description="after the drain delay: how long in-flight requests may take to finish"
    )
    max_body_bytes: int = Field(
        default=2 * 1024 * 1024, ge=1024, description="larger request bodies get 413 before they are parsed"
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated `[tenant:]key` (plaintext; use a tenants file in production)"
    )
    tenants_file: Path | None = Field(default=None, description="tenants, hashed keys and limits (YAML)")
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated origins whose pages may call the API from a browser (CORS), `*` for any; none "
        "by default",
    )
    redis_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("TANDEM_REDIS_URL", "REDIS_URL"),
        description="Redis for rate limits shared by replicas; unset: limits per replica",
    )
    default_max_tokens: int = Field(default=128, ge=1, description="max_tokens of a request that sets none")
    backend_timeout_s: Seconds = Field(default=120.0)
    health_interval_s: Seconds = Field(default=1.0, ge=0.05, description="Stats polls this often")
    first_token_deadline_s: Seconds = Field(default=30.0, description="give up retrying backends after this long")
    attempt_timeout_s: Seconds = Field(default=10.0, description="how long one backend may take to its first token")
    stream_idle_timeout_s: Seconds = Field(
        default=30.0, description="a backend silent this long mid-answer is hung: the answer ends with an error"
    )
    request_read_timeout_s: Seconds = Field(
        default=30.0,
        description="a connection whose request line and headers have not come this long after it opened (or its "
        "request began), or whose body stops coming for this long, is closed",
    )
    access_log: bool = Field(
        default=False,
        description="a line per request on stderr (uvicorn's access log): off unless asked, as in Envoy and "
        "sglang-router; each request's span, metrics and usage record say the same",
    )
    trace_stages: bool = Field(
        default=False,
        description="a span for each of the gateway's stages (tokenize, classify, hint lookup, route plan); off: "
        "their attributes and times (tandem.stage_us.*) are on the request's span, 4-7 % more requests a second",
    )
    client_stall_s: Seconds = Field(
        default=60.0,
        description="a streaming client that takes no data for this long is let go: its answer stops, and its "
        "backend is not blamed",
    )
    breaker_failures: int = Field(default=3, ge=1, description="consecutive failures that open a backend's breaker")
    breaker_open_s: Seconds = Field(default=5.0, description="how long an open breaker waits before a probe")
    watch_policy: bool = Field(default=True, description="reload the policy file when it changes")
    watch_tenants: bool = Field(
        default=True, description="reload the tenants file when it changes: a key removed there stops working"
    )
    edge_token: str | None = Field(default=None, description="token edge agents register with; unset: registration off")
    edge_agent_ttl_s: Seconds = Field(default=15.0, description="drop an edge agent not heard from for this long")
    show_backend_addresses: bool = Field(
        default=False,
        description="show callers each backend's address (X-Tandem-Backend, /v1/route/explain); off: its pool and "
        "place (`cloud/0`), which /readyz with the ops token maps to its address (auth none shows addresses)",
    )
    trust_trace_context: bool = Field(
        default=False,
        description="a caller's W3C traceparent (with its tracestate and baggage) is the parent of the request's "
        "trace, as between services of one operator; off: each request is a trace of the gateway's own, linked to "
        "the caller's span, so a caller neither picks the trace id nor turns its sampling off",
    )
    forwarded_allow_ips: str = Field(
        default="",
        description="comma-separated addresses (or `*`) of proxies whose X-Forwarded-For / X-Forwarded-Proto are "
        "read as the client's; empty: none is, the connection's peer is the client",
    )
    trace_content: bool = Field(
        default=False, description="put prompt and completion text in spans (never for private requests)"
    )
    autoscale_queue_per_worker: float = Field(
        default=4.0, gt=0, allow_inf_nan=False, description="autoscaling target: waiting requests per worker"
    )
    autoscale_kv_usage: float = Field(
        default=0.85, gt=0, le=1, description="autoscaling target: KV pool fraction in use"
    )
    autoscale_ttft_p90_s: Seconds = Field(default=2.0, description="autoscaling target: TTFT p90 in seconds")
    autoscale_window_s: Seconds = Field(default=60.0, description="window of the TTFT p90 signal")
    max_n: int = Field(default=8, ge=1, le=128, description="the most choices (n) one request may ask for")
    max_batch: int = Field(
        default=32,
        ge=1,
        le=2048,
        description="the most prompts one /v1/completions request may carry, and (with n) choices",
    )
    decision_log: Path | None = Field(default=None, description="append each routing decision here as JSON lines")

    @field_validator("host")
    @classmethod
    def _a_host_to_listen_on(cls, value: str) -> str:
        """An address or a name, as written: ' ' or 256.1.1.1 failed only at bind, after the app had started."""
        try:
            ipaddress.ip_address(value)
            return value
        except ValueError:
            pass
        if not re.fullmatch(
            r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*",
            value,
        ):
            raise ValueError("not an IP address or a host name")
        if re.fullmatch(r"[0-9.]+", value):
            raise ValueError("not an IP address")
        return value

    @model_validator(mode="after")
    def _auth_says_one_thing(self) -> "Settings":
        """`none` beside keys or an ops token is two settings that disagree; the open one would win silently."""
        if self.auth == "none":
            given = [n for n, v in (("TANDEM_API_KEYS", self.api_keys), ("TANDEM_TENANTS_FILE", self.tenants_file),
                                    ("TANDEM_OPS_TOKEN", self.ops_token)) if v]  # fmt: skip
            if given:
                raise ValueError(
                    f"TANDEM_AUTH=none checks no keys, and {', '.join(given)} {'is' if len(given) == 1 else 'are'} "
                    "set: unset one or the other"
                )
        return self

    @field_validator("edge_token", "ops_token")
    @classmethod
    def _token_as_a_header_carries_it(cls, value):
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is not None and not is_header_token(text):
            raise ValueError("must be printable ASCII without spaces: it is sent as an HTTP header")
        return value

    @field_validator("api_keys", "model_dirs", "cors_origins", mode="before")
    @classmethod
    def _split_keys(cls, value):
        if isinstance(value, str):
            return [key.strip() for key in value.split(",") if key.strip()]
        return value

    def model_checkpoints(self) -> dict[str, Path]:
        """Every model this gateway serves: id -> checkpoint directory (its tokenizer), the first one first."""
        out = {model_id_for(self.model_dir, self.model_id): self.model_dir}
        for entry in self.model_dirs:
            name, sep, path = (part.strip() for part in entry.partition("="))  # `qwen = /m/q` kept its blanks
            if sep and not path:  # (`q=` was the current directory: a review)
                raise ValueError(f"TANDEM_MODEL_DIRS: {entry.strip()!r} names no checkpoint directory after '='")
            path = Path(path if sep else name)
            model = name if sep else model_id_for(path)
            if not model or model in out:
                raise ValueError(f"TANDEM_MODEL_DIRS: model id {model!r} is empty or given twice")
            out[model] = path
        return out


@lru_cache
def get_settings() -> Settings:
    return Settings()
