from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import AA, MODEL, ROOT, SIM_AB, SIM_LAB
from typer.testing import CliRunner

from orchestrator import core
from orchestrator.cli import app
from orchestrator.config import ConfigError, Fleet, Plan, load_any, load_fleet, load_plan

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
        f"{path}:7: decision.alpha: Input should be less than or equal to 0.5",
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
    plan = write("plan.yaml", f"""
        name: p
        model: {MODEL}
        arms:
          - {{name: a, runtime: llamacpp}}
          - {{name: b, runtime: litert-lm}}
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



# --- non-finite and absurd numbers, hostile names, unreadable files -------------------------------

FLEET = textwrap.dedent(GOOD_FLEET).lstrip("\n")  # line 10 is the next line: device keys at 4 spaces, runtimes at 6

PLAN = """\
name: p
model: m
arms:
  - {name: a, runtime: coreai}
  - {name: b, runtime: rawloop-metal}
"""  # line 6 is the next line


def validate_fails(path: Path) -> list[str]:
    """`orch validate` on one file: exit 2, no traceback; each problem at a real line of that file."""
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    with pytest.raises(ConfigError) as exc:
        load_any(path)
    for p in exc.value.problems:
        assert p.file == str(path) and p.line >= 1, p
        assert f"{p.file}:{p.line}:" in result.output
    return problems(exc)


@pytest.mark.parametrize(("text", "field"), [
    ("    noise: {sigma: 0.06, drift_per_hour: .nan}", "devices[0].noise.drift_per_hour"),
    ("      x: {decode_tok_s: 5, prefill_tok_s: {1: .inf}}", "devices[0].runtimes.x.prefill_tok_s[1]"),
    ("      x: {decode_tok_s: 5, prefill_tok_s: -.inf}", "devices[0].runtimes.x.prefill_tok_s"),
    ("      x: {decode_tok_s: 5, builds: {ref: -.inf}}", "devices[0].runtimes.x.builds.ref"),
    ("      x: {decode_tok_s: 5, tuning: {rows: {8: .nan}}}", "devices[0].runtimes.x.tuning.rows[8]"),
    ("      x: {decode_tok_s: .inf}", "devices[0].runtimes.x.decode_tok_s"),
    ("    thermal: {cool_tau_s: .inf}", "devices[0].thermal.cool_tau_s"),
    ("    faults: {lost_after_s: .nan}", "devices[0].faults.lost_after_s"),
    ("    seed: .nan", "devices[0].seed"),
])
def test_non_finite_fleet_numbers_are_refused_where_they_are(
    write: Callable[[str, str], Path], text: str, field: str
) -> None:
    path = write("fleet.yaml", FLEET + text + "\n")
    assert f"{path}:10: {field}: Input should be a finite number" in validate_fails(path)


@pytest.mark.parametrize(("text", "field"), [
    ("trial: {timeout_s: .inf}", "trial.timeout_s"),
    ("settle: {idle_baseline_c: .nan}", "settle.idle_baseline_c"),
    ("settle: {max_load_1m: .inf}", "settle.max_load_1m"),
    ("retry: {backoff_s: .inf}", "retry.backoff_s"),
    ("decision: {power: .nan}", "decision.power"),
    ("decision: {sequential: {looks: [6], alpha_per_look: .nan}}", "decision.sequential.alpha_per_look"),
    ("decision: {sequential: {looks: [6, 12], futility: [.nan]}}", "decision.sequential.futility[0]"),
    ("nightly: {single_slowdown: -.inf}", "nightly.single_slowdown"),
    ("blocks: .inf", "blocks"),
])
def test_non_finite_plan_numbers_are_refused_where_they_are(
    write: Callable[[str, str], Path], text: str, field: str
) -> None:
    path = write("plan.yaml", PLAN + text + "\n")
    assert f"{path}:6: {field}: Input should be a finite number" in validate_fails(path)


def test_arm_engine_values_are_finite_and_integers_fit_int64(write: Callable[[str, str], Path]) -> None:
    path = write("plan.yaml", PLAN.replace("runtime: coreai}", "runtime: coreai, engine: {x: .nan, n: 1" + "0" * 400
                                           + ", ok: 9223372036854775807}}"))
    got = validate_fails(path)
    assert f"{path}:4: arms[0].engine.x: Input should be a finite number" in got
    assert f"{path}:4: arms[0].engine.n: Input should be less than or equal to 9223372036854775807" in got
    assert not any("engine.ok" in g for g in got), got


def test_candidates_and_ceilings_refuse_non_finite(write: Callable[[str, str], Path]) -> None:
    from orchestrator.config.candidates import load_candidates, load_ceilings

    cands = write("candidates.yaml", """
        candidates:
          - {rank: 1, id: x, target: t, models: [m], device_classes: [A19], current_runtime: r, why: w,
             current_tok_s: [19, .inf]}
    """)
    with pytest.raises(ConfigError) as exc:
        load_candidates(cands)
    assert problems(exc) == [f"{cands}:3: candidates[0].current_tok_s: Input should be a finite number"]
    ceil = write("ceilings.yaml", "workloads: {dense: {match: x}}\nchips:\n  A19: {workloads: {dense: .nan}}\n")
    with pytest.raises(ConfigError) as exc:
        load_ceilings(ceil)
    assert problems(exc) == [f"{ceil}:3: chips.A19.workloads.dense: Input should be a finite number"]


@pytest.mark.parametrize(("text", "line", "wanted"), [
    ("decision: {alpha: 1e-300}", 6, "decision.alpha: Input should be greater than or equal to 0.000001"),
    ("decision: {alpha: 0.9}", 6, "decision.alpha: Input should be less than or equal to 0.5"),
    ("decision: {resamples: 1e12}", 6, "decision.resamples: Input should be less than or equal to 100000"),
    ("blocks: 1e9", 6, "blocks: Input should be less than or equal to 1000"),
    ("blocks: 10000000", 6, "blocks: Input should be less than or equal to 1000"),
    ("seed: -1", 6, "seed: Input should be greater than or equal to 0"),
    ("seed: 1" + "0" * 40, 6, "seed: Input should be less than or equal to 4294967295"),
    ("settle: {poll_s: 1e-300}", 6, "settle.poll_s: Input should be greater than or equal to 0.1"),
    ("trial: {warm_repetitions: 1e139}", 6,
     "trial.warm_repetitions: Unable to parse input string as an integer, exceeded maximum size"),
    ("trial: {warm_repetitions: 101}", 6, "trial.warm_repetitions: Input should be less than or equal to 100"),
    ("trial: {timeout_s: 1e9}", 6, "trial.timeout_s: Input should be less than or equal to 86400"),
    ("trial: {prompt_tokens: 1e7}", 6, "trial.prompt_tokens: Input should be less than or equal to 262144"),
    ("trial: {decode_tokens: 32768, warm_repetitions: 100}", 6,
     "trial: decode_tokens x (1 + warm_repetitions) = 3309568 tokens timed per launch; at most 262144"),
    ("blocks: 1000\ndecision: {resamples: 100000}", 7,
     "decision: 2000 launches per arm x 100000 resamples is more than 10,000,000: fewer blocks or resamples"),
    ("retry: {max_attempts: 1e6}", 6, "retry.max_attempts: Input should be less than or equal to 100"),
    ("retry: {backoff_s: -1}", 6, "retry.backoff_s: Input should be greater than or equal to 0"),
    ("decision: {sequential: {looks: [-5, 12]}}", 6,
     "decision.sequential.looks[0]: Input should be greater than or equal to 1"),
    ("nightly: {confirm: {suspicious_p: 0}}", 6,
     "nightly.confirm.suspicious_p: Input should be greater than 0"),
    ("nightly: {confirm: {launches_per_arm: 6}}", 6,
     "nightly.confirm.launches_per_arm: Input should be greater than or equal to 12"),
    ("nightly: {confirm: {slowdown: 1}}", 6, "nightly.confirm.slowdown: Input should be less than 1"),
    ("nightly: {confirm: {p: 0.5}}", 6,
     "nightly.confirm: p (0.5) must be below suspicious_p (0.2): a night that could alarm would not be extended"),
    ("nightly:\n  latch: true\n  confirm:\n    p: 0.3\n    suspicious_p: 0.1", 8,
     "nightly.confirm: p (0.3) must be below suspicious_p (0.1): a night that could alarm would not be extended"),
    ("nightly: {recovered_p: 1}", 6, "nightly.recovered_p: Input should be less than 1"),
    ("nightly: {latch: maybe}", 6, "nightly.latch: Input should be a valid boolean, unable to interpret input"),
    ("nightly: {confirm: {cap: 120}}", 6, "nightly.confirm.cap: unknown field"),
    ("nightly:\n  confirm:\n    siblings: maybe", 8,
     "nightly.confirm.siblings: Input should be a valid boolean, unable to interpret input"),
    ("pool_by: chip_class\npool_keep_going: maybe", 7,
     "pool_keep_going: Input should be a valid boolean, unable to interpret input"),
    ("arms: [" + ", ".join(f"{{name: a{i}, runtime: coreai}}" for i in range(17)) + "]", 6,
     "arms: List should have at most 16 items after validation, not 17"),
])
def test_absurd_plan_numbers_are_refused_located(
    write: Callable[[str, str], Path], text: str, line: int, wanted: str
) -> None:
    body = PLAN if not text.startswith("arms:") else "name: p\nmodel: m\norder: williams\nx: 1\nx2: 1\n"
    path = write("plan.yaml", body + text + "\n")
    assert f"{path}:{line}: {wanted}" in validate_fails(path)


@pytest.mark.parametrize(("text", "wanted"), [
    ("    seed: -1", "devices[0].seed: Input should be greater than or equal to 0"),
    ("    seed: 4294967296", "devices[0].seed: Input should be less than or equal to 4294967295"),
    ("    noise: {sigma: 1e6}", "devices[0].noise.sigma: Input should be less than or equal to 1"),
    ("    thermal: {heat_c_per_s: 1e300}", "devices[0].thermal.heat_c_per_s: Input should be less than or equal to 10"),
    ("    thermal: {ambient_c: -1e300}", "devices[0].thermal.ambient_c: Input should be greater than or equal to -50"),
    ("    faults: {lost_after_s: 1e300}",
     "devices[0].faults.lost_after_s: Input should be less than or equal to 604800"),
    ("      x: {decode_tok_s: 5, launch_s: 1e300}",
     "devices[0].runtimes.x.launch_s: Input should be less than or equal to 3600"),
    ("      x: {decode_tok_s: 5, builds: {slow: 0}}",
     "devices[0].runtimes.x.builds.slow: Input should be greater than or equal to 0.01"),
    ("      x: {decode_tok_s: 5, prefill_tok_s: {}}",
     "devices[0].runtimes.x.prefill_tok_s: Dictionary should have at least 1 item after validation, not 0"),
])
def test_absurd_fleet_numbers_are_refused_located(write: Callable[[str, str], Path], text: str, wanted: str) -> None:
    path = write("fleet.yaml", FLEET + text + "\n")
    assert f"{path}:10: {wanted}" in validate_fails(path)


def test_sim_rates_and_iphone_polls_are_bounded(write: Callable[[str, str], Path]) -> None:
    path = write("fleet.yaml", FLEET.replace("bandwidth_gb_s: 60", "bandwidth_gb_s: 1e-300") + (
        "  - {id: phone, kind: iphone, udid: 00008140-000A, poll_s: 1e-300, call_timeout_s: 0}\n"))
    assert validate_fails(path) == [
        f"{path}:6: devices[0].bandwidth_gb_s: Input should be greater than or equal to 0.01",
        f"{path}:10: devices[1].call_timeout_s: Input should be greater than or equal to 0.1",
        f"{path}:10: devices[1].poll_s: Input should be greater than or equal to 0.01",
    ]
    slow = write("slow.yaml", FLEET.replace("coreai: {decode_tok_s: 36.5}",
                                            "coreai: {bytes_per_token: 1.0e12, efficiency: 0.001}"))
    assert validate_fails(slow) == [
        f"{slow}:3: devices[0]: runtime 'coreai': decode at 6e-05 tok/s (at 60 GB/s) is outside 0.01 .. 1e+06 tok/s"
    ]


@pytest.mark.parametrize("name", ["..", ".", "-rf", ".hidden", "a/b", "a b", "x" * 65, "", "a\\\\b", "é", "a\\n"])
def test_hostile_names_are_refused_everywhere(write: Callable[[str, str], Path], name: str) -> None:
    quoted = json.dumps(name)
    fleet = write("fleet.yaml", FLEET.replace("- id: a", f"- id: {quoted}")
                  .replace("name: lab", f"name: lab\nhosts: [{{id: {quoted}, kind: local}}]"))
    got = validate_fails(fleet)
    assert any(g.startswith(f"{fleet}:2: hosts[0].id: ") for g in got), got
    assert any(g.startswith(f"{fleet}:4: devices[0].id: ") for g in got), got
    plan = write("plan.yaml", PLAN.replace("name: p", f"name: {quoted}").replace("{name: a,", f"{{name: {quoted},")
                 + f"devices: [{quoted}]\n")
    got = validate_fails(plan)
    for line, field in ((1, "name"), (4, "arms[0].name"), (6, "devices[0]")):
        assert any(g.startswith(f"{plan}:{line}: {field}: ") for g in got), got


def test_one_name_rule_with_the_protocol_and_run_ids_stay_short(write: Callable[[str, str], Path]) -> None:
    from orchestrator.config.base import MAX_NAME
    from orchestrator.protocol import SAFE_ID, TrialSpec

    plan_name = Plan.model_json_schema()["properties"]["name"]
    assert (plan_name["pattern"], plan_name["maxLength"]) == (SAFE_ID, MAX_NAME)
    longest = "n" * MAX_NAME
    fleet = write("fleet.yaml", FLEET.replace("- id: a", f"- id: {longest}"))
    plan = write("plan.yaml", PLAN.replace("name: p", f"name: {longest}") + "blocks: 1000\n")
    f, p = core.load_inputs(fleet, plan)
    manifest = core.new_manifest(f, p, fleet, plan)
    last = manifest.sessions[0].trials[-1]
    spec = TrialSpec(run_id=manifest.run_id, trial_id=last.trial_id, engine="coreai", model="m", prompt_tokens=1,
                     decode_tokens=2)
    assert len(spec.run_id) <= 128 and len(spec.trial_id) <= 128  # what the iPhone side takes
    assert len(f"{spec.run_id}-{spec.trial_id}.json".encode()) < 255


def test_a_5000_character_plan_name_is_refused(write: Callable[[str, str], Path]) -> None:
    path = write("plan.yaml", PLAN.replace("name: p", "name: " + "p" * 5000))
    assert validate_fails(path) == [f"{path}:1: name: String should have at most 64 characters"]


def test_seed_range_is_exported_and_in_the_schema(tmp_path: Path) -> None:
    from orchestrator.config import MAX_SEED, MIN_SEED

    assert (MIN_SEED, MAX_SEED) == (0, 2**32 - 1)
    assert runner.invoke(app, ["schema", "--out", str(tmp_path)]).exit_code == 0
    plan = json.loads((tmp_path / "plan.schema.json").read_text())
    fleet = json.loads((tmp_path / "fleet.schema.json").read_text())
    assert (plan["properties"]["seed"]["minimum"], plan["properties"]["seed"]["maximum"]) == (MIN_SEED, MAX_SEED)
    assert fleet["$defs"]["SimDeviceConfig"]["properties"]["seed"]["maximum"] == MAX_SEED
    assert plan["properties"]["blocks"]["maximum"] == 1000
    alpha = plan["$defs"]["DecisionRule"]["properties"]["alpha"]
    assert (alpha["minimum"], alpha["maximum"]) == (1e-6, 0.5)
    assert plan["$defs"]["SettlePolicy"]["properties"]["poll_s"]["minimum"] == 0.1


def test_every_number_in_the_schemas_is_bounded(tmp_path: Path) -> None:
    """Each number (field, list item, dict value) has a lower and an upper bound in the JSON schema."""
    from orchestrator.config.candidates import CandidateTable, CeilingTable

    unbounded: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("number", "integer"):
                low = "minimum" in node or "exclusiveMinimum" in node
                high = "maximum" in node or "exclusiveMaximum" in node
                if not (low and high):
                    unbounded.append(where)
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    for model in (Fleet, Plan, CandidateTable, CeilingTable):
        walk(model.model_json_schema(), model.__name__)
    assert unbounded == [], unbounded


def test_unreadable_inputs_are_located_at_real_lines(write: Callable[[str, str], Path], tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"name: p\nmodel: m\ndescription: caf\xe9\n")
    assert validate_fails(latin1) == [f"{latin1}:3: not UTF-8: byte 0xe9 (invalid continuation byte)"]
    control = tmp_path / "control.yaml"
    control.write_bytes(b"name: p\nmodel: m\n\ndescription: a\x01b\n")
    assert validate_fails(control) == [
        f"{control}:4: YAML: character U+0001 is not allowed (special characters are not allowed)"
    ]
    deep = write("deep.yaml", "name: p\nmodel: m\narms: []\ndescription: " + "[" * 5000 + "]" * 5000 + "\n")
    got = validate_fails(deep)
    assert len(got) == 1 and got[0].startswith(f"{deep}:4: YAML: nested too deeply"), got
    digits = write("digits.yaml", "name: p\nmodel: m\narms: []\nseed: " + "9" * 5000 + "\n")
    assert validate_fails(digits) == [f"{digits}:4: YAML: cannot read this value: Exceeds the limit (4300 digits) "
                                      "for integer string conversion: value has 5000 digits"]
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    assert validate_fails(folder) == [f"{folder}:1: is a directory, not a fleet or plan file"]
    missing = tmp_path / "missing.yaml"
    assert validate_fails(missing) == [f"{missing}:1: cannot read: No such file or directory"]
    for text in ("", "# nothing\n", "[1, 2]\n", "arms: 1\n---\narms: 2\n"):
        path = write("other.yaml", text)
        assert all(re.match(rf"{re.escape(str(path))}:[1-9]\d*: ", g) for g in validate_fails(path))


def test_surrogates_and_control_characters_in_text_are_refused_and_never_echoed(
    write: Callable[[str, str], Path],
) -> None:
    path = write("plan.yaml", PLAN.replace("runtime: coreai", 'runtime: "core\\x1b[2Jai"')
                 + 'description: "lone \\ud800"\ndecision: {"\\x1b[31m": 1}\n')
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "\x1b" not in result.output and "\ud800" not in result.output
    got = validate_fails(path)
    assert f"{path}:6: description: text holds a lone surrogate (\\ud800): not allowed" in got
    assert f"{path}:4: arms[0].runtime: text holds a control character (\\x1b): not allowed" in got
    assert f"{path}:7: decision.\\x1b[31m: unknown field" in got
    fine = write("fine.yaml", PLAN + 'description: "tab\\tnewline\\n, é, 😀"\n')
    assert load_plan(fine).description == "tab\tnewline\n, é, 😀"


def test_a_file_name_that_is_not_utf8_is_refused_before_it_reaches_a_manifest(tmp_path: Path) -> None:
    import os

    path = Path(os.fsdecode(bytes(tmp_path) + b"/plan-\xff.yaml"))
    path.write_text((ROOT / "configs" / "plans" / "sim-ab.yaml").read_text())
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and (result.exception is None or isinstance(result.exception, SystemExit))
    assert f"{tmp_path}/plan-\\xff.yaml:1: the file name is not UTF-8" in result.output
