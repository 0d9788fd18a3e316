#!/usr/bin/env python3
"""Provision libtensorflow for building and running tfserve.

Fetches the pinned TensorFlow CPU wheel from PyPI (sha256 checked) into a cache
outside the repository, extracts the C API library, its framework library and
the C headers, writes a pkg-config file, and links the result into the
repository as `.libtensorflow` so that `.cargo/config.toml` finds it.

A second run with the cache present does nothing.

    python3 scripts/setup_libtensorflow.py          # CPU build (tensorflow-cpu wheel)
    python3 scripts/setup_libtensorflow.py --gpu    # CUDA build (tensorflow wheel)

To use your own libtensorflow (a CUDA or MKL build), set TENSORFLOW_LIB_DIR to
the directory holding libtensorflow.so* / libtensorflow_cc.so.2 and
libtensorflow_framework.so* and run this script: it writes the pkg-config file
for that directory instead.
"""
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

TF_VERSION = "2.21.0"
# variant -> (PyPI project, wheel file, sha256)
WHEELS = {
    "cpu": ("tensorflow-cpu", f"tensorflow_cpu-{TF_VERSION}-cp311-cp311-manylinux_2_27_x86_64.whl",
            "2b847d217b02ee7731ed91431daf3250daa0196c3c94614d23be27232e6e5b6c"),
    "gpu": ("tensorflow", f"tensorflow-{TF_VERSION}-cp311-cp311-manylinux_2_27_x86_64.whl",
            "9056fbc9ba04235810b71ae6cbd958a196e8804fb53bbcffbf3e23b56155f124"),
}
# The wheel is platform-specific but its shared libraries do not depend on the
# Python version, so the cp311 build is fetched whatever python runs this.
PIP_SELECTORS = ["--python-version", "3.11", "--platform", "manylinux_2_27_x86_64",
                 "--only-binary=:all:", "--implementation", "cp", "--abi", "cp311"]

from tfvenv import cache_root  # noqa: E402  (scripts/ is on sys.path when run as a script)

REPO = pathlib.Path(__file__).resolve().parent.parent
LINK = REPO / ".libtensorflow"


def log(msg: str) -> None:
    print(f"[setup-libtensorflow] {msg}", file=sys.stderr, flush=True)


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(wheels: pathlib.Path, variant: str) -> pathlib.Path:
    project, filename, expected = WHEELS[variant]
    wheel = wheels / filename
    if wheel.exists() and sha256(wheel) == expected:
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    log(f"downloading {project}=={TF_VERSION} from PyPI (cpu ~274 MB, gpu ~572 MB)")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                    "-d", str(wheels), *PIP_SELECTORS, f"{project}=={TF_VERSION}"], check=True)
    actual = sha256(wheel)
    if actual != expected:
        wheel.unlink()
        sys.exit(f"sha256 mismatch for {filename}: expected {expected}, got {actual}")
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


def extract(wheel: pathlib.Path, dest: pathlib.Path) -> None:
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".staging-", dir=dest.parent))
    log(f"extracting libraries and headers into {dest}")
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if name in ("tensorflow/libtensorflow_cc.so.2", "tensorflow/libtensorflow_framework.so.2"):
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
    write_pkg_config(lib, staging / "include", final_prefix=dest)
    if dest.exists():
        shutil.rmtree(dest)
    staging.rename(dest)


def write_pkg_config(lib: pathlib.Path, include: pathlib.Path, final_prefix: pathlib.Path | None = None) -> None:
    libdir = final_prefix / "lib" if final_prefix else lib
    incdir = final_prefix / "include" if final_prefix else include
    pc_dir = lib / "pkgconfig"
    pc_dir.mkdir(parents=True, exist_ok=True)
    (pc_dir / "tensorflow.pc").write_text(
        f"libdir={libdir}\nincludedir={incdir}\n\n"
        f"Name: TensorFlow\nDescription: TensorFlow C API\nVersion: {TF_VERSION}\n"
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
    write_pkg_config(dest / "lib", lib_dir.parent / "include")


def link_into_repo(target: pathlib.Path) -> None:
    if LINK.is_symlink() and pathlib.Path(os.readlink(LINK)) == target:
        return
    if LINK.is_symlink() or LINK.exists():
        LINK.unlink()
    LINK.symlink_to(target)


def main() -> None:
    variant = "gpu" if "--gpu" in sys.argv[1:] else "cpu"
    root = cache_root()
    own = os.environ.get("TENSORFLOW_LIB_DIR")
    if own:
        dest = root / "libtensorflow-custom"
        dest.parent.mkdir(parents=True, exist_ok=True)
        own_library(pathlib.Path(own).resolve(), dest)
    else:
        dest = root / f"libtensorflow-{TF_VERSION}-{variant}"
        complete = all((dest / p).exists() for p in ("lib/pkgconfig/tensorflow.pc", "include/tsl/platform/ctstring.h"))
        if not complete:
            dest.parent.mkdir(parents=True, exist_ok=True)
            extract(fetch_wheel(root / "wheels", variant), dest)
    link_into_repo(dest)
    log(f"libtensorflow ready: {dest / 'lib'}")


if __name__ == "__main__":
    main()
