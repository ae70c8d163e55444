"""The features policy rules match on, gathered once per request."""

import json
from dataclasses import dataclass

from gateway.errors import BadRequest


@dataclass(frozen=True)
class DeviceCapability:
    """What the caller's device can do (the SDK's X-Tandem-Device header)."""

    npu: bool = False
    ram_gb: float | None = None
    battery: float | None = None  # 0..1
    network: str | None = None  # e.g. "wifi", "cellular", "metered"


@dataclass(frozen=True)
class RequestFeatures:
    prompt_tokens: int
    max_tokens: int
    privacy_tags: frozenset[str]
    device: DeviceCapability | None
    tenant: str
    priority: int = 0
    detected: tuple[str, ...] = ()  # detectors that fired on the prompt text


def parse_device_header(value: str | None) -> DeviceCapability | None:
    if not value:
        return None
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"X-Tandem-Device must be a JSON object: {exc.msg} at column {exc.colno}") from exc
    if not isinstance(raw, dict):
        raise BadRequest('X-Tandem-Device must be a JSON object, e.g. {"npu": true, "ram_gb": 8}')
    unknown = set(raw) - {"npu", "ram_gb", "battery", "network"}
    if unknown:
        raise BadRequest(f"X-Tandem-Device: unknown field(s) {sorted(unknown)}; known: npu, ram_gb, battery, network")
    try:
        return DeviceCapability(
            npu=_as_bool(raw.get("npu", False)),
            ram_gb=None if raw.get("ram_gb") is None else float(raw["ram_gb"]),
            battery=None if raw.get("battery") is None else float(raw["battery"]),
            network=None if raw.get("network") is None else str(raw["network"]),
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"X-Tandem-Device: {exc}") from exc


def _as_bool(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"npu must be true or false, got {value!r}")
    return value
