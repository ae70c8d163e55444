"""What this device can do, detected once per process, sent to the gateway as `X-Tandem-Device`.

Only the standard library (and onnxruntime if the app has it): cores, RAM,
execution providers, battery and charging where the OS exposes them. The
network kind cannot be detected portably. The app sets it (e.g. "metered"),
as it may any other field.
"""

import functools
import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

NPU_PROVIDERS = {"QNNExecutionProvider", "OpenVINOExecutionProvider", "VitisAIExecutionProvider",
                 "CoreMLExecutionProvider", "DmlExecutionProvider"}  # fmt: skip
GPU_PROVIDERS = {"CUDAExecutionProvider", "ROCMExecutionProvider", "TensorrtExecutionProvider", "DmlExecutionProvider"}


@dataclass(frozen=True)
class DeviceCapability:
    npu: bool = False
    gpu: bool = False
    cores: int | None = None
    ram_gb: float | None = None
    battery: float | None = None  # 0..1
    charging: bool | None = None
    network: str | None = None  # "wifi", "cellular", "metered", … (the app knows)
    providers: tuple[str, ...] = field(default_factory=tuple)  # onnxruntime execution providers present

    def header(self) -> str:
        """The X-Tandem-Device value: JSON, unset fields left out."""
        data = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        return json.dumps({k: v for k, v in data.items() if v not in (None, [])}, separators=(",", ":"))

    def with_overrides(self, overrides: dict) -> "DeviceCapability":
        """This device with the app's own words for some fields, each checked as the gateway reads X-Tandem-Device:
        `{"npu": "yes"}` was refused by the gateway only, after the request was sent (a review)."""
        if not isinstance(overrides, dict):
            raise TypeError(f"device must be a dict of fields, not {type(overrides).__name__}")
        unknown = set(overrides) - set(self.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown device field(s) {sorted(unknown)}; known: {sorted(self.__dataclass_fields__)}")
        for name, value in overrides.items():
            if value is not None and (problem := _FIELD_CHECKS[name](value)):
                raise ValueError(f"device {name}: {problem}, not {value!r}")
        return replace(self, **{k: tuple(v) if k == "providers" else v for k, v in overrides.items()})


def _number(value: object, least: float, most: float) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and least <= value <= most


# What X-Tandem-Device's words may be, here and at the gateway (gateway/classify/features.py reads them from here):
# onnxruntime's provider names (CPUExecutionProvider, QNNExecutionProvider), at most 32, and the app's own words for
# the network (`cellular (5G)`), one line
PROVIDER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
NETWORK_WORDS = re.compile(r"[^\x00-\x1f\x7f-\x9f\u2028\u2029]{1,32}")
MAX_PROVIDERS = 32
_FIELD_CHECKS = {
    "npu": lambda v: None if isinstance(v, bool) else "True or False",
    "gpu": lambda v: None if isinstance(v, bool) else "True or False",
    "charging": lambda v: None if isinstance(v, bool) else "True or False",
    "cores": lambda v: None if not isinstance(v, bool) and isinstance(v, int) and v >= 1 else "a whole number from 1",
    "ram_gb": lambda v: None if _number(v, 0, 1e6) else "a number of GB from 0 to 10**6",
    "battery": lambda v: None if _number(v, 0, 1) else "a number from 0 (empty) to 1 (full)",
    "network": lambda v: None if isinstance(v, str) and NETWORK_WORDS.fullmatch(v) else "1-32 characters on one line",
    "providers": lambda v: (
        None
        if isinstance(v, list | tuple)
        and len(v) <= MAX_PROVIDERS
        and all(isinstance(p, str) and PROVIDER_NAME.fullmatch(p) for p in v)
        else "at most 32 onnxruntime execution providers' names"
    ),
}


@functools.cache
def detect_device() -> DeviceCapability:
    providers = _providers()
    battery, charging = _battery()
    return DeviceCapability(
        npu=bool(NPU_PROVIDERS & set(providers)),
        gpu=bool(GPU_PROVIDERS & set(providers)),
        cores=os.cpu_count(),
        ram_gb=_ram_gb(),
        battery=battery,
        charging=charging,
        providers=providers,
    )


def _providers() -> tuple[str, ...]:
    try:
        import onnxruntime
    except ImportError:
        return ()
    return tuple(onnxruntime.get_available_providers())


def _ram_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None  # not exposed this way (Windows)


def _battery() -> tuple[float | None, bool | None]:
    """Linux exposes batteries under /sys/class/power_supply; elsewhere the app can pass them in."""
    for supply in sorted(Path("/sys/class/power_supply").glob("*")):
        try:
            if (supply / "type").read_text().strip() != "Battery":
                continue
            capacity = int((supply / "capacity").read_text()) / 100
            status = (supply / "status").read_text().strip()
        except (OSError, ValueError):
            continue
        return capacity, status in ("Charging", "Full")
    return None, None
