"""The base every config model shares: frozen, strict, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
