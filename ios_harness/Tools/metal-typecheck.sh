#!/usr/bin/env bash
# Type-checks HarnessMetal (and the CLI with the Metal engine) on a machine without Metal:
# copies the package into a temporary directory, adds Tools/MetalStub.swift as a module named
# Metal (the declarations HarnessMetal uses, with Apple's documented signatures), and builds.
# It proves the Swift side is consistent; it compiles no shader and runs nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/Sources" "$here/Package.swift" "$work/"
mkdir -p "$work/Sources/Metal"
cp "$here/Tools/MetalStub.swift" "$work/Sources/Metal/"
python3 - "$work/Package.swift" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
s = s.replace('.target(name: "HarnessMetal", dependencies: ["HarnessCore", "HarnessCPU"]',
              '.target(name: "Metal"),\n        .target(name: "HarnessMetal", dependencies: ["HarnessCore", "HarnessCPU", "Metal"]')
s = s.replace('dependencies: ["HarnessCore", "HarnessCPU", "HarnessMetal"]',
              'dependencies: ["HarnessCore", "HarnessCPU", "HarnessMetal", "Metal"]')
s = s[: s.index("        .testTarget(")] + "    ]\n)\n"
open(p, "w").write(s)
PY
cd "$work"
swift build -j 2 2>&1 | grep -v "produces an empty option set" | tail -5
.build/debug/harness info | grep -q '"rawloop-metal"'
echo "HarnessMetal type-checks against the Metal stub"
