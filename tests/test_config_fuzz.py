"""Property-based fuzz of config loading: the shipped examples, mutated, through the real paths.

Each example takes a shipped fleet, plan, candidates or ceilings file and either swaps a few of its
values (or whole sub-trees) for hostile ones (NaN, inf, huge and negative numbers, empty, long
and control-character strings, lone surrogates, nested lists and maps, wrong types), or corrupts
its bytes, or both. What must hold: `orch validate` exits 0, or exits 2 with every problem at a
real line (>= 1) of the file named; never a traceback or a hang; the fleet + plan cross-check
behaves the same; and a pair that validates yields a manifest that survives a JSON round trip.
Deterministic (derandomize) so CI sees the same examples every time.
"""

from __future__ import annotations

import copy
import io
import json
import math
import re
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conftest import ROOT
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from ruamel.yaml import YAML
from typer.testing import CliRunner

from orchestrator import core
from orchestrator.cli import app
from orchestrator.config import ConfigError, load_any
from orchestrator.config.candidates import load_candidates, load_ceilings
from orchestrator.results.records import Manifest

CONFIGS = ROOT / "configs"
# Fleets and plans shipped together that cross-check clean (a mutated one is paired with its mate).
PAIRS = [
    ("sim-lab.yaml", "plans/sim-ab.yaml"),
    ("sim-lab.yaml", "plans/aa-calibration.yaml"),
    ("sim-lab.yaml", "plans/sweep-tile-rows.yaml"),
    ("sim-lab.yaml", "plans/nightly.yaml"),
    ("demo-fleet.yaml", "plans/demo-sim.yaml"),
]
FLEETS_AND_PLANS = sorted({p for pair in PAIRS for p in pair} | {"lab-example.yaml", "plans/host-cpu.yaml"})
TABLES = {"candidates.yaml": load_candidates, "ceilings.yaml": load_ceilings}
ORIGINAL = {name: (CONFIGS / name).read_text() for name in [*FLEETS_AND_PLANS, *TABLES]}
TREES = {name: YAML(typ="rt").load(text) for name, text in ORIGINAL.items()}

FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HANG_S = 20  # one example: a few loads of a small file take well under a second
runner = CliRunner()


@contextmanager
def no_hang(seconds: float = HANG_S) -> Iterator[None]:
    def alarm(signum: int, frame: object) -> None:
        raise TimeoutError(f"one example ran over {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- hostile values, written as YAML flow text (so any value can be spliced in where a scalar was) --

NUMBERS = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 0, -1, -(2**31), 2**31, 2**32, 2**63, 2**64, -(2**63) - 1, 10**30,
                     -(10**30), 10**400, 1e300, -1e300, 1e-300, 5e-324, -0.0, 1e308, 0.5, 1, 6, 1000, 1001]),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
)
TEXTS = st.one_of(
    st.sampled_from(["", " ", "x" * 5000, "..", ".", "-rf", ".hidden", "a/b", "\x00", "\x1b[2J", "\ud800", "\udfff",
                     "\u2028", "\x85", "\t", "\n", "é😀", "null", "~", "yes", "nan", ".inf", "1e400", "*a", "&a",
                     "!!binary", "- a", "coreai", "rawloop-metal", "sim", "iphone", "host", "local", "williams"]),
    st.text(max_size=12),
    st.text(alphabet=st.characters(categories=["Cc", "Cs", "Zl", "Zp"]), min_size=1, max_size=4),
)
SCALARS = st.one_of(NUMBERS, TEXTS, st.sampled_from([True, False, None]))
HOSTILE = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.integers(), inner,
                                                                 max_size=4),
    max_leaves=12,
)
KEYS = st.text(max_size=8) | st.sampled_from(["kind", "id", "name", "devices", "arms", "\ud800", "\x1b", "", "<<"])


def like(value: Any) -> st.SearchStrategy[Any]:
    """Hostile values, half the time of the kind already there (a number for a number, text for text)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return NUMBERS | HOSTILE
    return TEXTS | HOSTILE if isinstance(value, str) else HOSTILE


def flow(value: Any) -> str:
    """``value`` as one line of YAML flow text (JSON escapes are YAML's double-quoted escapes)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return "1" + "0" * 5000 if abs(value) >= 10**4000 else str(value)  # the digit limit is the parser's to hit
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        return (".inf" if value > 0 else "-.inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return "{" + ", ".join(f"{flow(k)}: {flow(v)}" for k, v in value.items()) + "}"


def places(node: Any, loc: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path below the root: scalars, and whole lists and maps too."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*loc, key)
        yield from places(value, (*loc, key))


def at(tree: Any, loc: tuple[Any, ...]) -> Any:
    for key in loc:
        tree = tree[key]
    return tree


PLACES = {name: list(places(tree)) for name, tree in TREES.items()}
NUMBER_PLACES = {name: [loc for loc in locs if type(at(TREES[name], loc)).__name__ in ("ScalarFloat", "int", "float")]
                 for name, locs in PLACES.items()}


@st.composite
def one_number_swapped(draw: st.DrawFn, name: str) -> bytes:
    """The shipped file with one number replaced by another (NaN, inf, huge, tiny, negative, any float)."""
    loc = draw(st.sampled_from(NUMBER_PLACES[name]))
    tree = copy.deepcopy(TREES[name])
    at(tree, loc[:-1])[loc[-1]] = "FUZZ_VALUE"
    out = io.StringIO()
    YAML(typ="rt").dump(tree, out)
    return out.getvalue().replace("FUZZ_VALUE", flow(draw(NUMBERS)), 1).encode()


@st.composite
def mutated(draw: st.DrawFn, name: str) -> bytes:
    """The shipped file ``name`` with hostile values swapped in and/or bytes corrupted."""
    text = ORIGINAL[name]
    mode = draw(st.sampled_from(["values", "values", "bytes", "both"]))
    if mode != "bytes":
        tree = copy.deepcopy(TREES[name])
        splices = {}
        for i in range(draw(st.integers(1, 3))):
            loc = draw(st.sampled_from(PLACES[name]))
            parent = tree
            try:
                for key in loc[:-1]:
                    parent = parent[key]
                if draw(st.integers(0, 3)) or not isinstance(parent, dict):  # replace what is there
                    splices[f"FUZZ_VALUE_{i}"] = flow(draw(like(parent[loc[-1]])))
                    parent[loc[-1]] = f"FUZZ_VALUE_{i}"
                else:  # or add a key beside it: unknown, a duplicate, or hostile itself
                    splices[f"FUZZ_KEY_{i}"] = flow(draw(KEYS))
                    splices[f"FUZZ_VALUE_{i}"] = flow(draw(HOSTILE))
                    parent[f"FUZZ_KEY_{i}"] = f"FUZZ_VALUE_{i}"
            except (KeyError, IndexError, TypeError):
                continue  # an earlier swap removed this place
        out = io.StringIO()
        YAML(typ="rt").dump(tree, out)
        text = out.getvalue()
        for marker, value in splices.items():
            text = text.replace(marker, value, 1)
    raw = text.encode("utf-8", "surrogatepass")
    if mode != "values":
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(raw)))
            junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\x07", b"\t", b"\n", b"\r", b":", b"[", b"{",
                                         b"]", b"- ", b'"', b"'", b"&a ", b"*a", b"!!", b"#", b"%", b"@", b"`",
                                         b"\xed\xa0\x80", b"\xc2\x85", b"[" * 3000])
                        | st.binary(min_size=1, max_size=3))
            cut = draw(st.integers(0, 3))
            raw = raw[:at] + junk + raw[at + cut:]
    return raw


def write(folder: Path, name: str, raw: bytes) -> Path:
    path = folder / Path(name).name
    path.write_bytes(raw)
    return path


def assert_located(exc: ConfigError, *paths: Path) -> None:
    assert exc.problems, "a ConfigError with no problem"
    for p in exc.problems:
        assert p.file in {str(q) for q in paths}, p
        assert p.line >= 1, p
        assert str(p).startswith(f"{p.file}:{p.line}: "), p
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]", str(p)), repr(str(p))


def check_validate(path: Path) -> bool:
    """`orch validate` on one file; True when it is valid."""
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 2), result.output
    try:
        load_any(path)
    except ConfigError as exc:
        assert_located(exc, path)
        assert result.exit_code == 2
        for p in exc.problems:
            assert f"{p.file}:{p.line}:" in result.output, (str(p), result.output)
        return False
    assert result.exit_code == 0, result.output
    return True


def check_pair(fleet: Path, plan: Path) -> str:
    """The run's input path: both files cross-checked; a valid pair's manifest survives JSON."""
    try:
        fleet_cfg, plan_cfg = core.load_inputs(fleet, plan)
    except ConfigError as exc:
        assert_located(exc, fleet, plan)
        return "pair refused"
    manifest = core.new_manifest(fleet_cfg, plan_cfg, fleet, plan)
    again = Manifest.model_validate_json(manifest.model_dump_json())
    assert again.model_dump(mode="json") == manifest.model_dump(mode="json")
    return "pair valid: its manifest made and JSON round-tripped"


def run_pair(pair: tuple[str, str], which: int, raw: bytes) -> str:
    with tempfile.TemporaryDirectory() as tmp, no_hang():
        folder = Path(tmp)
        paths = [write(folder, name, raw if i == which else ORIGINAL[name].encode()) for i, name in enumerate(pair)]
        check_validate(paths[which])
        return check_pair(*paths)


def pair_and_file(which: int, mutation: Callable[[str], st.SearchStrategy[bytes]] = mutated,
                  ) -> st.SearchStrategy[tuple[tuple[str, str], bytes]]:
    return st.sampled_from(PAIRS).flatmap(lambda pair: st.tuples(st.just(pair), mutation(pair[which])))


@FUZZ
@given(pair_and_file(0))
def test_mutated_fleets_fail_located_or_make_a_manifest(case: tuple[tuple[str, str], bytes]) -> None:
    event(run_pair(case[0], 0, case[1]))


@FUZZ
@given(pair_and_file(1))
def test_mutated_plans_fail_located_or_make_a_manifest(case: tuple[tuple[str, str], bytes]) -> None:
    event(run_pair(case[0], 1, case[1]))


@FUZZ
@given(st.integers(0, 1).flatmap(lambda which: st.tuples(st.just(which), pair_and_file(which, one_number_swapped))))
def test_one_number_swapped_fails_located_or_round_trips(case: tuple[int, tuple[tuple[str, str], bytes]]) -> None:
    """Mostly valid files with one extreme number: where NaN or inf slipping through would show."""
    which, (pair, raw) = case
    event(run_pair(pair, which, raw))


@settings(FUZZ, max_examples=60)
@given(st.sampled_from(["lab-example.yaml", "plans/host-cpu.yaml"]).flatmap(
    lambda name: st.tuples(st.just(name), mutated(name))))
def test_other_shipped_examples_fail_located(case: tuple[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp, no_hang():
        check_validate(write(Path(tmp), *case))


@settings(FUZZ, max_examples=60)
@given(st.sampled_from(sorted(TABLES)).flatmap(lambda name: st.tuples(st.just(name), mutated(name))))
def test_mutated_candidates_and_ceilings_fail_located(case: tuple[str, bytes]) -> None:
    name, raw = case
    load: Callable[[Path], BaseModel] = TABLES[name]
    with tempfile.TemporaryDirectory() as tmp, no_hang():
        path = write(Path(tmp), name, raw)
        try:
            table = load(path)
        except ConfigError as exc:
            assert_located(exc, path)
        else:
            json.loads(table.model_dump_json())


def test_the_shipped_examples_are_the_fuzz_seeds() -> None:
    """The unmutated files pass every check the fuzz makes (so a failure there is the mutation's)."""
    for pair in PAIRS:
        assert run_pair(pair, 0, ORIGINAL[pair[0]].encode()).startswith("pair valid")
    for name in ("lab-example.yaml", "plans/host-cpu.yaml"):
        with tempfile.TemporaryDirectory() as tmp:
            assert check_validate(write(Path(tmp), name, ORIGINAL[name].encode()))
