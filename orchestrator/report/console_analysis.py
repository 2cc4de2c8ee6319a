"""Console renderings of what the analysis and plan commands print: the audit, a night's verdicts, a plan's
sizing and the noise registry.

Each function returns what to print, in order: rich tables, and text lines (never parsed as markup).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from orchestrator.analysis.audit import RULE
from orchestrator.analysis.sizing import Sizing
from orchestrator.config.plan import Plan
from orchestrator.report.console import frame_table
from orchestrator.results.trials import excluded_words


def audit_view(run_id: str, model: str, trials: pd.DataFrame, audit: pd.DataFrame,
               prefill: pd.DataFrame) -> list[RenderableType]:
    """`orch audit`: decode against the ceiling per device and arm, what was excluded, the prefill view."""
    head = Text.assemble(("Audit", "bold"), f" of {run_id} ({model}): {RULE}")
    if not len(audit):  # every finished trial was excluded: no reading, and why
        words = excluded_words(trials)
        return [head, Text("nothing to audit: no finished trial a conclusion may be drawn from"
                           + (f". {words}" if words else ""))]
    view = audit.assign(
        tok=[f"{r:.1f} [{lo:.1f}, {hi:.1f}]" for r, lo, hi in
             zip(audit["decode_tok_s"], audit["decode_ci_low"], audit["decode_ci_high"], strict=True)],
        eff=[f"{r:.1f} [{lo:.1f}, {hi:.1f}]" for r, lo, hi in
             zip(audit["effective_gb_s"], audit["effective_ci_low"], audit["effective_ci_high"], strict=True)],
        mb=audit["bytes_per_token"] / 1e6,
    )
    out: list[RenderableType] = [head, frame_table("Decode: effective bandwidth against the ceiling", view, {
        "device": "", "chip_class": "", "arm": "", "n": "d", "n_excluded": "d", "tok": "", "mb": ".0f", "eff": "",
        "ceiling_gb_s": ".1f", "ratio": ".0%", "ceiling_tok_s": ".1f", "reading": "",
    })]
    if (words := excluded_words(trials)) is not None:
        out.append(Text(words))
    sources = sorted(set(zip(audit["chip_class"], audit["ceiling_source"], strict=True)))
    out.append(Text("columns: tok = decode tok/s median [95% CI]; mb = MB read per token; eff = effective GB/s; "
                    "ceiling_tok_s = decode tok/s at the ceiling. Ceilings: "
                    + "; ".join(f"{c}: {s}" for c, s in sources)))
    if len(prefill):
        pre = prefill.assign(mb=prefill["bytes_per_prefill_token"] / 1e6)
        out.append(frame_table("Prefill: weights read once per M tokens (bound = ceiling x M / weight bytes)", pre, {
            "device": "", "arm": "", "chunk_width": "d", "mb": ".1f", "bound_tok_s": ".0f", "prefill_tok_s": ".1f",
            "regime": "",
        }))
    return out


def night_view(summary: Any, run_ids: list[str], junit: Path, summary_md: Path) -> list[RenderableType]:
    """`orch nightly`: tonight's verdict per configuration and device, what had no data, change points."""
    tonight = summary.tonight.assign(
        builds=summary.tonight["candidate_build"] + " vs " + summary.tonight["reference_build"])
    out: list[RenderableType] = [frame_table(f"Nightly {summary.night}: runs {', '.join(run_ids)}", tonight, {
        "config": "", "device": "", "builds": "", "ratio": ".3f", "ci_low": ".3f", "ci_high": ".3f",
        "p_one_sided_slower": ".4f", "streak": "d", "status": "", "since": "", "reason": "",
    })]
    out += [Text(f"no data {config} / {device}: {why}", style="yellow") for config, device, why in summary.missing]
    out += [Text(f"change point: {r['config']} / {r['device']} {r['signal']} from {r['night']} ({r['shift']:+.1%})")
            for r in summary.changes.to_dict("records")]
    out.append(Text(f"junit: {junit}  summary: {summary_md}"))
    return out


def sizing_table(plan: Plan, rows: dict[str, Sizing], effect: float) -> Table:
    """`orch plan size`: per noise source, what the plan's rule does and the launches it needs."""
    rule = plan.decision
    cap = plan.launches_per_arm()
    design = (f"adaptive: looks from {rule.adaptive.first_look} every {rule.adaptive.look_every} launches per arm, "
              f"cap {cap}" if rule.adaptive else f"fixed: {cap} launches per arm")
    table = Table(title=f"{plan.name}: {rule.estimator}, {design}; alpha {rule.alpha:g}, min effect "
                        f"{rule.min_effect:.0%}, equivalence ±{rule.equivalence_margin:.0%}", title_justify="left")
    for col in ("noise from", "σ", "no difference: equivalent / faster or slower / mean launches per arm",
                f"{effect:+.0%}: faster / mean launches per arm", f"fixed design: launches for {effect:.0%} at "
                f"{rule.power:.0%} power / for equivalence", f"blocks needed (plan: {plan.blocks})"):
        table.add_column(col, justify="left" if col == "noise from" else "right")
    for who, s in rows.items():
        need = "not within 1000" if s.blocks_for_equivalence is None else str(s.blocks_for_equivalence)
        table.add_row(who, f"{s.sigma:.2%}",
                      f"{s.null.equivalent:.0%} / {s.null.faster + s.null.slower:.1%} / {s.null.mean_launches:.0f}",
                      f"{s.alternative.faster:.0%} / {s.alternative.mean_launches:.0f}",
                      f"{s.fixed_for_effect} / {s.fixed_for_equivalence}", need)
    table.caption = ("Normal theory at the estimator's efficiency (median sqrt(pi/2), Hodges-Lehmann sqrt(pi/3)); "
                     "launches per arm are means over runs. Blocks needed: the fewest with P(equivalent) >= "
                     f"{rule.power:.0%} when there is no difference.")
    return table


def registry_table(results: Path, rows: pd.DataFrame, now: datetime) -> Table:
    """`orch plan noise`: each device x runtime x model's latest registered noise, its run and age."""
    from orchestrator.analysis.noise import age_days

    table = Table(title=f"Noise registry ({results})", title_justify="left")
    for col in ("device", "chip", "runtime", "model", "σ", "launches", "run", "age d"):
        table.add_column(col)
    for r in rows.to_dict("records"):
        table.add_row(str(r["device"]), str(r["chip_class"]), str(r["runtime"]), str(r["model"]),
                      f"{r['sigma']:.2%}", str(r["launches"]), str(r["run_id"]),
                      f"{age_days(str(r['measured_at']), now):.1f}")
    return table
