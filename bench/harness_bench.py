"""Harness benchmark: the stream probe and ``rawloop-cpu`` on m110-sized Q8_0 and Q4_0 models,
in one process and one sitting (run on demand; not a test).

For each format: decode tok/s, prefill tok/s at chunk widths M = 1/4/16, effective GB/s
(engine-reported weight bytes per decode token x decode tok/s) and its ratio to the probe's
clean-stream ceiling on the same buffer-far-larger-than-LLC. If a llama.cpp ``llama-bench`` is
on PATH (or ``LLAMA_BENCH`` names one) it runs on the same GGUF files too.

Each configuration is launched ``--launches`` times as fresh processes; every launch runs trial1
plus warm repetitions. Decode is reported as the median over all warm generations, prefill as
the median over all generations at that M.

    .venv/bin/python bench/harness_bench.py            # writes bench/results/harness.{md,json}

Goals on this machine (issue 3): decode effective GB/s >= 0.8 x probe for a model larger than
the last-level cache; decode tok/s >= llama.cpp's on the same file. A miss is reported, not hidden.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.models import make_model, model_dir  # noqa: E402
from orchestrator.protocol import parse_result  # noqa: E402

HARNESS_DIR = ROOT / "ios_harness"
WIDTHS = (1, 4, 16)
FAILED_LAUNCHES: list[dict[str, Any]] = []
LOADS: list[float] = []
OTHER_CORES: list[float] = []


def build_harness() -> Path:
    if env := os.environ.get("ORCH_HARNESS_BIN"):
        return Path(env)
    swift = shutil.which("swift") or "/opt/swift/usr/bin/swift"
    subprocess.run([swift, "build", "-c", "release", "-j", "2"], cwd=HARNESS_DIR, check=True,
                   stdout=subprocess.DEVNULL)
    return HARNESS_DIR / ".build" / "release" / "harness"


def run_json(cmd: list[str]) -> Any:
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def probe(harness: Path, work: Path, patterns: str | None = None, repeats: int = 7) -> dict[str, Any]:
    out = work / "probe.json"
    cmd = [str(harness), "probe", "--out", str(out), "--repeats", str(repeats)]
    if patterns:
        cmd += ["--patterns", patterns]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def launch(
    harness: Path, gguf: Path, width: int, seed: int, args: argparse.Namespace, work: Path, threads: int | None = None
) -> list[dict[str, Any]]:
    """One fresh process: trial1 + warm generations; one row per generation."""
    spec = {
        "schema_version": 1, "run_id": "bench", "trial_id": f"{gguf.stem}-m{width}-t{threads}-{seed}",
        "engine": "rawloop-cpu", "model": str(gguf), "prompt_tokens": args.prompt, "decode_tokens": args.decode,
        "chunk_width": width, "warm_repetitions": args.warm, "seed": seed, "threads": threads,
    }
    spec_path, out = work / "spec.json", work / "result.json"
    spec_path.write_text(json.dumps(spec))
    for _attempt in range(3):
        busy0, total0 = busy_jiffies()
        own0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([str(harness), "run", "--spec", str(spec_path), "--out", str(out)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode >= 0:
            break
        # Killed by a signal from outside (a shared machine): kept as data, then relaunched.
        FAILED_LAUNCHES.append({"trial_id": spec["trial_id"], "signal": -proc.returncode})
    if proc.returncode != 0:
        raise SystemExit(f"harness failed on {spec['trial_id']}: {proc.returncode} {proc.stderr}")
    busy1, total1 = busy_jiffies()
    own1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = parse_result(out.read_text())
    assert r.trial1 is not None and r.bytes_per_decode_token is not None
    LOADS.append(os.getloadavg()[0])
    # CPU used by everything but the harness during the launch, in cores (other work on a shared box).
    hz = os.sysconf("SC_CLK_TCK")
    own = (own1.ru_utime + own1.ru_stime) - (own0.ru_utime + own0.ru_stime)
    span = (total1 - total0) / hz / (os.cpu_count() or 1)
    OTHER_CORES.append(max(0.0, ((busy1 - busy0) / hz - own) / span) if span > 0 else 0.0)
    return [{"launch": seed, "warm": i > 0, "decode_tok_s": g.decode_tok_s(),
             "prefill_tok_s": g.prefill_tok_s(args.prompt), "ttft_ms": g.ttft_ns / 1e6,
             "bytes_per_decode_token": r.bytes_per_decode_token,
             "bytes_per_prefill_token": r.bytes_per_prefill_token, "threads": r.threads}
            for i, g in enumerate([r.trial1, *r.warm])]


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine from /proc/stat (0, 0 elsewhere)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def wait_for_quiet(threshold: float, limit_s: float) -> tuple[bool, float]:
    """Waits until the 1-minute load average is below `threshold` (other work on a shared
    machine), at most `limit_s` seconds; returns whether it got quiet and the load then."""
    deadline = time.time() + limit_s
    while True:
        load = os.getloadavg()[0]
        if load < threshold:
            return True, load
        if time.time() >= deadline:
            return False, load
        time.sleep(10)


def llama_cpp(gguf: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    tool = os.environ.get("LLAMA_BENCH") or shutil.which("llama-bench")
    if not tool:
        return None
    threads = str(os.cpu_count() or 1)
    data = run_json([tool, "-m", str(gguf), "-p", str(args.prompt), "-n", str(args.decode), "-t", threads,
                     "-r", str(args.launches), "-o", "json"])
    out: dict[str, Any] = {"tool": tool}
    for row in data:
        key = "prefill_tok_s" if row.get("n_prompt", 0) > 0 else "decode_tok_s"
        out[key] = row["avg_ts"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="m110")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--decode", type=int, default=128)
    p.add_argument("--warm", type=int, default=3)
    p.add_argument("--launches", type=int, default=3)
    p.add_argument("--quiet-load", type=float, default=0.6, help="wait for the 1-min load average below this")
    p.add_argument("--quiet-wait", type=float, default=900, help="seconds to wait for quiet at most")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "harness")
    args = p.parse_args()

    harness = build_harness()
    mdir = model_dir("llama", args.size, args.seed)
    ggufs = {fmt: mdir / f"model-{fmt}.gguf" for fmt in ("Q8_0", "Q4_0")}
    if not all(g.exists() for g in ggufs.values()):
        make_model("llama", args.size, args.seed, mdir, formats=("Q8_0", "Q4_0"))

    quiet, quiet_load = wait_for_quiet(args.quiet_load, args.quiet_wait)
    started = time.time()
    load_before = os.getloadavg()
    info = run_json([str(harness), "info"])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        probe_report = probe(harness, work)
        # Interleaved: every launch round visits every configuration, so a burst of outside load
        # lands on all of them rather than on one.
        runs: dict[str, dict[int, list[dict[str, Any]]]] = {fmt: {m: [] for m in WIDTHS} for fmt in ggufs}
        single: dict[str, list[dict[str, Any]]] = {fmt: [] for fmt in ggufs}
        # The stream ceiling is probed again every round: on a shared machine the ceiling moves
        # too, and the best the machine showed in this sitting is what decode is held against.
        round_streams: list[float] = []
        for seed in range(args.launches):
            round_streams.append(probe(harness, work, "stream", 5)["results"][0]["median_gb_s"])
            for fmt, g in ggufs.items():
                for m in WIDTHS:
                    runs[fmt][m] += launch(harness, g, m, seed, args, work)
                single[fmt] += launch(harness, g, 16, seed, args, work, threads=1)
        probe_after = probe(harness, work)
    llama = {fmt: llama_cpp(g, args) for fmt, g in ggufs.items()}
    load_after = os.getloadavg()

    # Medians: a best-of-7 occasionally catches an outlier above what DRAM sustains.
    stream = {m["pattern"]: m["median_gb_s"] for m in probe_report["results"]}
    stream_after = {m["pattern"]: m["median_gb_s"] for m in probe_after["results"]}
    ceiling = max(stream["stream"], stream_after["stream"], *round_streams)
    table = []
    for fmt, by_width in runs.items():
        all_rows = [r for rows in by_width.values() for r in rows]
        warm_decode = [r["decode_tok_s"] for r in all_rows if r["warm"]]
        decode = statistics.median(warm_decode)
        # The least disturbed launch: the one whose warm generations have the highest median.
        per_launch = [statistics.median(r["decode_tok_s"] for r in rows[i:i + args.warm + 1] if r["warm"])
                      for rows in by_width.values() for i in range(0, len(rows), args.warm + 1)]
        best_launch = max(per_launch)
        bpt = all_rows[0]["bytes_per_decode_token"]
        eff = bpt * decode / 1e9
        # The f16 KV cache is read too (not counted in the engine's weight bytes): mean over decode.
        shape = json.loads((mdir / "manifest.json").read_text())["shape"]
        kv_dim = shape["kv_heads"] * shape["dim"] // shape["heads"]
        mean_pos = args.prompt + (args.decode - 1) / 2
        kv_bytes = 2 * shape["layers"] * mean_pos * kv_dim * 2
        row = {
            "format": fmt, "file_bytes": ggufs[fmt].stat().st_size, "bytes_per_decode_token": bpt,
            "decode_tok_s": decode, "decode_tok_s_min": min(warm_decode), "decode_tok_s_max": max(warm_decode),
            "trial1_decode_tok_s": statistics.median(r["decode_tok_s"] for r in all_rows if not r["warm"]),
            "effective_gb_s": eff, "ratio_to_stream": eff / ceiling,
            "best_launch_decode_tok_s": best_launch, "best_launch_ratio": bpt * best_launch / 1e9 / ceiling,
            "kv_bytes_per_decode_token": kv_bytes, "with_kv_gb_s": (bpt + kv_bytes) * decode / 1e9,
            "ratio_to_layout": eff / max(stream[f"{fmt.lower()}_layout"], stream_after[f"{fmt.lower()}_layout"]),
            "kernel_gb_s": max(stream[f"{fmt.lower()}_kernel"], stream_after[f"{fmt.lower()}_kernel"]),
            "prefill_tok_s": {m: statistics.median(r["prefill_tok_s"] for r in rows) for m, rows in by_width.items()},
            "threads": all_rows[0]["threads"], "llama_cpp": llama[fmt],
            "decode_tok_s_1_thread": statistics.median(r["decode_tok_s"] for r in single[fmt] if r["warm"]),
        }
        table.append(row)

    llc = probe_report["last_level_cache_bytes"]
    result = {
        "date": time.strftime("%Y-%m-%d", time.gmtime(started)), "host": info["host"],
        "harness_build": info["harness_build"], "python": platform.python_version(),
        "command": "bench/harness_bench.py " + " ".join(sys.argv[1:]), "args": vars(args) | {"out": str(args.out)},
        "probe": {"before": probe_report, "after": probe_after, "round_stream_medians": round_streams,
                  "ceiling_gb_s": ceiling},
        "table": table,
        "other_cores_per_launch": OTHER_CORES,
        "load_average": {"before": load_before, "after": load_after, "after_each_launch": LOADS,
                         "quiet_reached": quiet, "at_start": quiet_load},
        "runs": runs, "runs_1_thread": single,
        "failed_launches": FAILED_LAUNCHES,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str) + "\n")

    host = info["host"]
    lines = [
        f"# Harness benchmark ({result['date']}, {host['cpu_model']}, {host['logical_cpus']} CPUs, "
        f"LLC {llc / 2**20:.0f} MiB)",
        "",
        f"Command: `.venv/bin/python {result['command']}` (harness {info['harness_build']}, "
        f"{args.launches} launches x (trial1 + {args.warm} warm), prompt {args.prompt}, decode {args.decode}, "
        f"llama-{args.size}-s{args.seed})",
        "",
        f"Stream probe ({probe_report['buffer_bytes'] / 2**20:.0f} MiB buffer, {probe_report['threads']} threads, "
        "median of 7, before / after the runs): "
        + ", ".join(f"{k} {v:.1f} / {stream_after[k]:.1f} GB/s" for k, v in stream.items()),
        "",
        f"Ceiling (best stream median of this sitting, probed before, after and every round: "
        f"{', '.join(f'{v:.1f}' for v in round_streams)}): {ceiling:.1f} GB/s.",
        "",
        "| format | model bytes | decode tok/s (warm median, min-max) | best launch | trial1 decode | 1-thread decode "
        "| prefill tok/s M=1 / 4 / 16 | effective GB/s | / ceiling (median, best launch) | with KV reads "
        "| kernel-only GB/s | llama.cpp decode / prefill |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        pf = " / ".join(f"{r['prefill_tok_s'][m]:.0f}" for m in WIDTHS)
        lc = r["llama_cpp"]
        lcs = f"{lc['decode_tok_s']:.1f} / {lc['prefill_tok_s']:.0f}" if lc else "not available on this machine"
        lines.append(
            f"| {r['format']} | {r['file_bytes'] / 1e6:.1f} MB | {r['decode_tok_s']:.1f} "
            f"({r['decode_tok_s_min']:.1f}-{r['decode_tok_s_max']:.1f}) | {r['best_launch_decode_tok_s']:.1f} "
            f"| {r['trial1_decode_tok_s']:.1f} | {r['decode_tok_s_1_thread']:.1f} | {pf} "
            f"| {r['effective_gb_s']:.1f} | {r['ratio_to_stream']:.2f}, {r['best_launch_ratio']:.2f} "
            f"| {r['with_kv_gb_s']:.1f} ({r['with_kv_gb_s'] / ceiling:.2f}) "
            f"| {r['kernel_gb_s']:.1f} | {lcs} |"
        )
    lines += [
        "",
        f"The machine is shared: 1-min load average {load_before[0]:.2f} at start "
        f"({'quiet' if quiet else 'NOT quiet'}: threshold {args.quiet_load}); CPU taken by other processes "
        f"during the launches: median {statistics.median(OTHER_CORES):.2f}, max {max(OTHER_CORES):.2f} cores of "
        f"{os.cpu_count()}. Other work shows up as the min-max spread. Launches killed from outside and "
        f"relaunched: {len(FAILED_LAUNCHES)}.",
        "",
        "Goal: decode effective GB/s >= 0.8 x stream ceiling (median launch / best launch): "
        + "; ".join(f"{r['format']} {'met' if r['ratio_to_stream'] >= 0.8 else 'missed'} "
                    f"({r['ratio_to_stream']:.2f} / {r['best_launch_ratio']:.2f})" for r in table)
        + ". Goal: decode >= llama.cpp: "
        + ("; ".join(f"{r['format']} {'met' if r['decode_tok_s'] >= r['llama_cpp']['decode_tok_s'] else 'missed'}"
                     for r in table if r["llama_cpp"]) or "not measured (no llama-bench here)")
        + ".",
        "",
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
