"""Read the GPU's SM clock, temperature and throttle reasons through NVML, never changing them.

NVML comes from the `nvidia-ml-py` package (module `pynvml`). Where it or the driver is missing,
`open_probe` returns None and rows simply carry no machine state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

# Throttle reasons that slow the clock below what the workload asks for. Idle, application
# clock settings and sync boost are not throttling.
THROTTLING = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x40: "thermal (software)",
    0x80: "thermal (hardware)",
    0x100: "power brake",
}


@dataclass(frozen=True)
class Reading:
    sm_mhz: int
    temp_c: int
    reasons: int  # NVML's bit mask

    @property
    def throttled(self) -> list[str]:
        return [name for bit, name in THROTTLING.items() if self.reasons & bit]


@dataclass
class Probe:
    """Reads one GPU; `log` keeps (samples since the last reading, reading) pairs."""

    nvml: Any
    handle: Any
    log: list[tuple[int, Reading]] = field(default_factory=list)

    def read(self) -> Reading:
        nvml = self.nvml
        getter = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # before driver 535's rename
        )
        return Reading(
            sm_mhz=int(nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_SM)),
            temp_c=int(nvml.nvmlDeviceGetTemperature(self.handle, nvml.NVML_TEMPERATURE_GPU)),
            reasons=int(getter(self.handle)),
        )

    def after(self, samples: int) -> None:
        """Record a reading for the `samples` just taken (the sampler's after_batch hook)."""
        self.log.append((samples, self.read()))

    def summary(self) -> dict[str, Any] | None:
        """Clock and temperature ranges over the log, and how many samples were throttled."""
        if not self.log:
            return None
        readings = [r for _, r in self.log]
        reasons = sorted({name for r in readings for name in r.throttled})
        return {
            "sm_mhz": [min(r.sm_mhz for r in readings), max(r.sm_mhz for r in readings)],
            "temp_c": [min(r.temp_c for r in readings), max(r.temp_c for r in readings)],
            "throttled_samples": sum(n for n, r in self.log if r.throttled),
            "samples": sum(n for n, _ in self.log),
            "reasons": reasons,
        }


def open_probe(device: torch.device) -> Probe | None:
    """A probe of `device` (a CUDA device), or None where NVML is not available."""
    try:
        import pynvml

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        probe = Probe(pynvml, handle)
        probe.read()
    except Exception as err:  # no package, no driver, an old driver: rows go without state
        print(f"machine state not recorded: {type(err).__name__}: {err}", flush=True)
        return None
    return probe
