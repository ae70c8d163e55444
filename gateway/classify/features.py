"""The features policy rules match on, gathered once per request."""

import json
from dataclasses import dataclass

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


HEADER = "X-Tandem-Device"


def parse_device_header(value: str | None) -> DeviceCapability | None:
    if not value:
        return None
    try:
        raw = json.loads(value)
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
        raise BadRequest(
            f"X-Tandem-Device: unknown field(s) {sorted(unknown)}; known: {', '.join(sorted(DEVICE_FIELDS))}",
            param=HEADER,
        )
    try:
        providers = raw.get("providers") or []
        if not isinstance(providers, list) or not all(isinstance(p, str) for p in providers):
            raise ValueError("providers must be a list of strings")
        return DeviceCapability(
            npu=_as_bool("npu", raw.get("npu", False)),
            ram_gb=None if raw.get("ram_gb") is None else float(raw["ram_gb"]),
            battery=None if raw.get("battery") is None else float(raw["battery"]),
            network=None if raw.get("network") is None else str(raw["network"]),
            gpu=_as_bool("gpu", raw.get("gpu", False)),
            cores=None if raw.get("cores") is None else int(raw["cores"]),
            charging=None if raw.get("charging") is None else _as_bool("charging", raw["charging"]),
            providers=tuple(providers),
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadRequest(f"X-Tandem-Device: {exc}", param=HEADER) from exc


def _as_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value
