"""llama.cpp through llama-cpp-python, in its own environment (``orch runtimes install llamacpp``).

Artifact: the plan's GGUF itself (the class is its format); `engine: {gguf: Q4_0}` picks a sibling
format made from the same source. Engine options the driver reads: `repack` (default false: the
CPU repack path faults on AMX-capable CPUs for quantized models), `n_batch` (prefill batch; default
the plan's chunk width), `omp_wait_policy` (default: OpenMP's own), `verbose` (llama.cpp's debug log).
llama.cpp keeps no on-disk caches: no cold caches to record.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from orchestrator.protocol import TrialSpec
from orchestrator.runners import LocalRunner
from orchestrator.runners.cache import RuntimeContext
from orchestrator.runtimes.process import Artifact, ArtifactError, DriverAdapter
from orchestrator.runtimes.source import gguf_bytes_per_token, quant_class, source_dir, vocab_size


class LlamaCpp(DriverAdapter):
    name = "llamacpp"
    driver = "llamacpp_driver.py"

    def beside(self, engine: Mapping[str, Any]) -> tuple[str, ...]:
        fmt = engine.get("gguf")
        return ("config.json", *([f"model-{fmt}.gguf"] if fmt else []))  # the vocabulary; a sibling format

    async def artifact(self, ctx: RuntimeContext, spec: TrialSpec) -> Artifact:
        model = spec.model
        if fmt := spec.tuning.get("gguf"):
            model = posixpath.join(source_dir(spec.model), f"model-{fmt}.gguf")
        if not model.endswith(".gguf"):
            raise ArtifactError(f"llama.cpp loads GGUF files; {model} is not one")
        if not await ctx.runner.exists(model):
            raise ArtifactError(f"model not found: {model}",
                                detail="make it with: orch model make (it writes F32, Q8_0 and Q4_0 GGUF files)")
        per_token = gguf_bytes_per_token(model) if isinstance(ctx.runner, LocalRunner) else None
        return Artifact(path=model, bytes_per_token=per_token, quant_class=quant_class(model))

    async def vocab(self, ctx: RuntimeContext, spec: TrialSpec) -> int:
        return await vocab_size(ctx.runner, spec.model)

    def env_vars(self, spec: TrialSpec) -> dict[str, str]:
        # llama.cpp as it ships: OpenMP spin-waits between ops. That is its fastest on a quiet host
        # (m110 Q4_0, 2 threads: ~100 tok/s vs ~60 passive) and collapses when anything else wants a
        # core (Q8_0: 7 vs 90 tok/s passive on a busy 2-core host); the settle gate keeps the host
        # quiet, and `omp_wait_policy: PASSIVE` is there for hosts that cannot be.
        env = {"OMP_NUM_THREADS": str(spec.threads)} if spec.threads else {}
        if "omp_wait_policy" in spec.tuning:
            env["OMP_WAIT_POLICY"] = str(spec.tuning["omp_wait_policy"])
        return env


ADAPTER = LlamaCpp()
