"""Makes ios_harness/.llama: the headers and libraries of the llama.cpp that orch's `llamacpp` runtime
environment built, for the harness's `llamacpp` engine (HarnessLlama) to compile and link against.

    python Tools/llama-link.py [--env DIR] [--out DIR]

The environment (`orch runtimes install llamacpp`) builds llama-cpp-python from its pinned PyPI sdist;
that build installs llama.cpp's public headers (site-packages/include) beside the libraries the binding
loads (site-packages/llama_cpp/lib): one build, so the headers are exactly the libraries' version. This
script checks the environment's stamp names the version orch pins (orchestrator/runtimes/catalog.py), that
the headers and libraries are there, and links them into OUT (include/ of header links, lib -> the
binding's lib folder, so the harness loads the very libllama the out-of-process adapter loads). It
writes OUT/pin.json last (Package.swift builds the engine only when it is there). Exit 0 linked;
1 no finished environment (pin.json removed: the harness builds without the engine); 2 an environment that does not match the pin or lacks files (named in the message).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository, for the pin

from orchestrator.runtimes.catalog import get  # noqa: E402
from orchestrator.runtimes.envs import env_dir  # noqa: E402

HEADERS = ("llama.h", "gguf.h")  # what Tools/llama/llama-linux.h includes (they include the ggml*.h)
LIBS = ("libllama.so", "libggml-base.so", "libggml.so")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", type=Path, default=env_dir("llamacpp"), help="the llamacpp runtime environment")
    ap.add_argument("--out", type=Path, default=HERE.parent / ".llama", help="the folder to make")
    args = ap.parse_args()
    entry = get("llamacpp")
    assert entry is not None and entry.env is not None, "the runtime catalog has no llamacpp environment"
    pin = next(p for p in entry.env.packages if p.startswith("llama-cpp-python=="))
    package, version = pin.split("==")
    stamp = args.env / "installed.json"
    if not stamp.is_file():
        (args.out / "pin.json").unlink(missing_ok=True)  # a link to an environment since removed
        print(f"llama-link: no finished llamacpp environment at {args.env} (orch runtimes install llamacpp); "
              "the harness builds without the llamacpp engine")
        return 1
    got = json.loads(stamp.read_text()).get("versions", {}).get(package)
    if got != version:
        print(f"llama-link: {stamp}: {package} {got}, but orch pins {version} "
              "(reinstall: orch runtimes uninstall llamacpp && orch runtimes install llamacpp)", file=sys.stderr)
        return 2
    sites = sorted((args.env / "venv" / "lib").glob("python3*/site-packages"))
    if not sites:
        print(f"llama-link: {args.env}/venv/lib has no python3*/site-packages", file=sys.stderr)
        return 2
    include, lib = sites[0] / "include", sites[0] / "llama_cpp" / "lib"
    missing = [str(include / h) for h in HEADERS if not (include / h).is_file()]
    missing += [str(lib / so) for so in LIBS if not (lib / so).exists()]
    if missing:
        print(f"llama-link: the llamacpp environment lacks {', '.join(missing)}", file=sys.stderr)
        return 2
    out = args.out
    (out / "include").mkdir(parents=True, exist_ok=True)
    (out / "pin.json").unlink(missing_ok=True)
    for old in (out / "include").iterdir():
        old.unlink()
    for h in sorted(include.glob("*.h")):
        (out / "include" / h.name).symlink_to(h)
    link = out / "lib"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(lib)
    with tempfile.NamedTemporaryFile("w", dir=out, delete=False) as f:
        json.dump({"package": package, "version": version, "env": str(args.env), "include": str(include),
                   "lib": str(lib)}, f, indent=2)
    os.replace(f.name, out / "pin.json")
    print(f"llama-link: {out} -> {package} {version} ({lib})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
