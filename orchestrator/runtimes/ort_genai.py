"""ONNX Runtime GenAI, in its own environment (``orch runtimes install ort-genai``).

Artifact: the source HF folder converted by GenAI's model builder to the plan model's class
(Q8_0 -> int8, Q4_0 -> int4, F32 -> fp32; `engine: {precision: int4}` overrides), cached under
``<cache>/artifacts/ort-genai/<source sha256>-<precision>-<builder version>-<converter sha256>``. The conversion runs
on the host in the runtime's environment and is renamed into place only when complete.
GenAI keeps no on-disk caches of its own (no compiled-graph cache is configured).
"""

from __future__ import annotations

import hashlib
import posixpath

from orchestrator.devices.runners import RunnerError
from orchestrator.protocol import TrialSpec
from orchestrator.runtimes.base import RuntimeContext, register
from orchestrator.runtimes.envs import host_cache, host_env_python, installed_on
from orchestrator.runtimes.process import DRIVERS, ERROR, Artifact, ArtifactError, DriverAdapter, tail
from orchestrator.runtimes.source import (
    ORT_PRECISION,
    quant_class,
    read_json,
    source_digest,
    source_dir,
    vocab_size,
)

CONVERT_TIMEOUT_S = 1800.0


class OrtGenAI(DriverAdapter):
    name = "ort-genai"
    label = "ONNX Runtime GenAI"
    driver = "ortgenai_driver.py"

    def precision(self, spec: TrialSpec) -> str:
        want = spec.tuning.get("precision")
        return str(want) if want else ORT_PRECISION.get(quant_class(spec.model), "fp32")

    async def artifact(self, ctx: RuntimeContext, spec: TrialSpec) -> Artifact:
        precision = self.precision(spec)
        try:
            digest = await source_digest(ctx.runner, spec.model)
        except ValueError as exc:
            raise ArtifactError(f"ort-genai converts from the HF files beside the GGUF: {exc}") from None
        env = await installed_on(ctx.runner, self.name)
        builder = (env.versions.get("onnxruntime-genai", "0") if env else "0").replace("+", "_")
        script = hashlib.sha256((DRIVERS / "ortgenai_convert.py").read_bytes()).hexdigest()[:8]
        out = f"{await host_cache(ctx.runner)}/artifacts/ort-genai/{digest[:16]}-{precision}-{builder}-{script}"
        klass = {"fp32": "F32", "int8": "Q8_0", "int4": "Q4_0"}.get(precision, precision)
        if not await ctx.runner.exists(posixpath.join(out, "genai_config.json")):
            await self._convert(ctx, source_dir(spec.model), out, precision)
        facts = await read_json(ctx.runner, posixpath.join(out, "orch_artifact.json")) or {}
        per_token = facts.get("bytes_per_decode_token")  # counted by the converter from the ONNX initializers
        return Artifact(path=out, bytes_per_token=int(per_token) if per_token else None, quant_class=klass)

    async def _convert(self, ctx: RuntimeContext, hf: str, out: str, precision: str) -> None:
        python = await host_env_python(ctx.runner, self.name)
        script = f"{ctx.workdir}/runtimes/drivers/ortgenai_convert.py"
        await ctx.runner.put(DRIVERS / "ortgenai_convert.py", script)
        await ctx.runner.run(["mkdir", "-p", posixpath.dirname(out)], timeout=30)
        try:
            res = await ctx.runner.run([python, script, hf, out, precision], timeout=CONVERT_TIMEOUT_S)
        except RunnerError as exc:
            raise ArtifactError(f"ort-genai conversion to {precision} lost its host: {exc}") from None
        if not res.ok or not await ctx.runner.exists(posixpath.join(out, "genai_config.json")):
            why = next((ln for ln in res.stdout.splitlines() if ln.startswith(ERROR)), "")
            raise ArtifactError(f"ort-genai conversion to {precision} failed {why}".strip(), detail=tail(res))

    async def vocab(self, ctx: RuntimeContext, spec: TrialSpec) -> int:
        return await vocab_size(ctx.runner, spec.model)


ADAPTER = register(OrtGenAI())
