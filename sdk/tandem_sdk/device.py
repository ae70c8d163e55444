"""What this device can do, detected once per process, sent to the gateway as `X-Tandem-Device`.

Only the standard library (and onnxruntime if the app has it): cores, RAM,
execution providers, battery and charging where the OS exposes them. The
network kind cannot be detected portably. The app sets it (e.g. "metered"),
as it may any other field.
"""

import functools
import json
import os
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
        unknown = set(overrides) - set(self.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown device field(s) {sorted(unknown)}; known: {sorted(self.__dataclass_fields__)}")
        return replace(self, **overrides)


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
