#!/bin/sh
# xcodegen generate for the harness app, with the `llamacpp` engine exactly when the package has it:
# llama.cpp's XCFramework at ../Vendor/llama.xcframework and HARNESS_LLAMA not 0 (Package.swift's own
# condition for the HarnessLlama product). Arguments are passed on to `xcodegen generate`.
set -eu
cd "$(dirname "$0")"
framework=../Vendor/llama.xcframework
if [ "${HARNESS_LLAMA:-}" != 0 ] && [ -d "$framework" ]; then
    HARNESS_APP_LLAMA=YES
    echo "HarnessApp: with the llamacpp engine ($framework)"
else
    HARNESS_APP_LLAMA=NO
    echo "HarnessApp: without the llamacpp engine (no $framework, or HARNESS_LLAMA=0)"
fi
export HARNESS_APP_LLAMA
if ! command -v xcodegen >/dev/null 2>&1; then
    echo "generate.sh: xcodegen not found on PATH (brew install xcodegen)" >&2
    exit 2
fi
exec xcodegen generate "$@"
