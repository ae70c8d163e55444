"""What this device can do, as the edge agent reports it: providers, NPU, RAM, cores, battery.

Read from the OS where it tells (Linux /proc and /sys); a field the OS does
not expose is None, never a guess.
"""

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import onnxruntime as ort

from edge_agent.providers import NPU_PROVIDERS


@dataclass(frozen=True)
class DeviceReport:
    execution_providers: tuple[str, ...]
    npu: bool
    cores: int | None
    ram_gb: float | None
    battery: float | None  # 0..1
    charging: bool | None
    network: str | None = None  # the agent cannot tell metered links apart; the SDK may

    def as_dict(self) -> dict:
        return asdict(self) | {"execution_providers": list(self.execution_providers)}


def _ram_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _battery() -> tuple[float | None, bool | None]:
    for supply in sorted(Path("/sys/class/power_supply").glob("BAT*")):
        try:
            capacity = int((supply / "capacity").read_text()) / 100
            status = (supply / "status").read_text().strip()
            return capacity, status in ("Charging", "Full")
        except (OSError, ValueError):
            continue
    return None, None


def probe() -> DeviceReport:
    providers = tuple(ort.get_available_providers())
    battery, charging = _battery()
    return DeviceReport(
        execution_providers=providers,
        npu=any(p in NPU_PROVIDERS for p in providers),
        cores=os.cpu_count(),
        ram_gb=_ram_gb(),
        battery=battery,
        charging=charging,
    )
