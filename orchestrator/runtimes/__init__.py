"""The runtimes a plan's arm can name, and the adapters that launch and parse the ones hosts run.

Importing this package registers every adapter (``ADAPTERS`` in ``base``); the harness engines
(`rawloop-*`) run through the harness CLI instead.
"""

from __future__ import annotations

RUNTIMES: dict[str, str] = {
    "rawloop-cpu": "the harness's CPU raw loop (Swift)",
    "rawloop-metal": "the harness's Metal raw loop (Swift, Apple GPUs)",
    "coreai": "Apple's on-device engine, optionally with custom kernels",
    "litert-lm": "Google LiteRT-LM",
    "mlx": "Apple MLX (mlx-lm)",
    "llamacpp": "llama.cpp",
    "harness-llamacpp": "llama.cpp inside the harness (its llamacpp engine; build: make llama)",
    "ort-genai": "ONNX Runtime GenAI",
    "numpy": "the numpy reference decoder (correctness oracle)",
}

from orchestrator.runtimes import litert_lm, llamacpp, mlx, numpy_ref, ort_genai  # noqa: E402  (registers the adapters)

__all__ = ["RUNTIMES", "litert_lm", "llamacpp", "mlx", "numpy_ref", "ort_genai"]
