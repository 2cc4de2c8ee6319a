"""Every runtime a plan's arm can name, and everything orch knows about each: one entry per runtime.

Adding a runtime is one ``Runtime`` entry here plus, for one that runs on hosts, its adapter module
(``process.DriverAdapter`` for a runtime with a driver script in an environment of its own). What
reads the catalog: the plan/fleet cross-check (which devices can run it, which caches it can clear),
``orch runtimes list/install`` (its environment), prepare (its artifact), the host device (its
adapter, injected) and the token gate (its quantizer).

Kinds:
- ``harness``: an engine inside the harness (the CLI on hosts, the app on iPhones);
- ``driver``: a competitor launched as one fresh process per trial on a host by its adapter;
- ``app``: an engine in an app of its own on an iPhone, speaking protocol v1 (a fleet maps it to the
  app in ``engine_apps``); no host adapter.
Simulated devices run whatever their ground truth names, so ``runs_on`` does not speak of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from orchestrator.runtimes import litert_lm, llamacpp, mlx, numpy_ref, ort_genai
from orchestrator.runtimes.base import RuntimeAdapter
from orchestrator.runtimes.envs import EnvSpec, versions_probe
from orchestrator.runtimes.process import DriverAdapter

Kind = Literal["harness", "driver", "app"]
Where = Literal["host", "iphone"]
HARNESS_CACHES = ("page_cache", "compiled_kernels")  # what the harness's raw loops clear (clearableCaches)


@dataclass(frozen=True)
class Runtime:
    name: str
    kind: Kind
    what: str  # one line for people: `orch runtimes list`
    label: str  # what reports call it
    runs_on: tuple[Where, ...] = ()  # where orch itself runs it (an iPhone runs more through engine_apps)
    adapter: RuntimeAdapter | None = None  # drivers: how a host launches, parses and prepares it
    env: EnvSpec | None = None  # the environment `orch runtimes install NAME` makes
    builtin: str | None = None  # how it comes when it needs no install
    own_quantizer: bool = False  # converts the HF weights with its own quantizer (the token gate's tolerance)

    @property
    def caches(self) -> tuple[str, ...] | None:
        """The caches it can clear before a trial; None where orch cannot tell (an engine in its own app)."""
        if self.kind == "harness":
            return HARNESS_CACHES
        if isinstance(self.adapter, DriverAdapter):
            return ("page_cache", *self.adapter.cache_names)
        return () if self.adapter is not None else None


CATALOG: dict[str, Runtime] = {}


def register(runtime: Runtime) -> Runtime:
    CATALOG[runtime.name] = runtime
    return runtime


def get(name: str) -> Runtime | None:
    return CATALOG.get(name)


def adapter_for(name: str) -> RuntimeAdapter | None:
    """The host adapter of a runtime (None for harness engines, app engines and unknown names)."""
    runtime = CATALOG.get(name)
    return runtime.adapter if runtime else None


def runs_on(where: Where) -> tuple[str, ...]:
    return tuple(r.name for r in CATALOG.values() if where in r.runs_on)


def installable() -> dict[str, EnvSpec]:
    return {r.name: r.env for r in CATALOG.values() if r.env is not None}


AdapterLookup = Callable[[str], RuntimeAdapter | None]

_HARNESS = "the harness (make -C ios_harness / swift build)"

register(Runtime("rawloop-cpu", "harness", "the harness's CPU raw loop (Swift)", "raw loop (CPU)",
                 runs_on=("host", "iphone"), builtin=_HARNESS))
register(Runtime("rawloop-metal", "harness", "the harness's Metal raw loop (Swift, Apple GPUs)", "raw loop (Metal)",
                 runs_on=("iphone",)))
register(Runtime("coreai", "app", "Apple's on-device engine, optionally with custom kernels", "Apple engine"))
register(Runtime(
    "llamacpp", "driver", "llama.cpp", "llama.cpp", runs_on=("host",), adapter=llamacpp.ADAPTER,
    # llama.cpp builds from source (no wheels on PyPI). Only the library is built: the examples,
    # tools, server and the multimodal library (mtmd: loaded by the binding only for vision chat
    # formats) add minutes and nothing the adapter uses.
    env=EnvSpec(
        "llamacpp", ("llama-cpp-python==0.3.36",), "import llama_cpp; " + versions_probe("llama-cpp-python"),
        "builds llama.cpp from source: ~4 min on 2 cores",
        {"CMAKE_ARGS": "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF "
                       "-DLLAMA_BUILD_SERVER=OFF -DMTMD_BUILD=OFF -DLLAVA_BUILD=OFF",
         "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)},
    )))
register(Runtime(
    "ort-genai", "driver", "ONNX Runtime GenAI", "ONNX Runtime GenAI", runs_on=("host",), adapter=ort_genai.ADAPTER,
    own_quantizer=True,
    # The model builder converts with torch; the CPU wheel is enough.
    env=EnvSpec("ort-genai", ("onnxruntime-genai==0.18.0", "torch==2.13.0", "transformers", "onnx", "onnx-ir"),
                "import onnxruntime_genai; " + versions_probe("onnxruntime-genai", "onnxruntime", "torch"),
                "wheels: ~1.5 min, ~1.5 GB")))
register(Runtime(
    "mlx", "driver", "Apple MLX (mlx-lm)", "MLX (CPU, Linux)", runs_on=("host",), adapter=mlx.ADAPTER,
    own_quantizer=True,
    env=EnvSpec("mlx", ("mlx[cpu]==0.32.4", "mlx-lm==0.32.2"), "import mlx.core; " + versions_probe("mlx", "mlx-lm"),
                "wheels: ~30 s (the CPU backend on Linux)")))
register(Runtime(
    "litert-lm", "driver", "Google LiteRT-LM", "LiteRT-LM (CPU)", runs_on=("host",), adapter=litert_lm.ADAPTER,
    own_quantizer=True,
    # LiteRT-LM's engine (litert-lm-api) runs the .litertlm file; litert-torch converts the HF weights
    # to it (and needs tensorflow-cpu without declaring it); torch pinned to the local CPU wheel.
    env=EnvSpec(
        "litert-lm", ("litert-lm==0.18.1", "litert-lm-api==0.18.1", "litert-lm-builder==0.18.1", "litert-torch==0.10.0",
                      "ai-edge-litert", "tensorflow-cpu", "torch==2.13.0"),
        "import litert_lm; " + versions_probe("litert-lm-api", "litert-torch", "ai-edge-litert", "torch"),
        "wheels: ~2 min, ~3.7 GB (tensorflow-cpu for the converter)",
    )))
register(Runtime("numpy", "driver", "the numpy reference decoder (correctness oracle)", "numpy reference",
                 runs_on=("host",), adapter=numpy_ref.ADAPTER, builtin="built in (the reference)"))
