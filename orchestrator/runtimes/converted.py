"""Runtimes that load a format of their own, converted from the one source model: the HF folder
beside the plan's GGUF goes through the runtime's converter script (``drivers/*_convert.py``), run
in the runtime's environment on the host, into the quantization recipe that matches the plan
model's class (or the arm's override).

The artifact is cached under ``<host cache>/artifacts/<runtime>/<source sha256[:16]>-<recipe>-
<converter tool version>-<converter script sha256[:8]>``: new weights, a new recipe, a new tool or
a changed script each make a new one. The converter writes beside and renames into place, so a
failed or killed conversion never leaves a half-written artifact; it may write
``orch_artifact.json`` with the weight bytes one decode step reads.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping
from typing import Any

from orchestrator.protocol import TrialSpec
from orchestrator.runners import RunnerError
from orchestrator.runners.cache import RuntimeContext, host_cache
from orchestrator.runtimes.envs import host_env_python, installed_on
from orchestrator.runtimes.process import DRIVERS, ERROR, Artifact, ArtifactError, DriverAdapter, tail
from orchestrator.runtimes.source import quant_class, read_json, source_digest, source_dir, vocab_size

CONVERT_TIMEOUT_S = 1800.0


class ConvertingAdapter(DriverAdapter):
    converter: str  # file name under drivers/: `python CONVERTER HF_FOLDER OUT RECIPE`
    marker: str  # a file in the artifact folder that exists once the conversion is complete
    tool: str  # the package whose version names the cache entry
    recipes: Mapping[str, str]  # our quantization class -> the runtime's recipe
    option: str  # the engine option that overrides the recipe

    def beside(self, engine: Mapping[str, Any]) -> tuple[str, ...]:
        return ("config.json", "model.safetensors", "manifest.json")  # what it converts, and its digest

    def recipe(self, spec: TrialSpec) -> str:
        want = spec.tuning.get(self.option)
        return str(want) if want else self.recipes.get(quant_class(spec.model), self.recipes["F32"])

    def requested_class(self, engine: Mapping[str, Any]) -> str | None:
        """Our class for an arm's recipe override (`precision: int4` -> Q4_0), when it names one."""
        want = engine.get(self.option)
        return next((k for k, v in self.recipes.items() if v == want), None) if want else None

    async def artifact(self, ctx: RuntimeContext, spec: TrialSpec) -> Artifact:
        recipe = self.recipe(spec)
        try:
            digest = await source_digest(ctx.runner, spec.model)
        except ValueError as exc:
            raise ArtifactError(f"{self.name} converts from the HF files beside the GGUF: {exc}") from None
        env = await installed_on(ctx.runner, self.name)
        version = (env.versions.get(self.tool, "0") if env else "0").replace("+", "_")
        script = hashlib.sha256((DRIVERS / self.converter).read_bytes()).hexdigest()[:8]
        out = f"{await host_cache(ctx.runner)}/artifacts/{self.name}/{digest[:16]}-{recipe}-{version}-{script}"
        if not await ctx.runner.exists(posixpath.join(out, self.marker)):
            await self._convert(ctx, source_dir(spec.model), out, recipe)
        facts = await read_json(ctx.runner, posixpath.join(out, "orch_artifact.json")) or {}
        per_token = facts.get("bytes_per_decode_token")  # counted by the converter from the converted weights
        klass = next((k for k, v in self.recipes.items() if v == recipe), recipe)
        return Artifact(path=out, bytes_per_token=int(per_token) if per_token else None, quant_class=klass)

    async def _convert(self, ctx: RuntimeContext, hf: str, out: str, recipe: str) -> None:
        python = await host_env_python(ctx.runner, self.name)
        script = f"{ctx.workdir}/runtimes/drivers/{self.converter}"
        await ctx.runner.put(DRIVERS / self.converter, script)
        await ctx.runner.run(["mkdir", "-p", posixpath.dirname(out)], timeout=30)
        try:
            res = await ctx.runner.run([python, script, hf, out, recipe], timeout=CONVERT_TIMEOUT_S)
        except RunnerError as exc:
            raise ArtifactError(f"{self.name} conversion to {recipe} lost its host: {exc}") from None
        if not res.ok or not await ctx.runner.exists(posixpath.join(out, self.marker)):
            why = next((ln for ln in res.stdout.splitlines() if ln.startswith(ERROR)), "")
            raise ArtifactError(f"{self.name} conversion to {recipe} failed {why}".strip(), detail=tail(res))

    async def vocab(self, ctx: RuntimeContext, spec: TrialSpec) -> int:
        return await vocab_size(ctx.runner, spec.model)


__all__ = ["CONVERT_TIMEOUT_S", "ConvertingAdapter"]
