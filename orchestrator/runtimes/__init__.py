"""The runtimes a plan's arm can name. Launch and parse adapters per runtime hang off this table."""

from __future__ import annotations

RUNTIMES: dict[str, str] = {
    "rawloop-cpu": "the harness's CPU raw loop (Swift)",
    "rawloop-metal": "the harness's Metal raw loop (Swift, Apple GPUs)",
    "coreai": "Apple's on-device engine, optionally with custom kernels",
    "litert-lm": "Google LiteRT-LM",
    "mlx": "Apple MLX (mlx-lm)",
    "llamacpp": "llama.cpp",
    "ort-genai": "ONNX Runtime GenAI",
    "numpy": "the numpy reference decoder (correctness oracle)",
}

__all__ = ["RUNTIMES"]
