"""MLX through mlx-lm, in its own environment (``orch runtimes install mlx``), labelled "CPU, Linux":
on a Linux host it runs MLX's CPU backend and says nothing about MLX on Apple silicon.

Artifact: the source HF folder itself (mlx-lm reads it); the class is applied at load with MLX's
own quantizer (Q8_0 -> 8 bits, Q4_0 -> 4 bits, group size 32; `engine: {bits: 4}` overrides).
Bytes per decode token are computed from the shapes: every matrix at its bits plus the group scales
and biases, the tied head included. MLX keeps no on-disk caches; it picks its own thread count.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from orchestrator.protocol import TrialSpec
from orchestrator.runners.cache import RuntimeContext
from orchestrator.runtimes.process import Artifact, ArtifactError, DriverAdapter
from orchestrator.runtimes.source import MLX_BITS, quant_class, read_json, source_dir, vocab_size


def bytes_per_token(config: dict[str, object], bits: int | None, group: int = 32) -> int:
    def n(key: str) -> int:
        return int(str(config[key]))

    d, h, layers, vocab = n("hidden_size"), n("intermediate_size"), n("num_hidden_layers"), n("vocab_size")
    kv = n("num_key_value_heads") * (d // n("num_attention_heads"))
    weights = layers * (2 * d * d + 2 * d * kv + 3 * d * h) + vocab * d  # the head (tied: the embedding)
    per = bits / 8 + 2 * 4 / group if bits else 4.0  # scales and biases in float32, the source's dtype
    return int(weights * per)


class Mlx(DriverAdapter):
    name = "mlx"
    driver = "mlx_driver.py"

    def beside(self, engine: Mapping[str, Any]) -> tuple[str, ...]:
        return ("config.json", "model.safetensors")  # mlx-lm loads the HF folder

    def bits(self, spec: TrialSpec) -> int | None:
        if "bits" in spec.tuning:
            return int(spec.tuning["bits"]) or None
        return MLX_BITS.get(quant_class(spec.model))

    async def artifact(self, ctx: RuntimeContext, spec: TrialSpec) -> Artifact:
        folder = source_dir(spec.model)
        config = await read_json(ctx.runner, posixpath.join(folder, "config.json"))
        if config is None or not await ctx.runner.exists(posixpath.join(folder, "model.safetensors")):
            raise ArtifactError(f"MLX reads the HF files beside the GGUF: none in {folder}")
        bits = self.bits(spec)
        klass = {8: "Q8_0", 4: "Q4_0"}.get(bits or 0, "F32")
        return Artifact(path=folder, bytes_per_token=bytes_per_token(config, bits), quant_class=klass)

    def job(self, spec: TrialSpec, art: Artifact, prompt: list[int]) -> dict[str, object]:
        job = super().job(spec, art, prompt)
        job["options"] = {**dict(spec.tuning), "bits": self.bits(spec)}
        return job

    async def vocab(self, ctx: RuntimeContext, spec: TrialSpec) -> int:
        return await vocab_size(ctx.runner, spec.model)


ADAPTER = Mlx()
