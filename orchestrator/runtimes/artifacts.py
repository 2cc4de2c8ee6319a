"""What a run puts on its devices: the plan's model, and the files beside it that its arms read.

A plan's `model` is a file on the controller (`model_location: controller`, the default). Each
device that needs it gets it as `Artifacts.files`, named ``models/<sha256[:16] of the model>/<file>``
relative to the device's own root: an SSH host's cache folder, the harness app's Documents on an
iPhone. The folder is named by the model's content, so two models never share one, a changed model
never overwrites the one a run on another controller reads, and the files beside it stay siblings
(llama.cpp's `gguf: Q4_0` reads a sibling GGUF; converting runtimes read config.json,
model.safetensors and manifest.json beside it).

What each kind of device gets:
- a host: the model and the files beside it that any arm's runtime reads (`DriverAdapter.beside`),
  those that exist (one that is missing fails that arm's trials with its own message, as before);
  a local host reads them where they are, an SSH host gets a copy.
- an iPhone: the model alone (the harness app reads one GGUF), into the Documents of each app that
  runs one of the plan's runtimes (the harness app; an `engine_apps` app as well where an arm runs it).
- a sim: nothing (the model is a label in its ground truth).
With `model_location: device` the plan's `model` is already on every device: nothing is pushed.

An arm's `tuning_table` (a harness tuning table on the controller, as `orch export-tuning` writes it)
goes to hosts and iPhones beside the model, as ``tuning/<sha256[:16] of the table>/<file>``; the
spec names it (`tuning_table`) and the harness loads it as it loads `--tuning`. It is deployed
whatever `model_location` says; sims take nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from orchestrator.config.fleet import Fleet, HostDeviceConfig, IphoneDeviceConfig
from orchestrator.config.plan import Arm, Plan
from orchestrator.config.sim import SimDeviceConfig
from orchestrator.protocol import HarnessTuningTable, harness_engine
from orchestrator.protocol.device import ArtifactFile, Artifacts
from orchestrator.runtimes import catalog
from orchestrator.runtimes.process import DriverAdapter

PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
_HASHED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: each file hashed once per process


def sha256_file(path: Path) -> str:
    """The file's sha256, read in 1 MiB chunks (never whole); remembered while it is unchanged."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHED[key] = h.hexdigest()
    return _HASHED[key]


def model_file(plan: Plan) -> Path:
    """The plan's model on the controller, absolute."""
    return Path(os.path.expanduser(plan.model)).absolute()


def _real_devices(plan: Plan, fleet: Fleet) -> bool:
    chosen = [d for d in fleet.devices if plan.devices is None or d.id in plan.devices]
    return any(not isinstance(d, SimDeviceConfig) for d in chosen)


def deploys(plan: Plan, fleet: Fleet) -> bool:
    """Whether the run puts the model on devices: it lives on the controller and a real device runs."""
    return plan.model_location == "controller" and _real_devices(plan, fleet)


def tuning_file(arm: Arm) -> Path | None:
    """The arm's tuning table on the controller, absolute (None when it names none)."""
    return None if arm.tuning_table is None else Path(os.path.expanduser(arm.tuning_table)).absolute()


def tuning_problem(arm: Arm) -> str | None:
    """Why the arm's tuning table cannot be deployed (None when it can, or it names none)."""
    path = tuning_file(arm)
    if path is None:
        return None
    if (runtime := catalog.get(arm.runtime)) is None or runtime.kind != "harness":
        engines = ", ".join(r.name for r in catalog.CATALOG.values() if r.kind == "harness")
        return f"only the harness's engines ({engines}) read a tuning table; {arm.runtime!r} does not"
    if not path.is_file():
        return f"no tuning table {path} on this machine (`orch export-tuning RUN --out FILE` writes one)"
    if not PLAIN_NAME.match(path.name):
        return f"the tuning table's file name {path.name!r} is not plain (letters, digits, _ . + -): rename the file"
    try:
        table = HarnessTuningTable.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        return f"{path} is not a harness tuning table ({{\"engine\", \"device\", \"params\"}}): {first}"
    engine = harness_engine(arm.runtime)
    if table.engine != engine:
        return f"{path} is a table for {table.engine!r}; the arm runs {arm.runtime!r} (engine {engine!r})"
    return None


def model_problem(plan: Plan, fleet: Fleet) -> str | None:
    """Why the plan's model cannot be deployed to this fleet (None when it can, or need not be)."""
    if not deploys(plan, fleet):
        return None
    path = model_file(plan)
    if not path.is_file():
        return (f"no model file {path} on this machine (model_location: controller; make it with "
                f"`orch model make`, or set model_location: device for a path already on every device)")
    if not PLAIN_NAME.match(path.name):
        return f"the model's file name {path.name!r} is not plain (letters, digits, _ . + -): rename the file"
    return None


def beside(plan: Plan) -> list[str]:
    """File names of the model's folder that the plan's arms read on a host besides the model itself."""
    names: list[str] = []
    for arm in plan.arms:
        adapter = catalog.adapter_for(arm.runtime)
        if isinstance(adapter, DriverAdapter):
            names += [n for n in adapter.beside(arm.engine) if n not in names]
    return names


def _file(path: Path, folder: str) -> ArtifactFile:
    return ArtifactFile(source=str(path), sha256=sha256_file(path), size=path.stat().st_size,
                        name=f"{folder}/{path.name}")


def host_files(plan: Plan) -> Artifacts:
    """The model and what the arms read beside it, for a host."""
    model = model_file(plan)
    folder = f"models/{sha256_file(model)[:16]}"
    files = [_file(model, folder)]
    for name in beside(plan):
        sibling = model.with_name(name)
        if name != model.name and sibling.is_file() and PLAIN_NAME.match(name):
            files.append(_file(sibling, folder))
    return Artifacts(files=files, model=files[0].name)


def tuning_files(plan: Plan) -> tuple[list[ArtifactFile], dict[str, str]]:
    """The arms' tuning tables (each once) and, per arm, the name of its own."""
    files: dict[str, ArtifactFile] = {}
    by_arm: dict[str, str] = {}
    for arm in plan.arms:
        path = tuning_file(arm)
        if path is not None:
            f = _file(path, f"tuning/{sha256_file(path)[:16]}")
            files.setdefault(f.name, f)
            by_arm[arm.name] = f.name
    return list(files.values()), by_arm


def artifacts_for(plan: Plan, fleet: Fleet) -> dict[str, Artifacts]:
    """What prepare puts on each of the run's devices (devices that need nothing are left out)."""
    tables, by_arm = tuning_files(plan)
    if not _real_devices(plan, fleet) or not (deploys(plan, fleet) or tables):
        return {}
    host = host_files(plan) if deploys(plan, fleet) else Artifacts()
    engines = list(dict.fromkeys(arm.runtime for arm in plan.arms))
    host = host.model_copy(update={"files": [*host.files, *tables], "tuning": by_arm})
    phone = Artifacts(files=[*host.files[:1 if host.model else 0], *tables], model=host.model, engines=engines,
                      tuning=by_arm)
    out: dict[str, Artifacts] = {}
    for d in fleet.devices:
        if plan.devices is not None and d.id not in plan.devices:
            continue
        if isinstance(d, HostDeviceConfig):
            out[d.id] = host
        elif isinstance(d, IphoneDeviceConfig):
            out[d.id] = phone
    return out


__all__ = ["artifacts_for", "beside", "deploys", "host_files", "model_file", "model_problem", "sha256_file",
           "tuning_file", "tuning_files", "tuning_problem"]
