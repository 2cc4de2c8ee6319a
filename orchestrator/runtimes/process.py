"""What every competitor adapter shares: launch one fresh driver process in the runtime's own
environment on the host's runner, and turn what it printed into a TrialResult or a typed failure.

A driver (``drivers/*.py``) is a standalone script that prints `ORCH_RUNTIME {json}` (the
generations it timed) or `ORCH_ERROR {json}` (a fault it could name). Everything else (a crash,
a signal, an AMX fault, a hang, a missing environment) is classified here from the exit status and
the tail of the output, which the failure carries.
"""

from __future__ import annotations

import abc
import hashlib
import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.protocol import Generation, TrialResult, TrialSpec
from orchestrator.protocol.device import TrialFailure
from orchestrator.runners import CommandResult, RunnerError
from orchestrator.runners.cache import RuntimeContext
from orchestrator.runtimes.base import RuntimeAdapter
from orchestrator.runtimes.envs import host_env_python

DRIVERS = Path(__file__).with_name("drivers")
RESULT, ERROR = "ORCH_RUNTIME ", "ORCH_ERROR "
TAIL_LINES = 12

# Signatures of faults worth naming in the message (the tail is kept whatever matched).
_FAULTS: list[tuple[re.Pattern[str], str]] = [
    # ggml's AMX kernels live in ggml-cpu/amx/: a fault there names its source file.
    (re.compile(r"ggml-cpu/amx/|amx/mmq\.cpp|amx\.cpp"),
     "AMX kernel fault (turn repack off: engine option repack: false)"),
    (re.compile(r"Illegal instruction|SIGILL"), "illegal instruction (a build for another CPU?)"),
    (re.compile(r"out of memory|std::bad_alloc|MemoryError|Cannot allocate"), "out of memory"),
    (re.compile(r"No such file or directory|FileNotFoundError|failed to open|does not exist"), "file not found"),
]


# Run by the runtime's Python on the host: every file under the path (a file or a model folder).
_DROP_PAGES = (
    "import os, sys\n"
    "root = sys.argv[1]\n"
    "files = [root] if os.path.isfile(root) else [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]\n"
    "for f in files:\n"
    "    fd = os.open(f, os.O_RDONLY)\n"
    "    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
    "    os.close(fd)\n"
)


@dataclass(frozen=True)
class DriverOutput:
    """What a driver reported: parsed, not yet checked against the spec."""

    version: str
    threads: int | None
    chunk_width: int | None
    generations: list[Generation]
    info: dict[str, Any] = field(default_factory=dict)


def tail(res: CommandResult, lines: int = TAIL_LINES) -> str:
    text = (res.stderr.strip() + "\n" + res.stdout.strip()).strip()
    return "\n".join(text.splitlines()[-lines:])


def _why(text: str) -> str | None:
    return next((why for pattern, why in _FAULTS if pattern.search(text)), None)


_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception)): (.*)$")


def _exception(stderr: str) -> str | None:
    """The last line of a Python traceback (`RuntimeError: ...`), shortened."""
    for line in reversed(stderr.strip().splitlines()):
        if m := _EXCEPTION.match(line.strip()):
            return f"{m.group(1)}: {m.group(3)[:200]}"
    return None


def parse_output(res: CommandResult, timeout: float | None = None) -> DriverOutput | TrialFailure:
    """A driver's exit status and output -> its report, or the typed failure with the output's tail."""
    detail = tail(res) or None
    if res.timed_out:
        return TrialFailure(kind="hung", message=f"no result after {timeout or 0:.0f} s; killed", detail=detail)
    lines = res.stdout.splitlines()
    err = next((ln[len(ERROR):] for ln in reversed(lines) if ln.startswith(ERROR)), None)
    if err is not None:
        try:
            e = json.loads(err)
            kind, message = str(e["kind"]), str(e["message"])
        except (ValueError, KeyError, TypeError):
            kind, message = "engine_failure", err[:300]
        failure = "launch_failed" if kind == "model_not_found" else "harness_error"
        return TrialFailure(kind=failure, message=f"{kind}: {message}", detail=detail)
    code = res.returncode if res.returncode is not None else 0
    if code == 127:
        return TrialFailure(kind="launch_failed", message="runtime not found on the host", detail=detail)
    if code != 0:
        signum = -code if code < 0 else code - 128 if code > 128 else None
        how = f"killed by signal {signum}" if signum else f"exit {code}"
        why = _why(res.stderr + res.stdout) or _exception(res.stderr)
        return TrialFailure(kind="crashed", message=f"runtime {how}" + (f": {why}" if why else ""), detail=detail)
    raw = next((ln[len(RESULT):] for ln in reversed(lines) if ln.startswith(RESULT)), None)
    if raw is None:
        return TrialFailure(kind="bad_output", message="exit 0 but no ORCH_RUNTIME line", detail=detail)
    try:
        data = json.loads(raw)
        gens = [Generation.model_validate(g) for g in data["generations"]]
        if not gens:
            raise ValueError("no generations")
        return DriverOutput(version=str(data["version"]), threads=data.get("threads"),
                            chunk_width=data.get("chunk_width"), generations=gens, info=dict(data.get("info", {})))
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        return TrialFailure(kind="bad_output", message=f"unreadable ORCH_RUNTIME line: {first}", detail=raw[:400])


@dataclass(frozen=True)
class Artifact:
    """The model file or folder a runtime loads, on the host, and what a decode step reads of it."""

    path: str
    bytes_per_token: int | None
    quant_class: str
    cold_caches: tuple[str, ...] = ()


class ArtifactError(Exception):
    """The runtime's model could not be made (conversion failed): the tail says why."""

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(message)
        self.detail = detail


def to_result(spec: TrialSpec, out: DriverOutput, art: Artifact, prompt_len: int) -> TrialResult | TrialFailure:
    trial1, warm = out.generations[0], out.generations[1:]
    if len(trial1.token_ids) != spec.decode_tokens:
        return TrialFailure(kind="bad_output",
                            message=f"{len(trial1.token_ids)} tokens generated, spec asked for {spec.decode_tokens}")
    width = out.chunk_width or spec.chunk_width
    return TrialResult(
        run_id=spec.run_id, trial_id=spec.trial_id, status="ok", engine=spec.engine, engine_version=out.version,
        harness_build="orch-driver", model=art.path, prompt_tokens=prompt_len, chunk_width=max(1, width),
        threads=out.threads, trial1=trial1, warm=warm, bytes_per_decode_token=art.bytes_per_token,
        bytes_per_prefill_token=(art.bytes_per_token // max(1, width)) if art.bytes_per_token else None,
        cold_caches=list(art.cold_caches), tuning=dict(spec.tuning),
    )


class DriverAdapter(RuntimeAdapter):
    """A runtime run by a driver script in its isolated environment."""

    driver: str  # file name under drivers/

    @abc.abstractmethod
    async def artifact(self, ctx: RuntimeContext, spec: TrialSpec) -> Artifact:
        """The model this runtime loads for `spec`, made (and cached) from the source model if needed."""

    @abc.abstractmethod
    async def vocab(self, ctx: RuntimeContext, spec: TrialSpec) -> int:
        """The vocabulary size (the prompt is made from it, exactly as the harness makes it)."""

    def beside(self, engine: Mapping[str, Any]) -> tuple[str, ...]:
        """Files of the model's folder this runtime reads besides the plan's model: deployed with it."""
        return ("config.json",)  # the vocabulary

    def job(self, spec: TrialSpec, art: Artifact, prompt: list[int]) -> dict[str, Any]:
        return {"model": art.path, "prompt_ids": prompt, "decode_tokens": spec.decode_tokens,
                "chunk_width": spec.chunk_width, "threads": spec.threads, "warm": spec.warm_repetitions,
                "options": dict(spec.tuning), "clear_caches": list(spec.clear_caches)}

    def env_vars(self, spec: TrialSpec) -> dict[str, str]:
        return {}

    async def run_trial(self, ctx: RuntimeContext, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        from orchestrator.runtimes.prompt import spec_prompt

        python = await host_env_python(ctx.runner, self.name)
        try:
            if not await ctx.runner.exists(python):
                return TrialFailure(kind="launch_failed", message=f"{self.name} is not installed on {ctx.device_id}: "
                                    f"run `orch runtimes install {self.name}`")
            try:
                art = await self.artifact(ctx, spec)
            except ArtifactError as exc:
                return TrialFailure(kind="launch_failed", message=str(exc), detail=exc.detail)
            vocab = await self.vocab(ctx, spec)
            prompt = spec_prompt(spec, vocab)
            if bad := [t for t in prompt if not 0 <= t < vocab]:  # some runtimes crash on them (MLX segfaults)
                return TrialFailure(kind="harness_error",
                                    message=f"bad_spec: prompt id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
            driver = await self._push_driver(ctx)
            job_path = f"{ctx.workdir}/runtimes/jobs/{spec.run_id}-{spec.trial_id}.json"
            with tempfile.TemporaryDirectory() as tmp:
                local = Path(tmp) / "job.json"
                local.write_text(json.dumps(self.job(spec, art, prompt)))
                await ctx.runner.put(local, job_path)
            art = await self._clear_caches(ctx, spec, art, python)
            env = [f"{k}={v}" for k, v in self.env_vars(spec).items()]
            res = await ctx.runner.run(["env", *env, python, driver, job_path], timeout=timeout, cwd=ctx.workdir)
        except RunnerError as exc:
            return TrialFailure(kind="disconnected", message=f"{ctx.device_id}: {exc}")
        out = parse_output(res, timeout)
        if isinstance(out, TrialFailure):
            return out
        return to_result(spec, out, art, len(prompt))

    async def _clear_caches(self, ctx: RuntimeContext, spec: TrialSpec, art: Artifact, python: str) -> Artifact:
        """`page_cache` in the plan's clear_caches: drop the model files' pages from the OS cache
        (posix_fadvise DONTNEED: this file's pages only, no root, nobody else's cache touched), so
        the trial loads the weights cold. Other cache names are the runtime's own (`cache_names`)."""
        cold: list[str] = []
        if "page_cache" in spec.clear_caches:
            res = await ctx.runner.run([python, "-c", _DROP_PAGES, art.path], timeout=120)
            if res.ok:
                cold.append("page_cache")
        cold += [c for c in spec.clear_caches if c in self.cache_names]
        return Artifact(art.path, art.bytes_per_token, art.quant_class, (*art.cold_caches, *cold))

    cache_names: tuple[str, ...] = ()  # on-disk caches the driver clears itself when the plan asks

    async def _push_driver(self, ctx: RuntimeContext) -> str:
        """The driver script on the host, under a name that changes whenever its content does."""
        local = DRIVERS / self.driver
        digest = hashlib.sha256(local.read_bytes()).hexdigest()[:12]
        remote = f"{ctx.workdir}/runtimes/drivers/{local.stem}-{digest}.py"
        if not await ctx.runner.exists(remote):
            await ctx.runner.put(local, remote)
        return remote


__all__ = ["Artifact", "ArtifactError", "DriverAdapter", "DriverOutput", "parse_output", "tail", "to_result"]
