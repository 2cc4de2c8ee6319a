from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import AA, SIM_AB, SIM_LAB
from typer.testing import CliRunner

from orchestrator import app as core
from orchestrator.cli import app
from orchestrator.config import ConfigError, load_fleet, load_plan

runner = CliRunner()

GOOD_FLEET = """
    name: lab
    devices:
      - id: a
        kind: sim
        chip_class: A19 Pro
        bandwidth_gb_s: 60
        runtimes:
          rawloop-metal: {decode_tok_s: 55}
          coreai: {decode_tok_s: 36.5}
"""


def problems(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return [str(p) for p in exc.value.problems]


def test_shipped_configs_validate() -> None:
    result = runner.invoke(app, ["validate", str(SIM_LAB), str(SIM_AB), str(AA)])
    assert result.exit_code == 0, result.output
    assert "4 devices" in result.output and "2 arms" in result.output


def test_unknown_key_wrong_type_missing_field_are_located(write: Callable[[str, str], Path]) -> None:
    path = write("fleet.yaml", """
        name: lab
        devices:
          - id: a
            kind: sim
            chip_class: A19 Pro
            bandwidth_gb_s: fast
            runtimes:
              rawloop-metal: {decode_tok_s: 55}
            noise: {sigma: 0.06, colour: red}
          - id: b
            kind: iphone
    """)
    with pytest.raises(ConfigError) as exc:
        load_fleet(path)
    assert problems(exc) == [
        f"{path}:6: devices[0].bandwidth_gb_s: Input should be a valid number, unable to parse string as a number",
        f"{path}:9: devices[0].noise.colour: unknown field",
        f"{path}:10: devices[1].udid: Field required",
    ]


def test_duplicate_ids_and_empty_fleet(write: Callable[[str, str], Path]) -> None:
    dup = write("dup.yaml", GOOD_FLEET + """
      - id: a
        kind: iphone
        udid: 00008140-000A
""")
    with pytest.raises(ConfigError) as exc:
        load_fleet(dup)
    assert problems(exc) == [f"{dup}:1: duplicate device ids: a"]
    empty = write("empty.yaml", "name: lab\ndevices: []\n")
    with pytest.raises(ConfigError) as exc:
        load_fleet(empty)
    assert problems(exc) == [f"{empty}:2: devices: List should have at least 1 item after validation, not 0"]


def test_yaml_syntax_duplicate_keys_and_unreadable(write: Callable[[str, str], Path], tmp_path: Path) -> None:
    broken = write("broken.yaml", "name: lab\ndevices: [\n  - id: a\n")
    with pytest.raises(ConfigError) as exc:
        load_fleet(broken)
    assert problems(exc)[0].startswith(f"{broken}:3: YAML:")
    twice = write("twice.yaml", "name: lab\nname: other\ndevices: []\n")
    with pytest.raises(ConfigError) as exc:
        load_fleet(twice)
    assert "duplicate key" in problems(exc)[0] and problems(exc)[0].startswith(f"{twice}:2:")
    with pytest.raises(ConfigError) as exc:
        load_fleet(tmp_path / "missing.yaml")
    assert "cannot read" in problems(exc)[0]


def test_plan_rules(write: Callable[[str, str], Path]) -> None:
    path = write("plan.yaml", """
        name: p
        model: m
        arms:
          - {name: a, runtime: coreai}
          - {name: a, runtime: rawloop-metal}
        blocks: 5
        decision: {alpha: 2}
    """)
    with pytest.raises(ConfigError) as exc:
        load_plan(path)
    assert problems(exc) == [
        f"{path}:3: arms: duplicate arm names: a",
        f"{path}:6: blocks: Input should be greater than or equal to 6",
        f"{path}:7: decision.alpha: Input should be less than 1",
    ]


def test_sequential_looks_must_fit_the_plan(write: Callable[[str, str], Path]) -> None:
    path = write("plan.yaml", """
        name: p
        model: m
        arms: [{name: a, runtime: coreai}, {name: b, runtime: rawloop-metal}]
        blocks: 10
        decision:
          sequential: {looks: [12, 20, 30, 40]}
    """)
    with pytest.raises(ConfigError) as exc:
        load_plan(path)
    assert "last sequential look at 40 launches per arm, but the plan has only 20" in problems(exc)[0]


def test_cross_file_problems_are_located(write: Callable[[str, str], Path]) -> None:
    fleet = write("fleet.yaml", GOOD_FLEET + """
      - id: phone
        kind: iphone
        udid: 00008140-000A
""")
    plan = write("plan.yaml", """
        name: p
        model: m
        arms:
          - {name: a, runtime: coreai}
          - {name: b, runtime: tflite-turbo}
          - {name: c, runtime: litert-lm}
        order: williams
    """)
    with pytest.raises(ConfigError) as exc:
        core.load_inputs(fleet, plan)
    got = problems(exc)
    assert got[0].startswith(f"{plan}:5: arms[1].runtime: unknown runtime 'tflite-turbo'")
    assert f"{fleet}:7: devices[0].runtimes: no ground truth for runtime 'litert-lm' (plan arm 'c')" in got
    wanted = f"{fleet}:11: devices[1].engine_apps: iphone 'phone': no app runs 'litert-lm' (plan arm 'c')"
    assert any(g.startswith(wanted) for g in got), got


def test_a_cache_no_arm_can_clear_is_a_located_error(write: Callable[[str, str], Path]) -> None:
    """clear_caches is one list for every arm; each runtime clears the names it has. A name none of
    them has (a typo) would silently leave the cache warm: an error, with its line."""
    fleet = write("fleet.yaml", "name: f\ndevices:\n  - {id: cpu, kind: host}\n")
    plan = write("plan.yaml", """
        name: p
        model: m
        arms:
          - {name: a, runtime: llamacpp}
          - {name: b, runtime: litert-lm}
        trial:
          clear_caches: [page_cache, xnnpack_cache, xnnpak_cache]
    """)
    with pytest.raises(ConfigError) as exc:
        core.load_inputs(fleet, plan)
    assert problems(exc) == [f"{plan}:7: trial.clear_caches[2]: no arm's runtime has a cache 'xnnpak_cache' to clear "
                             "(they have: page_cache, xnnpack_cache)"]
    plan.write_text(plan.read_text().replace(", xnnpak_cache", "").replace("llamacpp", "rawloop-cpu"))
    assert core.load_inputs(fleet, plan)[1].trial.clear_caches == ["page_cache", "xnnpack_cache"]


def test_run_with_bad_input_exits_2_and_writes_nothing(write: Callable[[str, str], Path], tmp_path: Path) -> None:
    fleet = write("fleet.yaml", GOOD_FLEET.replace("chip_class: A19 Pro", "chip_class: A19 Pro\n        wat: 1"))
    results = tmp_path / "results"
    result = runner.invoke(app, ["run", "--fleet", str(fleet), "--plan", str(SIM_AB), "--results", str(results)])
    assert result.exit_code == 2
    assert f"{fleet}:6: devices[0].wat: unknown field" in result.output
    assert "Traceback" not in result.output
    assert not results.exists()


def test_validate_reports_every_file(write: Callable[[str, str], Path]) -> None:
    bad = write("bad.yaml", "name: p\nmodel: m\narms: 3\n")
    neither = write("neither.yaml", "hello: world\n")
    result = runner.invoke(app, ["validate", str(SIM_AB), str(bad), str(neither)])
    assert result.exit_code == 2
    assert f"{bad}:3: arms: Input should be a valid list" in result.output
    assert f"{neither}:1: not a fleet" in result.output
    assert f"{SIM_AB}: ok" in result.output


def test_schema_writes_json_schemas(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schema", "--out", str(tmp_path)])
    assert result.exit_code == 0
    fleet = json.loads((tmp_path / "fleet.schema.json").read_text())
    plan = json.loads((tmp_path / "plan.schema.json").read_text())
    assert "devices" in fleet["properties"] and "arms" in plan["properties"]
    assert plan["additionalProperties"] is False


def test_rule_digest_is_stable_and_sensitive() -> None:
    plan = load_plan(SIM_AB)
    again = load_plan(SIM_AB)
    assert plan.decision.digest() == again.decision.digest()
    moved = plan.decision.model_copy(update={"alpha": 0.01})
    assert moved.digest() != plan.decision.digest()
