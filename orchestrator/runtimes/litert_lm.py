"""Google LiteRT-LM on its CPU backend (XNNPACK), in its own environment (``orch runtimes install litert-lm``).

Artifact: the source HF folder re-authored with litert-torch's generative API and converted to a
``.litertlm`` file by ``drivers/litertlm_convert.py`` in the runtime's environment, in the plan
model's class with litert-torch's recipes (Q8_0 -> dynamic_int8, Q4_0 -> dynamic_int4_block32,
F32 -> none, i.e. fp32; `engine: {quantize: <recipe>}` overrides), cached by content
(``converted.py``). The trial runs the real LiteRT-LM engine
(litert-lm-api) through ``drivers/litertlm_driver.py``: token ids in and out through a word-level
tokenizer packed into the model (id i <-> word ``w<i>``), greedy, exactly decode_tokens tokens.

Caches: XNNPACK's packed-weight cache (`xnnpack_cache`), which LiteRT-LM writes into the engine's
cache folder: the driver points it at ``<artifact>/cache`` (never the home folder) and empties it
when the plan's clear_caches names it, so a trial can load cold.
"""

from __future__ import annotations

from orchestrator.runtimes.converted import ConvertingAdapter
from orchestrator.runtimes.source import LITERT_QUANT


class LiteRtLm(ConvertingAdapter):
    name = "litert-lm"
    driver = "litertlm_driver.py"
    cache_names = ("xnnpack_cache",)
    converter = "litertlm_convert.py"
    marker = "model.litertlm"
    tool = "litert-torch"
    recipes = LITERT_QUANT
    option = "quantize"


ADAPTER = LiteRtLm()
