#!/usr/bin/env python3
"""Runs a bundle from scripts/package.py as a user on a bare host would: copied
(or unpacked) into an empty directory, started with an empty environment, it
serves the repository's models/ and must answer the README's examples, every
`console` curl example (REST) and the TF Serving gRPC Predict in Python,
with what the README prints.

A bundle for another architecture runs under qemu user emulation (Debian's
qemu-user-static, with the cross toolchain's sysroot for the dynamic loader),
so the ARM64 bundle is checked on an x86-64 machine:

    python3 scripts/package.py --arch aarch64 --no-archive
    python3 scripts/bundle_smoke.py dist/tfserve-0.1.0-linux-aarch64-cpu

The gRPC example runs under TFSERVE_CLIENT_PYTHON, or the client environment
`scripts/client_venv.py client` makes (TensorFlow and tensorflow-serving-api).
Emulation is slow: this checks answers, never speed.
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
import tarfile
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
# ELF e_machine -> the architecture's name in bundle names.
MACHINES = {0x3E: "x86_64", 0xB7: "aarch64"}
# Where Debian's cross toolchain keeps the target's loader and C libraries.
SYSROOTS = {"aarch64": pathlib.Path("/usr/aarch64-linux-gnu")}
START_TIMEOUT_S = 600
FLOAT_TOLERANCE = 1e-4


def log(message):
    print(f"[bundle-smoke] {message}", file=sys.stderr, flush=True)


def elf_arch(binary):
    header = binary.read_bytes()[:20]
    if header[:4] != b"\x7fELF":
        raise SystemExit(f"{binary} is not an ELF binary")
    machine = int.from_bytes(header[18:20], "little")
    if machine not in MACHINES:
        raise SystemExit(f"{binary}: unknown ELF machine {machine:#x}")
    return MACHINES[machine]


def runner_for(arch):
    """The command prefix that runs a binary of `arch` here: nothing when native."""
    if arch == platform.machine():
        return []
    qemu = shutil.which(f"qemu-{arch}-static") or shutil.which(f"qemu-{arch}")
    if qemu is None:
        raise SystemExit(f"qemu-{arch}-static is needed to run the {arch} bundle here "
                         "(Debian: apt-get install qemu-user-static)")
    sysroot = SYSROOTS[arch]
    if not (sysroot / "lib").is_dir():
        raise SystemExit(f"{sysroot} (the {arch} loader and C library) is missing "
                         "(Debian: apt-get install gcc-aarch64-linux-gnu)")
    return [qemu, "-L", str(sysroot)]


def place(bundle, into):
    """The bundle, as a user would have it after download: a copy, or the archive unpacked."""
    if bundle.is_dir():
        target = into / bundle.name
        shutil.copytree(bundle, target, symlinks=True)
        return target
    with tarfile.open(bundle) as archive:
        archive.extractall(into, filter="tar")
    (target,) = [p for p in into.iterdir() if p.is_dir()]
    return target


def readme_examples(section=None):
    """(command, expected output) of each `console` block line, in the whole
    README or under one heading, and the TF Serving gRPC Python block."""
    readme = (ROOT / "README.md").read_text()
    text = readme.split(f"\n{section}\n", 1)[1].split("\n## ", 1)[0] if section else readme
    examples = []
    for block in re.findall(r"^```console\n(.*?)^```", text, re.M | re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                examples.append([line[2:], ""])
            elif examples:
                examples[-1][1] += line + "\n"
    grpc = re.search(r"^```python\n(.*?PredictionServiceStub.*?)^```", readme, re.M | re.S)
    if grpc is None or len(examples) < 8:
        raise SystemExit("the README lost its examples")
    return examples, grpc.group(1)


def same(got, want):
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and isinstance(want, (int, float)) and \
            abs(got - want) <= FLOAT_TOLERANCE * max(1.0, abs(want))
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    return got == want


def start(command, cwd):
    log("starting: " + " ".join(command))
    started = time.monotonic()
    server = subprocess.Popen(command, cwd=cwd, env={}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    lines, found = [], {}
    ready = threading.Event()

    def read():
        for line in server.stderr:
            lines.append(line.rstrip("\n"))
            match = re.search(r" on http://(\S+?)[ \"].*gRPC on (\S+?)[ \"]", line)
            if match and not ready.is_set():
                found["rest"], found["grpc"] = match.group(1), match.group(2)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(START_TIMEOUT_S)
    if "rest" not in found:
        server.kill()
        raise SystemExit("the server did not report its address:\n" + "\n".join(lines[-40:]))
    log(f"ready in {time.monotonic() - started:.1f} s: REST {found['rest']}, gRPC {found['grpc']}")
    return server, found, lines


def client_python():
    if os.environ.get("TFSERVE_CLIENT_PYTHON"):
        return os.environ["TFSERVE_CLIENT_PYTHON"]
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "client_venv.py"), "client"], check=True,
                          capture_output=True, text=True).stdout.strip()


def check_rest(examples, rest):
    """Runs each example against `rest` (host:port); the failures, described."""
    failures = []
    for command, expected in examples:
        command = command.replace("localhost:8501", rest)
        done = subprocess.run(["sh", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=300)
        printed = done.stdout
        try:
            ok = done.returncode == 0 and same(json.loads(printed), json.loads(expected))
        except json.JSONDecodeError:
            ok = done.returncode == 0 and printed.strip() == expected.strip()
        print(f"$ {command}\n{printed.rstrip()}", flush=True)
        if not ok:
            failures.append(f"{command}\n got: {printed}{done.stderr}\nwant: {expected}")
    return failures


def check_grpc(program, grpc):
    program = program.replace("localhost:8500", grpc)
    want = json.loads(re.search(r"#\s*(\[.*\])\s*$", program, re.M).group(1))
    done = subprocess.run([client_python(), "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    print(f"gRPC Predict (README's Python client): {done.stdout.strip()}", flush=True)
    try:
        got = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        got = None
    if done.returncode != 0 or not same(got, want):
        return [f"gRPC Predict\n got: {done.stdout}{done.stderr[-2000:]}\nwant: {want}"]
    return []


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle", type=pathlib.Path, help="a bundle directory or its .tar.xz")
    args = parser.parse_args()
    examples, grpc_program = readme_examples()
    with tempfile.TemporaryDirectory(prefix="tfserve-bundle-") as empty:
        empty = pathlib.Path(empty)
        bundle = place(args.bundle.resolve(), empty)
        binary = bundle / "bin" / "tfserve"
        arch = elf_arch(binary)
        shutil.copytree(ROOT / "models", empty / "models", ignore=shutil.ignore_patterns("*.py"))
        runner = runner_for(arch)
        version = subprocess.run([*runner, str(binary), "--version"], cwd=empty, env={}, capture_output=True,
                                 text=True, timeout=300)
        print(version.stdout, end="", flush=True)
        if version.returncode != 0 or f"({bundle / 'lib'}" not in version.stdout:
            raise SystemExit(f"--version did not load the bundle's own libtensorflow:\n{version.stdout}{version.stderr}")
        server, addresses, lines = start(
            [*runner, str(binary), "--models_dir=models", "--port=0", "--rest_api_port=0", "--host=127.0.0.1"],
            empty)
        try:
            failures = check_rest(examples, addresses["rest"]) + check_grpc(grpc_program, addresses["grpc"])
        finally:
            server.terminate()
            code = server.wait(timeout=120)
        if code != 0:
            failures.append(f"SIGTERM: exit {code}\n" + "\n".join(lines[-20:]))
    if failures:
        raise SystemExit("the bundle answered differently from the README:\n\n" + "\n\n".join(failures))
    log(f"{arch} bundle: {len(examples)} REST examples and the gRPC Predict answer as the README shows; "
        "SIGTERM exits 0")


if __name__ == "__main__":
    main()
