"""Tiny random-weight models made deterministically from (arch, size, seed): no downloads."""

from orchestrator.models.maker import SIZES, ModelPaths, Size, default_cache_dir, make_model, model_dir

__all__ = ["SIZES", "ModelPaths", "Size", "default_cache_dir", "make_model", "model_dir"]
