"""Google LiteRT-LM on its CPU backend (XNNPACK), in its own environment (``orch runtimes install litert-lm``).

Artifact: the source HF folder re-authored with litert-torch's generative API and converted to a
``.litertlm`` file by ``drivers/litertlm_convert.py`` in the runtime's environment, in the plan
model's class with litert-torch's recipes (Q8_0 -> dynamic_int8, Q4_0 -> dynamic_int4_block32,
F32 -> none, i.e. fp32; `engine: {quantize: <recipe>}` overrides), cached under
``<cache>/artifacts/litert-lm/<source sha256[:16]>-<recipe>-<litert-torch version>-<converter sha256[:8]>``,
written beside and renamed into place only when complete. The trial runs the real LiteRT-LM engine
(litert-lm-api) through ``drivers/litertlm_driver.py``: token ids in and out through a word-level
tokenizer packed into the model (id i <-> word ``w<i>``), greedy, exactly decode_tokens tokens.

Caches: XNNPACK's packed-weight cache (`xnnpack_cache`), which LiteRT-LM writes into the engine's
cache folder: the driver points it at ``<artifact>/cache`` (never the home folder) and empties it
when the plan's clear_caches names it, so a trial can load cold.
"""

from __future__ import annotations

import hashlib
import posixpath

from orchestrator.devices.runners import RunnerError
from orchestrator.protocol import TrialSpec
from orchestrator.runtimes.base import RuntimeContext, register
from orchestrator.runtimes.envs import host_cache, host_env_python, installed_on
from orchestrator.runtimes.process import DRIVERS, ERROR, Artifact, ArtifactError, DriverAdapter, tail
from orchestrator.runtimes.source import LITERT_QUANT, quant_class, read_json, source_digest, source_dir, vocab_size

CONVERT_TIMEOUT_S = 1800.0
CONVERTER = "litertlm_convert.py"
MODEL_FILE = "model.litertlm"


class LiteRtLm(DriverAdapter):
    name = "litert-lm"
    label = "LiteRT-LM (CPU)"
    driver = "litertlm_driver.py"
    cache_names = ("xnnpack_cache",)

    def quantize(self, spec: TrialSpec) -> str:
        want = spec.tuning.get("quantize")
        return str(want) if want else LITERT_QUANT.get(quant_class(spec.model), "none")

    async def artifact(self, ctx: RuntimeContext, spec: TrialSpec) -> Artifact:
        recipe = self.quantize(spec)
        try:
            digest = await source_digest(ctx.runner, spec.model)
        except ValueError as exc:
            raise ArtifactError(f"litert-lm converts from the HF files beside the GGUF: {exc}") from None
        env = await installed_on(ctx.runner, self.name)
        version = (env.versions.get("litert-torch", "0") if env else "0").replace("+", "_")
        script = hashlib.sha256((DRIVERS / CONVERTER).read_bytes()).hexdigest()[:8]
        out = f"{await host_cache(ctx.runner)}/artifacts/litert-lm/{digest[:16]}-{recipe}-{version}-{script}"
        klass = {v: k for k, v in LITERT_QUANT.items()}.get(recipe, recipe)
        if not await ctx.runner.exists(posixpath.join(out, MODEL_FILE)):
            await self._convert(ctx, source_dir(spec.model), out, recipe)
        facts = await read_json(ctx.runner, posixpath.join(out, "orch_artifact.json")) or {}
        per_token = facts.get("bytes_per_decode_token")  # counted by the converter from the TFLite constants
        return Artifact(path=out, bytes_per_token=int(per_token) if per_token else None, quant_class=klass)

    async def _convert(self, ctx: RuntimeContext, hf: str, out: str, recipe: str) -> None:
        python = await host_env_python(ctx.runner, self.name)
        script = f"{ctx.workdir}/runtimes/drivers/{CONVERTER}"
        await ctx.runner.put(DRIVERS / CONVERTER, script)
        await ctx.runner.run(["mkdir", "-p", posixpath.dirname(out)], timeout=30)
        try:
            res = await ctx.runner.run([python, script, hf, out, recipe], timeout=CONVERT_TIMEOUT_S)
        except RunnerError as exc:
            raise ArtifactError(f"litert-lm conversion to {recipe} lost its host: {exc}") from None
        if not res.ok or not await ctx.runner.exists(posixpath.join(out, MODEL_FILE)):
            why = next((ln for ln in res.stdout.splitlines() if ln.startswith(ERROR)), "")
            raise ArtifactError(f"litert-lm conversion to {recipe} failed {why}".strip(), detail=tail(res))

    async def vocab(self, ctx: RuntimeContext, spec: TrialSpec) -> int:
        return await vocab_size(ctx.runner, spec.model)


ADAPTER = register(LiteRtLm())
