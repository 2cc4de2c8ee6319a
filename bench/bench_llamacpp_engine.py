"""llama.cpp inside the harness against llama.cpp out of process, beside the raw loop, measured by ONE
interleaved `orch run` (run on demand: `make bench-llamacpp-engine`; not a test).

Arms, on the same GGUF (m110 Q8_0: llama, 12 layers, dim 768, vocab 32000, random weights), the same
thread count and the same prefill chunk (n_batch = n_ubatch = the plan's chunk width for both llama.cpp
arms, M for the raw loop): `rawloop-cpu` (the harness's CPU raw loop), `harness-llamacpp` (the harness's
`llamacpp` engine: libllama through its C API, timed by the harness's trial runner) and `llamacpp` (orch's
out-of-process adapter: llama-cpp-python in its own environment, the same libllama file). Williams order,
a fresh process per trial, settled. Then, from the run's own files: per-arm medians, the token gate of
each arm against the numpy reference, and the run's verdict for in-harness vs out-of-process llama.cpp
(the plan's pre-committed rule: ratio of medians, its CI, equivalent within the margin or not).
Writes bench/results/llamacpp_engine.md and .json. Needs the harness built with llama.cpp (`make llama`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.analysis.gating import gates_of  # noqa: E402
from orchestrator.models.maker import default_cache_dir, make_model  # noqa: E402
from orchestrator.results import load_trials  # noqa: E402
from orchestrator.results.records import AttemptSpoiled, TrialRecord  # noqa: E402
from orchestrator.results.store import RunDir  # noqa: E402
from orchestrator.results.trials import usable  # noqa: E402
from orchestrator.runtimes.envs import installed  # noqa: E402
from orchestrator.runtimes.gater import Gater  # noqa: E402

OUT = ROOT / "bench" / "results"
ORCH = str(ROOT / ".venv" / "bin" / "orch")
LLAMA = ROOT / "ios_harness" / ".llama"
ARMS = {"raw": ("rawloop-cpu", "raw loop (harness, CPU)", ""),
        "inh": ("harness-llamacpp", "llama.cpp in the harness", ""),
        "oop": ("llamacpp", "llama.cpp out of process (adapter)", "")}
# With --flash-attn-arm: the harness's llama.cpp with flash attention as llama.cpp itself defaults it (auto: on
# for the CPU backend), where the engine's default and the adapter's binding ask for it off.
FA_ARM = {"fa": ("harness-llamacpp", "llama.cpp in the harness, flash attention auto", "flash_attn: auto")}


def plan_yaml(model: Path, arms_: dict[str, tuple[str, str, str]], blocks: int, threads: int, chunk: int,
              max_load: float, max_other: float) -> str:
    arms = [f"  - {{name: {arm}, runtime: {rt}, threads: {threads}" + (f", engine: {{{eng}}}}}" if eng else "}")
            for arm, (rt, _, eng) in arms_.items()]
    return "\n".join([
        "name: bench-llamacpp-engine", f"model: {model}", "devices: [this-cpu]", "arms:", *arms,
        "order: williams",
        f"trial: {{prompt_tokens: 32, decode_tokens: 128, chunk_width: {chunk}, timeout_s: 600}}",
        f"blocks: {blocks}",
        f"settle: {{min_gap_s: 3, flat_window_s: 0, max_load_1m: {max_load}, poll_s: 2, timeout_s: 1200}}",
        f"interference: {{max_other_cpu_share: {max_other}, quiet_wait_s: 10}}",
        "seed: 2026",
    ]) + "\n"


def median(values: Any) -> float | None:
    vals = [float(v) for v in values if v == v and v is not None]
    return statistics.median(vals) if vals else None


def spread(values: Any) -> tuple[float | None, float | None]:
    """The 25th and 75th percentiles: the run's own noise for that arm."""
    vals = sorted(float(v) for v in values if v == v and v is not None)
    if len(vals) < 4:
        return None, None
    q = statistics.quantiles(vals, n=4)
    return q[0], q[2]


def sequences(run: RunDir) -> dict[str, set[tuple[int, ...]]]:
    """Each arm's distinct trial1 token sequences (greedy decode: one per arm when deterministic)."""
    out: dict[str, set[tuple[int, ...]]] = {}
    for r in run.records():
        if isinstance(r, TrialRecord) and r.result is not None and r.result.trial1 is not None:
            out.setdefault(r.arm, set()).add(tuple(r.result.trial1.token_ids))
    return out


def measure(model: Path, arms: dict[str, tuple[str, str, str]], blocks: int, threads: int, chunk: int,
            max_load: float, max_other: float, work: Path) -> dict[str, Any]:
    fleet = work / "fleet.yaml"
    fleet.write_text("name: bench\ndevices:\n  - {id: this-cpu, kind: host, chip_class: x86_64}\n")
    plan = work / "plan.yaml"
    plan.write_text(plan_yaml(model, arms, blocks, threads, chunk, max_load, max_other))
    results = work / "results"
    env = {**os.environ, "HARNESS_LLAMA": str(LLAMA)}  # orch builds the harness: with the llamacpp engine
    subprocess.run([ORCH, "run", "--fleet", str(fleet), "--plan", str(plan), "--results", str(results)],
                   check=True, env=env)
    run = RunDir(next(p for p in results.iterdir() if p.is_dir()))
    trials = load_trials(run.path)
    gates = gates_of(run, Gater()).set_index("arm")  # computed by the run itself
    seqs = sequences(run)
    rows = []
    for arm, (rt, label, eng) in arms.items():
        t = trials[trials["arm"] == arm]
        ok = usable(t)  # what the verdicts use: finished and not excluded (interference, throttling)
        q1, q3 = spread(ok["decode_tok_s"])
        rows.append({
            "arm": arm, "runtime": rt, "label": label, "trials": len(t), "ok": len(ok),
            "decode_tok_s": median(ok["decode_tok_s"]), "decode_q1": q1, "decode_q3": q3,
            "prefill_tok_s": median(ok["prefill_tok_s"]),
            "ttft_ms": (median(ok["ttft_s"]) or 0) * 1e3 if len(ok) else None,
            "mb_per_token": (median(ok["bytes_per_decode_token"]) or 0) / 1e6 if len(ok) else None,
            "effective_gb_s": median(ok["effective_gb_s"]),
            "version": next(iter(ok["engine_version"]), None),
            "gate_prefill": gates.loc[arm, "prefill"] if arm in gates.index else None,
            "gate_decode": gates.loc[arm, "decode"] if arm in gates.index else None,
            "engine": eng, "sequences": len(seqs.get(arm, ())),
            "same_tokens_as_oop": bool(seqs.get(arm)) and seqs.get(arm) == seqs.get("oop"),
        })
    spoiled = sum(1 for r in run.records() if isinstance(r, AttemptSpoiled))
    verdicts = pd.read_csv(run.verdicts_path)
    pair = verdicts[((verdicts["baseline"] == "oop") & (verdicts["candidate"] == "inh"))
                    | ((verdicts["baseline"] == "inh") & (verdicts["candidate"] == "oop"))]
    return {"run_id": run.run_id, "rows": rows, "spoiled": spoiled, "verdicts": verdicts.to_dict(orient="records"),
            "llama_pair": pair.to_dict(orient="records")}


def fmt(v: Any, digits: int = 1) -> str:
    return "-" if v is None or v != v else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def write(res: dict[str, Any], meta: dict[str, Any]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "llamacpp_engine.json").write_text(json.dumps({"meta": meta, **res}, indent=1, default=str) + "\n")
    lines = [
        "# llama.cpp in the harness vs out of process, beside the raw loop (this host)", "",
        f"One interleaved `orch run` (bench/bench_llamacpp_engine.py, run `{res['run_id']}`) on {meta['cpu']}, "
        f"{meta['cores']} cores, {meta['date']}: m110 Q8_0 (llama, 12 layers, dim 768, vocab 32000, random "
        f"weights), 32-token prompt, 128 greedy tokens, {meta['threads']} thread(s) per arm, prefill chunk "
        f"{meta['chunk']}, Williams order, {meta['blocks']} blocks, a fresh process per trial, settled on a 3 s "
        f"gap and 1-minute load < {meta['max_load']}; "
        + (f"an attempt during which other processes took more than {meta['max_other']:.0%} of the CPU was spoiled "
           f"and run again ({res['spoiled']} spoiled attempts; a trial still over on its last attempt is kept but "
           "excluded, as from the verdicts). " if meta["max_other"] < 1 else
           "no interference limit (other processes' CPU share was not checked). ")
        + "Both llama.cpp arms load the same libllama file (the llamacpp environment's "
        f"llama-cpp-python {meta['llama_pin']} build). Medians over the ok trials; q1-q3 is the decode tok/s "
        "interquartile range within this run; ok = trials used / trials run. Token gates against the numpy reference decoder (prefill = "
        "token 0, decode = later tokens teacher-forced on the arm's own prefix).", "",
        f"Command: `{meta['command']}`", "",
        *([meta["note"], ""] if meta.get("note") else []),
        "| arm | runtime | ok | decode tok/s (q1-q3) | prefill tok/s | TTFT ms | MB/token | eff. GB/s "
        "| gate prefill | gate decode | tokens = oop's | version |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        runtime = f"`{r['runtime']}`" + (f" `{{{r['engine']}}}`" if r.get("engine") else "")
        same = "-" if r["arm"] == "oop" else "yes" if r.get("same_tokens_as_oop") else "no"
        lines.append(
            f"| {r['label']} | {runtime} | {r['ok']}/{r['trials']} | {fmt(r['decode_tok_s'])} "
            f"({fmt(r['decode_q1'])}-{fmt(r['decode_q3'])}) | {fmt(r['prefill_tok_s'])} | {fmt(r['ttft_ms'])} | "
            f"{fmt(r['mb_per_token'])} | {fmt(r['effective_gb_s'], 2)} | {r['gate_prefill'] or '-'} | "
            f"{r['gate_decode'] or '-'} | {same} | {(r['version'] or '-')[:72]} |")
    lines += ["", "## The run's verdicts (decode tok/s; the plan's pre-committed rule)", "",
              "90% CI: the interval the final analysis judges equivalence by (the `1 - 2 gamma` interval of its "
              "look, 90% at the final analysis); a `faster`/`slower` verdict is decided by p at the look's level.", "",
              "| baseline | candidate | ratio | 90% CI | p | verdict |", "|---|---|---|---|---|---|"]
    for v in res["verdicts"]:
        lo, hi = v.get("ci90_low"), v.get("ci90_high")
        lines.append(f"| {v.get('baseline')} | {v.get('candidate')} | {fmt(v.get('ratio'), 3)} | "
                     f"[{fmt(lo, 3)}, {fmt(hi, 3)}] | {fmt(v.get('p_value'), 4)} | {v.get('verdict')} "
                     f"({v.get('reason')}) |")
    lines += ["", "raw = rawloop-cpu, inh = harness-llamacpp, oop = llamacpp (adapter)"
              + (", fa = harness-llamacpp with flash attention auto" if any(r["arm"] == "fa" for r in res["rows"])
                 else "")
              + ". In-harness vs out of process "
              "is the check that the wrapper adds no cost of its own: the two run the same library on the same "
              "file with the same context settings (threads, n_batch = n_ubatch, repack off, flash attention off); "
              "what differs is the process around it (Swift harness vs Python binding) and who stamps the "
              "tokens (the harness's trial runner vs the driver's perf_counter_ns). tokens = oop's: every trial1 "
              "token sequence of the arm equals the adapter's (the same computation, bit for bit).", "",
              "The machine is shared: other work may run alongside (the settle gate waits for the load to drop "
              "before each trial, not during it).", ""]
    (OUT / "llamacpp_engine.md").write_text("\n".join(lines))


def command() -> str:
    """The command line that produced the figures, as run from the repository root."""
    args = " ".join(shlex.quote(a) for a in sys.argv[1:])
    script = Path(sys.argv[0]).resolve().relative_to(ROOT)
    return f"HARNESS_LLAMA=$PWD/ios_harness/.llama .venv/bin/python {script} {args}".rstrip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--max-load", type=float, default=2.5, help="the settle gate's 1-minute load ceiling")
    ap.add_argument("--max-other-cpu", type=float, default=0.10,
                    help="the interference limit: other processes' share of the CPU during a trial")
    ap.add_argument("--flash-attn-arm", action="store_true",
                    help="a fourth arm: the harness's llama.cpp with flash attention auto (llama.cpp's own default)")
    ap.add_argument("--note", default="", help="a paragraph written under the command (e.g. why the gate was relaxed)")
    ap.add_argument("--keep", type=Path, help="run in this folder and keep it (the run's journal and results)")
    ap.add_argument("--rewrite", action="store_true",
                    help="measure nothing: write the .md again from the .json (with --note, if given)")
    args = ap.parse_args()
    if args.rewrite:
        saved = json.loads((OUT / "llamacpp_engine.json").read_text())
        meta = saved.pop("meta")
        meta["note"] = args.note or meta.get("note", "")
        write(saved, meta)
        return
    if installed("llamacpp") is None or not (LLAMA / "pin.json").is_file():
        sys.exit("needs the llamacpp environment and the harness's link to it: make llama")
    model_dir = default_cache_dir() / "llama-m110-s0"
    if not (model_dir / "model-Q8_0.gguf").is_file():
        make_model("llama", "m110", 0, model_dir, formats=("Q8_0", "Q4_0"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        arms = {**ARMS, **(FA_ARM if args.flash_attn_arm else {})}
        res = measure(model_dir / "model-Q8_0.gguf", arms, args.blocks, args.threads, args.chunk, args.max_load,
                      args.max_other_cpu, work)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    pin = json.loads((LLAMA / "pin.json").read_text())
    meta = {"cpu": cpu, "cores": os.cpu_count(), "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "threads": args.threads, "blocks": args.blocks, "chunk": args.chunk, "max_load": args.max_load,
            "max_other": args.max_other_cpu, "note": args.note,
            "llama_pin": pin["version"], "command": command()}
    write(res, meta)
    print((OUT / "llamacpp_engine.md").read_text())


if __name__ == "__main__":
    main()
