#!/usr/bin/env bash
# Type-checks HarnessMetal (and the CLI with the Metal engine) as Apple platforms build it, on a
# machine without Metal: copies the package into a temporary directory, adds
# Tools/MetalStub.swift as a module named Metal (the declarations HarnessMetal uses, with Apple's
# documented signatures) in place of MetalCPU, and builds. It proves the Apple side of the seam
# compiles; it runs nothing (the tests run the engine on MetalCPU).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/Sources" "$here/Tools" "$here/Package.swift" "$work/"
mkdir -p "$work/Sources/Metal"
cp "$here/Tools/MetalStub.swift" "$work/Sources/Metal/"
python3 - "$work/Package.swift" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
# HarnessMetal sees the stub module `Metal` (as on Apple hosts) instead of MetalCPU; no tests.
assert 'metal = ["MetalCPU"]' in s, "Package.swift no longer names the MetalCPU dependency this script replaces"
s = s.replace('metal = ["MetalCPU"]', 'metal = ["Metal"]')
s = s.replace("emulation = [\n", 'emulation = [\n    .target(name: "Metal"),\n', 1)
s += "package.targets.removeAll { $0.type == .test }\n"
open(p, "w").write(s)
PY
cd "$work"
swift build -j 2 2>&1 | grep -v "produces an empty option set" | tail -5
.build/debug/harness info | grep -q '"rawloop-metal"'
echo "HarnessMetal type-checks against the Metal stub"
