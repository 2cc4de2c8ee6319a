"""The simulated lab the documentation's screenshots are made from (docs/site_demo.py, docs/report_demo.py).

Two simulated devices run the Metal raw loop nightly; from night `slow_from` on, the candidate build
is `slow` times the reference's speed on the iPhone (its ground truth), while the Mac stays level.
"""

from __future__ import annotations

from typing import Any


def nightly_lab(night: int, nights: int, *, slow_from: int, slow: float = 0.94, phone: dict[str, Any] | None = None,
                phone_runtime: dict[str, Any] | None = None, mac: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fleet file of night `night` (seeds differ per night); `phone`, `phone_runtime` and `mac` add fields."""
    builds = {"ref": 1.0} | {f"n{k:02d}": slow if k >= slow_from else 1.0 for k in range(1, nights + 1)}
    return {"name": "demo", "devices": [
        {"id": "iphone17pro", "kind": "sim", "model": "iPhone 17 Pro", "chip_class": "A19 Pro", "seed": 100 + night,
         "bandwidth_gb_s": 60, **(phone or {}),
         "runtimes": {"rawloop-metal": {"bytes_per_token": 783e6, "efficiency": 0.73, "builds": builds,
                                        **(phone_runtime or {})}}},
        {"id": "mac-m4", "kind": "sim", "model": "Mac mini (M4)", "chip_class": "M4", "seed": 200 + night,
         "bandwidth_gb_s": 100, "noise": {"sigma": 0.03}, **(mac or {}),
         "runtimes": {"rawloop-metal": {"bytes_per_token": 783e6, "efficiency": 0.8,
                                        "builds": dict.fromkeys(builds, 1.0)}}},
    ]}
