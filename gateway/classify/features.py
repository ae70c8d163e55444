"""The features policy rules match on, gathered once per request."""

import json
from dataclasses import dataclass

from tandem_sdk.device import MAX_PROVIDERS, NETWORK_WORDS, PROVIDER_NAME

from serving.openai.errors import BadRequest


@dataclass(frozen=True)
class DeviceCapability:
    """What the caller's device can do (the SDK's X-Tandem-Device header)."""

    npu: bool = False
    ram_gb: float | None = None
    battery: float | None = None  # 0..1
    network: str | None = None  # e.g. "wifi", "cellular", "metered"
    gpu: bool = False
    cores: int | None = None
    charging: bool | None = None
    providers: tuple[str, ...] = ()  # onnxruntime execution providers the device has


DEVICE_FIELDS = {"npu", "ram_gb", "battery", "network", "gpu", "cores", "charging", "providers"}


@dataclass(frozen=True)
class RequestFeatures:
    prompt_tokens: int
    max_tokens: int
    privacy_tags: frozenset[str]
    device: DeviceCapability | None
    tenant: str
    priority: int = 0
    detected: tuple[str, ...] = ()  # detectors that fired on the prompt text
    model: str = ""  # the request's `model`: only pools serving it are routed to
    # The caller's own tags, before detection added the policy's `detected_tag` (None: not known, an older decision
    # log's record): replay tags a request again under the policy it replays (gateway/policy/replay.py).
    tagged: frozenset[str] | None = None


HEADER = "X-Tandem-Device"
MAX_HEADER_CHARS = 4096
# Providers by onnxruntime's names, at most 32, and a network in a few words on one line, as the SDK checks them: a
# 1 MB header went whole into the decision log, which says it holds no text (a review)


def _shown(name: str) -> str:
    return repr(name if len(name) <= 40 else name[:40] + "…")


def parse_device_header(value: str | None) -> DeviceCapability | None:
    if not value:
        return None
    if len(value) > MAX_HEADER_CHARS:
        raise BadRequest(f"X-Tandem-Device is {len(value):,} characters; at most {MAX_HEADER_CHARS:,}", param=HEADER)
    try:
        raw = json.loads(value, object_pairs_hook=_once)
    except json.JSONDecodeError as exc:
        raise BadRequest(
            f"X-Tandem-Device must be a JSON object: {exc.msg} at column {exc.colno}", param=HEADER
        ) from exc
    except ValueError as exc:  # a number over Python's 4,300 digits
        raise BadRequest(f"X-Tandem-Device must be a JSON object of small values: {exc}", param=HEADER) from exc
    except RecursionError as exc:
        raise BadRequest("X-Tandem-Device must be a flat JSON object (it nests too deep)", param=HEADER) from exc
    if not isinstance(raw, dict):
        raise BadRequest('X-Tandem-Device must be a JSON object, e.g. {"npu": true, "ram_gb": 8}', param=HEADER)
    unknown = set(raw) - DEVICE_FIELDS
    if unknown:
        named = ", ".join(_shown(name) for name in sorted(unknown)[:5]) + (", …" if len(unknown) > 5 else "")
        raise BadRequest(
            f"X-Tandem-Device: unknown field(s) {named}; known: {', '.join(sorted(DEVICE_FIELDS))}", param=HEADER
        )
    try:
        providers = raw.get("providers") or []
        if not isinstance(providers, list) or len(providers) > MAX_PROVIDERS:
            raise ValueError(f"providers must be a list of at most {MAX_PROVIDERS} names")
        if not all(isinstance(p, str) and PROVIDER_NAME.fullmatch(p) for p in providers):
            raise ValueError('providers are execution providers\' names, such as "QNNExecutionProvider"')
        network = raw.get("network")
        if network is not None and not (isinstance(network, str) and NETWORK_WORDS.fullmatch(network)):
            raise ValueError('network must be a short name such as "wifi" or "metered" (1-32 characters, one line)')
        return DeviceCapability(
            npu=_as_bool("npu", raw.get("npu", False)),
            ram_gb=_number("ram_gb", raw.get("ram_gb"), 0, 1e6),
            battery=_number("battery", raw.get("battery"), 0, 1),
            network=network,
            gpu=_as_bool("gpu", raw.get("gpu", False)),
            cores=None if raw.get("cores") is None else int(_number("cores", raw["cores"], 1, 1e5, whole=True)),
            charging=None if raw.get("charging") is None else _as_bool("charging", raw["charging"]),
            providers=tuple(providers),
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadRequest(f"X-Tandem-Device: {exc}", param=HEADER) from exc


def _once(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys each come once: JSON keeps the last of two."""
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise BadRequest(
            f"X-Tandem-Device names {_shown(twice)} twice; JSON would keep the last: send it once", param=HEADER
        )
    return found


def _number(name: str, value, least: float, most: float, whole: bool = False) -> float | None:
    """A number within [least, most] (battery 0 to 1, ram_gb finite), or None where it is not sent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or (whole and value != int(value)):
        raise ValueError(f"{name} must be {'a whole number' if whole else 'a number'}, got {value!r:.40}")
    if not least <= value <= most:  # NaN and infinity too (1e999 reads as infinity)
        raise ValueError(f"{name} must be from {least:g} to {most:g}, got {value!r:.40}")
    return float(value)


def _as_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r:.40}")
    return value
