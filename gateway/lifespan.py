"""What the gateway holds for its life, opened when it starts and closed when it stops: tenants and keys, the
policy, each model's tokenizer and prefix hints, the backend registry and its health polling, Redis, the decision
log, admission, the policy reloader. `gateway/main.py` only assembles the app around it."""

import asyncio
import logging
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path

import redis.asyncio
from fastapi import FastAPI
from prometheus_client import REGISTRY

from gateway import privacy
from gateway.autoscale import AutoscaleCollector, TtftWindow
from gateway.backends.circuit_breaker import CircuitBreaker
from gateway.backends.grpc_backend import GrpcWorkerBackend
from gateway.backends.http_backend import HttpWorkerBackend
from gateway.backends.registry import BackendRegistry
from gateway.backends.worker_backend import WorkerBackend
from gateway.config import Settings, get_settings
from gateway.decision_log import DecisionLog
from gateway.edge_agents import EdgeAgents
from gateway.hints.prefix_hints import PrefixHints
from gateway.limits.admission import AdmissionController
from gateway.policy.loader import parse_policy, read_policy_text
from gateway.policy.reloader import PolicyReloader, PolicyStatus, digest
from gateway.policy.schema import Pool
from gateway.redis_client import RedisMisconfigured, RedisWatch, connect, misconfigured_url, unreachable
from gateway.state import GatewayState, ServedModel, check_models
from gateway.tenants import Tenants, TenantsError, TenantsFile, TenantsReloader, read_tenants
from modeling.model_config import CheckpointError
from serving import spans
from serving.openai.chat_tokenizer import ChatTokenizer
from serving.openai.tools import format_for as tool_format_for

log = logging.getLogger(__name__)


class ConfigError(RuntimeError):
    """The gateway's settings cannot be served safely; the message says what to set."""


def load_tenants(s: Settings) -> Tenants:
    """The tenants and keys, refusing an open gateway that the config did not open in so many words."""
    secret = s.cache_salt_secret.get_secret_value().encode() if s.cache_salt_secret else None
    tenants = _keyed_tenants(s, secret)
    if s.auth == "none":
        log.warning("auth is none: no API keys are checked; anyone who reaches %s:%d can use it", s.host, s.port)
    return tenants


def _keyed_tenants(s: Settings, salt_secret: bytes | None) -> Tenants:
    tenants = Tenants.load(s.tenants_file, s.api_keys, salt_secret)
    _check_keys(s, tenants)
    return tenants


def _read_tenants_again(s: Settings) -> TenantsFile:
    """The tenants file with TANDEM_API_KEYS, checked as at start (TenantsReloader's `read`)."""
    config = read_tenants(s.tenants_file, s.api_keys)
    try:
        _check_keys(s, Tenants(config, b"check"))
    except ConfigError as exc:
        raise TenantsError(str(exc)) from None
    return config


def _check_keys(s: Settings, tenants: Tenants) -> None:
    if s.auth == "api-key" and not tenants.requires_key:
        raise ConfigError(
            "no API keys: set TANDEM_API_KEYS ([tenant:]key,...) or TANDEM_TENANTS_FILE, "
            "or TANDEM_AUTH=none to run without keys (every caller then picks its tenant; local use only)"
        )
    if s.ops_token and (tenant := tenants.authenticate(s.ops_token.get_secret_value())) is not None:
        raise ConfigError(  # (a review: a tenant's key then read every backend's address and every tenant's metrics)
            f"TANDEM_OPS_TOKEN is also tenant {tenant!r}'s API key: an operator's token must be a secret of its own"
        )


def preflight(s: Settings) -> None:
    """What the lifespan would fail on later, checked before the port is bound: ConfigError in one line (inside
    the lifespan it was a traceback under uvicorn's)."""
    try:
        _keyed_tenants(s, b"preflight")  # a salt of its own: no warning about the unset secret twice
        checkpoints = s.model_checkpoints()
        for name, path in checkpoints.items():
            if not (Path(path) / "tokenizer.json").is_file():
                raise ValueError(f"model {name!r}: {path} is no checkpoint directory (no tokenizer.json)")
            ChatTokenizer(path)  # its tokenizer, template and configs read as the lifespan will
        policy = parse_policy(read_policy_text(s.policy_file), str(s.policy_file))  # its errors name the file
        try:
            check_models(policy, list(checkpoints))
        except ValueError as exc:  # (a review: models the policy does not place were a traceback in the lifespan)
            raise ValueError(f"{s.policy_file}: {exc}") from None
        if s.redis_url:
            redis.asyncio.connection.parse_url(s.redis_url)  # what connect() would refuse
            if problem := misconfigured_url(s.redis_url):
                raise ValueError(f"REDIS_URL: {problem}")
        tool_format_for(None, os.environ.get("TANDEM_TOOL_FORMAT"))
        if s.decision_log is not None:
            try:
                if Path(s.decision_log).exists() and not Path(s.decision_log).is_file():
                    # A pipe (/dev/stdout in a container) is written without waiting for a reader: one with none
                    # held the start for ever, silent (a review); now it is refused, as anything unwritable is
                    os.close(os.open(s.decision_log, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
                with open(s.decision_log, "a", encoding="utf-8"):  # appended to for the gateway's life
                    pass
            except OSError as exc:
                raise ValueError(f"TANDEM_DECISION_LOG={s.decision_log}: cannot append to it: {exc.strerror}") from None
    except (TenantsError, CheckpointError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def app_settings(app: FastAPI) -> Settings:
    """The settings this app runs with: a test's `app.dependency_overrides[get_settings]`, else what
    `create_app(settings)` was given, else `get_settings()`."""
    if get_settings in app.dependency_overrides:
        return app.dependency_overrides[get_settings]()
    return getattr(app.state, "configured_settings", None) or get_settings()


@asynccontextmanager
async def lifespan(app: FastAPI):
    """The gateway's resources for the app's life: opened in order, closed in reverse."""
    s = app_settings(app)
    spans.Stages.spans = s.trace_stages
    tenants = load_tenants(s)
    text = read_policy_text(s.policy_file)
    policy = parse_policy(text, str(s.policy_file))
    if warning := privacy.detection_warning(policy):
        log.warning("%s", warning)
    try:
        checkpoints = s.model_checkpoints()
        check_models(policy, list(checkpoints))
    except ValueError as exc:
        raise ConfigError(f"{s.policy_file}: {exc}") from None
    redis_client = _redis(s.redis_url)
    try:
        silent = await unreachable(redis_client) if redis_client is not None else None  # said once, by each user
    except RedisMisconfigured as exc:
        await redis_client.aclose()
        raise ConfigError(f"REDIS_URL: {exc}") from None
    watch = RedisWatch(client=redis_client)  # one verdict on Redis for its every user
    try:
        chats = {name: ChatTokenizer(path) for name, path in checkpoints.items()}
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    models = {
        name: ServedModel(name, chat, PrefixHints(name, redis_client, unreachable=silent, watch=watch))
        for name, chat in chats.items()
    }
    tokenizers = {name: served.tokenizer for name, served in models.items()}
    registry = BackendRegistry(policy, next(iter(models)), backend_factory(s, tokenizers))
    status = PolicyStatus(s.policy_file, digest(text), time.time())
    decisions = DecisionLog(s.decision_log) if s.decision_log else None
    admission = AdmissionController(tenants, redis_client, unreachable=silent, watch=watch)
    state = GatewayState(
        settings=s,
        models=models,
        policy=policy,
        registry=registry,
        policy_status=status,
        tenants=tenants,
        admission=admission,
        edge_agents=EdgeAgents(s.edge_agent_ttl_s),
        decisions=decisions,
        ttft=TtftWindow(s.autoscale_window_s),
        redis=watch if redis_client is not None else None,
    )
    app.state.gateway = state
    autoscale = AutoscaleCollector(s, registry, lambda: state.policy, state.ttft)
    REGISTRY.register(autoscale)
    await registry.refresh_all()  # know each backend's kind before the first request
    tasks = [asyncio.create_task(registry.poll_forever(s.health_interval_s))]
    if s.watch_policy:
        tasks.append(asyncio.create_task(PolicyReloader(state).run()))
    if s.watch_tenants and s.tenants_file is not None:
        reloader = TenantsReloader(tenants, s.tenants_file, lambda: _read_tenants_again(s))
        tasks.append(asyncio.create_task(reloader.run()))
    log.info("gateway serving %s with policy %s", ", ".join(state.listed()), s.policy_file)
    yield
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    REGISTRY.unregister(autoscale)
    await registry.close()
    await watch.close()
    if redis_client is not None:
        await redis_client.aclose()
    if decisions:
        decisions.close()


def _redis(url: str | None):
    return connect(url, socket_timeout=0.5, socket_connect_timeout=0.5) if url else None


def backend_factory(settings: Settings, tokenizers: dict[str, ChatTokenizer]):
    def make(endpoint: str, model_id: str, pool: Pool) -> WorkerBackend:
        breaker = CircuitBreaker(settings.breaker_failures, settings.breaker_open_s)
        if endpoint.startswith(("http://", "https://")):
            decode = tokenizers[model_id].tokenizer.decode if pool.prompt_format == "text" else None
            return HttpWorkerBackend(
                endpoint, model_id, pool.kind, breaker, pool.upstream_model, decode, pool.send_cache_salt
            )
        return GrpcWorkerBackend(endpoint, model_id, pool.kind, breaker, pool.tls)

    return make
