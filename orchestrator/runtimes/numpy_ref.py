"""The numpy reference decoder as a runtime (`numpy`): one fresh controller-Python process per trial.

It runs on the controller's own machine only (a local host device): it needs orch's package.
Numpy's BLAS threads follow the arm's `threads`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.protocol.device import TrialFailure, result_or_failure
from orchestrator.runners import LocalRunner, RunnerError
from orchestrator.runners.cache import RuntimeContext
from orchestrator.runtimes.base import RuntimeAdapter
from orchestrator.runtimes.process import parse_output, tail


class NumpyReference(RuntimeAdapter):
    name = "numpy"

    async def run_trial(self, ctx: RuntimeContext, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        if not isinstance(ctx.runner, LocalRunner):
            return TrialFailure(kind="launch_failed",
                                message="the numpy reference runs on the controller's machine only")
        threads = [f"{v}={spec.threads}" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")]
        with tempfile.TemporaryDirectory() as tmp:
            spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
            spec_path.write_text(spec.model_dump_json())
            argv = ["env", *(threads if spec.threads else []), sys.executable, "-m", "orchestrator.runtimes.reference",
                    "--spec", str(spec_path), "--out", str(out_path)]
            try:
                res = await ctx.runner.run(argv, timeout=timeout)
            except RunnerError as exc:
                return TrialFailure(kind="disconnected", message=f"{ctx.device_id}: {exc}")
            if res.returncode == 2:
                return TrialFailure(kind="launch_failed", message=res.stderr.strip() or "model not found",
                                    detail=tail(res))
            if not res.ok or not out_path.is_file():
                failure = parse_output(res, timeout)
                if isinstance(failure, TrialFailure):
                    return failure
                return TrialFailure(kind="bad_output", message="exit 0 but no result file", detail=tail(res))
            outcome = result_or_failure(out_path.read_bytes(), spec)
        if isinstance(outcome, TrialResult) and '"done"' not in res.stdout:
            return TrialFailure(kind="bad_output", message="no completion line", detail=json.dumps(res.stdout[-200:]))
        return outcome


ADAPTER = NumpyReference()
