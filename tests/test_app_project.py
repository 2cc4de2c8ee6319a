"""The iOS app links llama.cpp exactly when its XCFramework is vendored, under the condition the CLI uses.

Nothing Apple-side builds here (no Xcode, no XcodeGen, no XCFramework). What is checked: the app's
generate.sh, run for real, hands XcodeGen a spec whose merged HarnessApp target (XcodeGen's own include
and merge rules, tests/xcodegen_spec.py) depends on the HarnessLlama product and compiles with
HARNESS_LLAMA exactly when `Vendor/llama.xcframework` is present and HARNESS_LLAMA is not 0; that
Package.swift declares that product on Apple hosts under that same condition and path (its Linux side
evaluated by SwiftPM itself); that the shared Engines.swift registers `llamacpp` only under that
condition; and that docs/llamacpp-engine.md tells the user the same path, script and names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import xcodegen_spec
from conftest import ROOT
from ruamel.yaml import YAML

HARNESS = ROOT / "ios_harness"
APP = HARNESS / "App"
FRAMEWORK = "Vendor/llama.xcframework"  # relative to the package (ios_harness/)
CONDITION = "HARNESS_LLAMA"
PRODUCT = "HarnessLlama"
DOC = ROOT / "docs" / "llamacpp-engine.md"
SH = shutil.which("sh") or "/bin/sh"
BASE_PRODUCTS = ["HarnessCore", "HarnessModel", "HarnessCPU", "HarnessMetal"]


def copy_app(tmp: Path, *, framework: bool) -> Path:
    """The app's XcodeGen inputs in a package folder of their own; the XCFramework folder if asked."""
    pkg = tmp / "ios_harness"
    (pkg / "App").mkdir(parents=True)
    for name in ("project.yml", "llama.yml", "generate.sh"):
        shutil.copy2(APP / name, pkg / "App" / name)
    shutil.copy2(HARNESS / "Package.swift", pkg / "Package.swift")
    if framework:
        (pkg / FRAMEWORK / "ios-arm64" / "llama.framework").mkdir(parents=True)
    return pkg


def xcodegen_on_path(tmp: Path) -> str:
    """A PATH whose `xcodegen` is XcodeGen's spec loading (tests/xcodegen_spec.py), printing the merged spec."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "xcodegen"
    tool.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).with_name('xcodegen_spec.py')} \"$@\"\n")
    tool.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def generate(pkg: Path, path: str, harness_llama: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_LLAMA", "HARNESS_APP_LLAMA")}
    env["PATH"] = path
    if harness_llama is not None:
        env["HARNESS_LLAMA"] = harness_llama
    # Run from elsewhere: the script finds its own folder, as `ios_harness/App/generate.sh` from the repo does.
    return subprocess.run([SH, str(pkg / "App" / "generate.sh")], cwd=pkg.parent, env=env,
                          capture_output=True, text=True, timeout=60)


def app_target(spec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """HarnessApp's package products and its Swift compilation conditions, as merged."""
    target = spec["targets"]["HarnessApp"]
    products = []
    for dep in target["dependencies"]:
        assert spec["packages"][dep["package"]]["path"] == "..", dep  # the package beside App/: ios_harness
        products.append(dep["product"])
    conditions = str(target.get("settings", {}).get("base", {}).get("SWIFT_ACTIVE_COMPILATION_CONDITIONS", ""))
    return products, conditions.split()


@pytest.mark.parametrize(("framework", "harness_llama", "linked"), [
    (True, None, True),     # vendored: the app links the engine
    (True, "1", True),
    (False, None, False),   # absent: the app builds as before
    (True, "0", False),     # HARNESS_LLAMA=0: Package.swift leaves the product out, so must the app
    (False, "1", False),
])
def test_generate_links_llama_exactly_when_the_framework_is_vendored(
        tmp_path: Path, framework: bool, harness_llama: str | None, linked: bool) -> None:
    pkg = copy_app(tmp_path, framework=framework)
    res = generate(pkg, xcodegen_on_path(tmp_path), harness_llama)
    assert res.returncode == 0, res.stderr
    said, printed = res.stdout.splitlines()[0], res.stdout.splitlines()[-1]
    assert said.startswith("HarnessApp: with the llamacpp engine" if linked else "HarnessApp: without"), said
    products, conditions = app_target(json.loads(printed))
    if linked:
        assert products == [PRODUCT, *BASE_PRODUCTS]
        assert conditions == ["$(inherited)", CONDITION]  # $(inherited): Debug keeps its DEBUG
    else:
        assert products == BASE_PRODUCTS
        assert CONDITION not in conditions


def test_plain_xcodegen_without_the_script_leaves_llama_out() -> None:
    # `xcodegen generate` run by hand: the include's switch is unset, so the app builds as without the framework.
    products, conditions = app_target(xcodegen_spec.load(APP / "project.yml", {}))
    assert products == BASE_PRODUCTS and CONDITION not in conditions


def test_generate_without_xcodegen_says_so(tmp_path: Path) -> None:
    pkg = copy_app(tmp_path, framework=True)
    bin_dir = tmp_path / "only"
    bin_dir.mkdir()
    dirname = shutil.which("dirname")
    assert dirname is not None
    (bin_dir / "dirname").symlink_to(dirname)  # all the script needs besides sh's builtins
    res = generate(pkg, str(bin_dir), None)
    assert res.returncode == 2
    assert "xcodegen not found" in res.stderr and "brew install xcodegen" in res.stderr


def apple_branch(package: str) -> str:
    """Package.swift's llama.cpp block for hosts other than Linux (the `#else` of `#if os(Linux)`)."""
    start = package.index("var llamaTargets")
    block = package[start:package.index("let package = Package(")]
    return block[block.index("#else"):block.index("#endif")]


def test_package_declares_the_product_under_the_same_condition_and_path() -> None:
    package = (HARNESS / "Package.swift").read_text()
    apple = apple_branch(package)
    assert f'Context.environment["{CONDITION}"] != "0"' in apple
    assert f'fileExists(atPath: Context.packageDirectory + "/{FRAMEWORK}")' in apple
    assert f'.binaryTarget(name: "llama", path: "{FRAMEWORK}")' in apple
    assert f'.target(name: "{PRODUCT}", dependencies: ["HarnessCore", "llama"])' in apple
    assert f'llamaEngine = ["{PRODUCT}"]' in apple and f'llamaFlags = [.define("{CONDITION}")]' in apple
    # The product exists whenever the engine target does; the CLI target compiles with the condition.
    assert f'(llamaEngine.isEmpty ? [] : [.library(name: "{PRODUCT}", targets: ["{PRODUCT}"])])' in package
    harness_target = package[package.index('.executableTarget(\n            name: "harness"'):]
    assert "+ llamaEngine" in harness_target.split(")")[0] and "swiftSettings: llamaFlags" in harness_target
    # generate.sh tests the same two facts: the framework folder (from App/) and HARNESS_LLAMA not 0.
    script = (APP / "generate.sh").read_text()
    folder = re.search(r"^framework=(\S+)$", script, re.M)
    assert folder is not None and (APP / folder.group(1)).resolve() == (HARNESS / FRAMEWORK).resolve()
    assert f'[ "${{{CONDITION}:-}}" != 0 ] && [ -d "$framework" ]' in script


def dump_package(tmp: Path, swift: str, harness_llama: str) -> dict[str, Any]:
    pkg = tmp / f"pkg-{harness_llama.replace('/', '_')}"
    pkg.mkdir()
    shutil.copy2(HARNESS / "Package.swift", pkg / "Package.swift")
    env = {**os.environ, CONDITION: harness_llama}
    res = subprocess.run([swift, "package", "--package-path", str(pkg), "--scratch-path", str(tmp / "scratch"),
                          "dump-package"], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def swift_path() -> str | None:
    return shutil.which("swift") or next((p for p in ("/opt/swift/usr/bin/swift",) if Path(p).is_file()), None)


@pytest.mark.skipif(swift_path() is None or sys.platform != "linux",
                    reason="needs Swift on Linux (SwiftPM evaluates the manifest)")
def test_swiftpm_on_linux_defines_the_condition_where_the_engine_is(tmp_path: Path) -> None:
    swift = swift_path()
    assert swift is not None
    llama = tmp_path / "llama"  # a folder as `make llama` links it; the manifest only names it
    for harness_llama, linked in ((str(llama), True), ("0", False)):
        manifest = dump_package(tmp_path, swift, harness_llama)
        products = {p["name"] for p in manifest["products"]}
        targets = {t["name"]: t for t in manifest["targets"]}
        defines = [s for s in targets["harness"]["settings"] if s.get("kind", {}).get("define")]
        assert (PRODUCT in products) is linked and (PRODUCT in targets) is linked
        assert [next(iter(s["kind"]["define"].values())) for s in defines] == ([CONDITION] if linked else [])
        deps = json.dumps(targets["harness"]["dependencies"])
        assert (f'"{PRODUCT}"' in deps) is linked


def conditions_of(swift: str) -> list[tuple[str, list[str]]]:
    """Each line of Swift source with the `#if` conditions in force there (`!X` in an `#else`)."""
    stack: list[str] = []
    out = []
    for line in swift.splitlines():
        s = line.strip()
        if s.startswith("#if "):
            stack.append(s[4:].strip())
        elif s.startswith("#else"):
            stack[-1] = "!" + stack[-1]
        elif s.startswith("#endif"):
            stack.pop()
        else:
            out.append((s, list(stack)))
    return out


def test_the_engine_registry_lists_llamacpp_only_under_the_condition() -> None:
    engines = HARNESS / "Sources" / "harness" / "Engines.swift"
    lines = conditions_of(engines.read_text())
    llama = [(s, conds) for s, conds in lines if re.search(r"\b(HarnessLlama|LlamaCpp|LlamaBuild)\b", s)]
    assert {s for s, _ in llama} >= {"import HarnessLlama", "names.append(LlamaCpp.engineName)",
                                     "case LlamaCpp.engineName:", "return LlamaBuild.current"}
    for s, conds in llama:
        assert conds == [CONDITION], f"{engines.name}: `{s}` under {conds}, not `#if {CONDITION}`"
    # The app compiles that very file and builds its engines from it.
    target = YAML(typ="safe").load((APP / "project.yml").read_text())["targets"]["HarnessApp"]
    sources = [(APP / s["path"]).resolve() for s in target["sources"]]
    assert engines.resolve() in sources
    assert "factory: BuiltinEngines()" in (APP / "Sources" / "HarnessApp.swift").read_text()
    # llama.yml sets for the app the condition Package.swift defines for the CLI.
    merged = YAML(typ="safe").load((APP / "llama.yml").read_text())["targets"]["HarnessApp"]
    assert CONDITION in merged["settings"]["base"]["SWIFT_ACTIVE_COMPILATION_CONDITIONS"].split()


def test_the_docs_tell_the_user_the_same_path_script_and_names() -> None:
    doc = DOC.read_text()
    dest = re.search(r"cp -R build-apple/llama\.xcframework <repo>/ios_harness/(\S+)", doc)
    assert dest is not None and dest.group(1) == FRAMEWORK, "where the docs put the framework"
    assert f".binaryTarget(name: \"llama\", path: \"{FRAMEWORK}\")" in doc
    for needle in ("App/generate.sh", f"`{PRODUCT}`", f"`{CONDITION}`", "HARNESS_APP_LLAMA"):
        assert needle in doc, needle
    readme = (APP / "README.md").read_text()
    commands = [ln.split("#")[0].strip() for ln in readme.splitlines()]
    assert "./generate.sh" in commands, "the app's build steps run generate.sh"
    assert "xcodegen generate" not in commands, "a bare `xcodegen generate` would leave the engine out"
