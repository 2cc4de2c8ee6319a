"""ONNX Runtime GenAI, in its own environment (``orch runtimes install ort-genai``).

Artifact: the source HF folder converted by GenAI's model builder (``drivers/ortgenai_convert.py``)
to the plan model's class (Q8_0 -> int8, Q4_0 -> int4, F32 -> fp32; `engine: {precision: int4}`
overrides), cached by content (``converted.py``). GenAI keeps no on-disk caches of its own (no
compiled-graph cache is configured).
"""

from __future__ import annotations

from orchestrator.runtimes.converted import ConvertingAdapter
from orchestrator.runtimes.source import ORT_PRECISION


class OrtGenAI(ConvertingAdapter):
    name = "ort-genai"
    driver = "ortgenai_driver.py"
    converter = "ortgenai_convert.py"
    marker = "genai_config.json"
    tool = "onnxruntime-genai"
    recipes = ORT_PRECISION
    option = "precision"


ADAPTER = OrtGenAI()
