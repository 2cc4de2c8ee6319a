"""The golden protocol fixtures shared with the Swift harness (``swift test`` reads the same files).

Valid fixtures parse with the pydantic models and round-trip to the same JSON; invalid ones are
rejected. Together with the Swift side this keeps the two implementations of protocol v1 equal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from orchestrator.protocol import TrialResult, TrialSpec, parse_result

ROOT = Path(__file__).resolve().parents[1] / "ios_harness" / "Tests" / "Fixtures" / "protocol"


def _model(path: Path) -> type[BaseModel]:
    return TrialSpec if path.name.startswith("spec_") else TrialResult


def _files(group: str) -> list[Path]:
    return sorted((ROOT / group).glob("*.json"))


def test_fixtures_exist() -> None:
    valid, invalid = _files("valid"), _files("invalid")
    assert any(p.name.startswith("spec_") for p in valid)
    assert any(p.name.startswith("result_") for p in valid)
    assert len(invalid) >= 16


@pytest.mark.parametrize("path", _files("valid"), ids=lambda p: p.name)
def test_valid_fixture_round_trips(path: Path) -> None:
    raw = path.read_text()
    model = _model(path).model_validate_json(raw)
    assert json.loads(model.model_dump_json()) == json.loads(raw)


@pytest.mark.parametrize("path", _files("invalid"), ids=lambda p: p.name)
def test_invalid_fixture_is_rejected(path: Path) -> None:
    with pytest.raises(ValidationError):
        _model(path).model_validate_json(path.read_text())


@pytest.mark.parametrize("path", [p for p in _files("invalid") if p.name.startswith("result_")], ids=lambda p: p.name)
def test_parse_result_gives_a_readable_reason(path: Path) -> None:
    with pytest.raises(ValueError, match="invalid TrialResult"):
        parse_result(path.read_text())


def test_valid_fixtures_carry_every_field() -> None:
    """Round-trip equality needs complete fixtures: every model field is present in each file."""
    for path in _files("valid"):
        fields = set(_model(path).model_fields)
        assert set(json.loads(path.read_text())) == fields, path.name


def test_prompt_rule_vectors_match_the_python_side() -> None:
    """The prompt a spec without `prompt_ids` gets, as `swift test` also checks it."""
    prompt = pytest.importorskip("orchestrator.runtimes.prompt")
    data = json.loads((ROOT / "prompt_ids.json").read_text())
    for case in data["cases"]:
        assert prompt.prompt_ids(case["seed"], case["count"], case["vocab"]) == case["ids"]
