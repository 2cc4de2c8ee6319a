"""Token gates for a run: every real trial's token ids against the numpy reference decoder.

For each arm the reference is the source model's GGUF of the arm's quantization class (the plan's
model, or the sibling file of the class the arm asked for: `gguf: Q4_0`, `precision: int4`), with
the plan's prompt. The near-tie tolerance follows how close the runtime's arithmetic is to the
reference's (``analysis.tokengate.TIE``). Simulated devices produce no real tokens: not gated.
The reference decoder is passed in (a ``Decoder``: ``runtimes.gater.Gater`` decodes each once).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from orchestrator.analysis.tokengate import TIE, GateVerdict, gate
from orchestrator.config.plan import Arm
from orchestrator.results.records import Manifest, Record, TrialRecord
from orchestrator.results.store import RunDir, write_atomic
from orchestrator.runtimes import catalog
from orchestrator.runtimes.converted import ConvertingAdapter
from orchestrator.runtimes.source import quant_class

ORDER: tuple[GateVerdict, ...] = ("bit-exact", "quality-class", "mismatch")


def requested_class(arm: Arm) -> str | None:
    """The class an arm asks for over the plan model's: `gguf: Q4_0`, or a converting runtime's
    recipe option (`precision: int4`, `quantize: dynamic_int4_block32`)."""
    adapter = catalog.adapter_for(arm.runtime)
    if isinstance(adapter, ConvertingAdapter):
        return adapter.requested_class(arm.engine)
    return str(arm.engine["gguf"]) if arm.engine.get("gguf") else None


def reference_model(arm: Arm, plan_model: str) -> tuple[str, str]:
    """(GGUF path, class) the arm's tokens are gated against."""
    model = os.path.expanduser(plan_model)
    want = requested_class(arm)
    if want and want != quant_class(model):
        sibling = Path(model).with_name(f"model-{want}.gguf")
        if sibling.is_file():
            return str(sibling), str(want)
    return model, quant_class(model)


def tolerance(runtime: str, klass: str, ref_class: str) -> float:
    if klass != ref_class:
        return TIE["other-quantizer"]
    if klass == "F32":
        return TIE["same-weights"]
    if runtime == "numpy":
        return TIE["same-weights"]
    own = (entry := catalog.get(runtime)) is not None and entry.own_quantizer
    return TIE["other-quantizer"] if own else TIE["same-class"]


class Decoder(Protocol):
    """The reference decoder a gate compares with (``runtimes.gater.Gater``: numpy, the model's own weights)."""

    def reference(self, model: str, seed: int, prompt_tokens: int, decode_tokens: int, chunk: int) -> Any: ...

    def scores(self, ref: Any, seq: Sequence[int]) -> np.ndarray: ...


def run_gates(manifest: Manifest, records: list[Record], gater: Decoder) -> pd.DataFrame:
    """One row per device and arm: the worst prefill and decode gate over its ok trials."""
    plan = manifest.plan
    sim = {d.id for d in manifest.fleet.devices if d.kind == "sim"}
    rows: dict[tuple[str, str], dict[str, object]] = {}
    for r in records:
        if not isinstance(r, TrialRecord) or r.result is None or r.result.trial1 is None or r.device in sim:
            continue
        arm = plan.arm(r.arm)
        model, ref_class = reference_model(arm, plan.model)
        key = (r.device, r.arm)
        row = rows.setdefault(key, {"device": r.device, "arm": r.arm, "runtime": arm.runtime, "quant_class": ref_class,
                                    "trials": 0, "sequences": set(), "prefill": "bit-exact", "decode": "bit-exact",
                                    "first_divergence": None, "worst_margin": 0.0, "tie": None, "error": None})
        row["trials"] = int(str(row["trials"])) + 1
        if not Path(model).is_file():
            row["error"] = f"no reference model at {model}"
            continue
        runtime_class = requested_class(arm) or quant_class(model)
        tie = tolerance(arm.runtime, runtime_class, ref_class)
        ref = gater.reference(model, plan.seed, plan.trial.prompt_tokens, plan.trial.decode_tokens, 1)
        tokens = list(r.result.trial1.token_ids)
        g = gate(tokens, ref.tokens, partial(gater.scores, ref), tie)
        seqs = row["sequences"]
        assert isinstance(seqs, set)
        seqs.add(tuple(tokens))
        row["tie"] = tie
        row["prefill"] = max(str(row["prefill"]), g.prefill, key=ORDER.index)
        row["decode"] = max(str(row["decode"]), g.decode, key=ORDER.index)
        if g.first_divergence is not None:
            prev = row["first_divergence"]
            row["first_divergence"] = g.first_divergence if prev is None else min(int(str(prev)), g.first_divergence)
            row["worst_margin"] = max(float(str(row["worst_margin"])), g.worst_margin or 0.0)
    out = []
    for row in rows.values():
        seqs = row.pop("sequences")
        assert isinstance(seqs, set)
        row["distinct_sequences"] = len(seqs)
        out.append(row)
    columns = ["device", "arm", "runtime", "quant_class", "trials", "distinct_sequences", "prefill", "decode",
               "first_divergence", "worst_margin", "tie", "error"]
    return pd.DataFrame(out, columns=columns)


def gates_of(run: RunDir, gater: Decoder, records: list[Record] | None = None, *, force: bool = False,
             save: bool = True) -> pd.DataFrame:
    """The run's token gates, computed once per journal state: `token_gates.csv` is reused while it is
    current (derive listed it in derived.json for the journal as it is now), else the gates are computed
    (seconds: a reference decode per model) and written (when `save`). Empty for a run with no real trials."""
    if not force and run.fresh(run.gates_path):
        return pd.read_csv(run.gates_path)
    gates = run_gates(run.manifest(), run.records() if records is None else records, gater)
    if len(gates) and save:
        with contextlib.suppress(OSError):  # a full or read-only folder: the gates stand, recomputed next time
            write_atomic(run.gates_path, gates.to_csv(index=False).encode())
    return gates


def mismatched(gates: pd.DataFrame) -> list[str]:
    """`device/arm` of every row whose prefill or decode gate is a mismatch."""
    if not len(gates):
        return []
    bad = gates[(gates["prefill"] == "mismatch") | (gates["decode"] == "mismatch")]
    return [f"{d}/{a}" for d, a in zip(bad["device"], bad["arm"], strict=True)]


def first_arm_gates(manifest: Manifest, records: list[Any]) -> pd.DataFrame:
    """Per device and arm: do trial1 token ids match the device's first launch of the first arm?"""
    first_arm = manifest.plan.arms[0].name
    trials = sorted((r for r in records if isinstance(r, TrialRecord) and r.result and r.result.trial1),
                    key=lambda r: (r.device, r.seq))
    ref: dict[str, list[int]] = {}
    for r in trials:
        if r.arm == first_arm and r.device not in ref and r.result and r.result.trial1:
            ref[r.device] = r.result.trial1.token_ids
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in trials:
        assert r.result is not None and r.result.trial1 is not None
        ids, base = r.result.trial1.token_ids, ref.get(r.device)
        row = rows.setdefault((r.device, r.arm), {"device": r.device, "arm": r.arm, "launches": 0, "identical": 0,
                                                  "first_fork": math.inf, "tokens": len(ids)})
        row["launches"] += 1
        if base is None:
            continue
        fork = next((i for i, (a, b) in enumerate(zip(ids, base, strict=False)) if a != b),
                    None if len(ids) == len(base) else min(len(ids), len(base)))
        if fork is None:
            row["identical"] += 1
        else:
            row["first_fork"] = min(row["first_fork"], fork)
    out = pd.DataFrame(list(rows.values()), columns=["device", "arm", "launches", "identical", "first_fork", "tokens"])
    out["gate"] = [
        "no reference launch" if d not in ref else
        ("PASS: bit-identical" if i == n else f"FORK: {n - i} of {n} differ, first at token {int(f)}")
        for d, i, n, f in zip(out["device"], out["identical"], out["launches"], out["first_fork"], strict=True)
    ]
    return out


__all__ = ["Decoder", "first_arm_gates", "gates_of", "mismatched", "reference_model", "run_gates",
           "tolerance"]
