#!/usr/bin/env python3
"""Per-request cost check for CI: instructions, not seconds.

Counts the instructions (valgrind's callgrind) a server executes per request,
in every thread, for a window of sequential keep-alive requests:

  - the HTTP ceiling (`tfserve-bench ceiling`: actix-web answering a fixed body),
  - tfserve with default flags and `--enable_batching=true`, serving
    models/half_plus_three's REST :predict (one instance per request),
  - the same server's gRPC Predict, one call at a time on one connection,
  - the gRPC ceiling (`tfserve-bench grpc-ceiling`: the `h2` crate answering
    every Predict with a fixed, pre-encoded answer), called the same way,
  - and the REST :predict of a server capturing every request into JSON
    Lines (`--capture_jsonl_dir`), the capture writer's thread included,

and compares the ratios tfserve / ceiling (REST and captured REST against the HTTP
ceiling, gRPC Predict against the gRPC ceiling) with the committed baseline (benches/cost_baseline.json). The model's own session runs (everything under
`Model::run`) are left out of tfserve's count: the check guards what the
server adds around the model, which a sequential client's batches of one
would otherwise drown in TensorFlow's executor. The server runs with a high
`--inline_run_max_micros`, so that valgrind's slowdown does not move the
runs from the requests' threads (where default flags put this model on real
hardware) to the batch threads. Instruction counts do not depend on the
machine's load, so the check cannot fail because CI shares its cores; the
median of several windows smooths what thread scheduling still moves.
Exits 1, printing the figures, when any ratio is more than 25% over the
baseline.

    python3 benches/cost_check.py                 # check (builds its own release binaries, ~8 minutes the first time)
    python3 benches/cost_check.py --update        # measure and write the baseline
    python3 benches/cost_check.py --repeat 10     # ten checks in a row, for the spread
    python3 benches/cost_check.py --no-build --server-args=--capture_jsonl_dir=/tmp/capture
"""
import argparse
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Built apart with one codegen unit: how a crate is split into units (which
# moves with, among other things, the checkout's path) changes what gets
# inlined, and so the counts, by 10% and more; one unit leaves nothing to chance.
TARGET = ROOT / "target" / "cost-check"
RELEASE = TARGET / "release"
BASELINE = ROOT / "benches" / "cost_baseline.json"
MODEL = ROOT / "models" / "half_plus_three"
BODY = b'{"instances": [1.0]}'
TOLERANCE = 1.25
# The session run, whose instructions are the model's, not the server's.
MODEL_RUN = "as tfserve::runtime::Model>::run"
WINDOWS = 5
REQUESTS = 200
# A gRPC window's length: its calls are counted, whatever valgrind's pace.
GRPC_SECONDS = 4


def log(message):
    print(f"[cost-check] {message}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_valgrind():
    if shutil.which("valgrind") and shutil.which("callgrind_control"):
        return
    log("installing valgrind from Debian's packages")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "valgrind"], check=True)


def build():
    env = dict(os.environ, CARGO_PROFILE_RELEASE_CODEGEN_UNITS="1")
    subprocess.run(["cargo", "build", "--release", "--bin", "tfserve", "--bin", "tfserve-bench",
                    "--target-dir", str(TARGET)], cwd=ROOT, check=True, env=env)


class Client:
    """One keep-alive connection, as a client's connection pool keeps it."""

    def __init__(self, port, path, body):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.path, self.body = path, body

    def send(self, count):
        for _ in range(count):
            self.connection.request("POST", self.path, body=self.body, headers={"Content-Type": "application/json"})
            response = self.connection.getresponse()
            answer = response.read()
            if response.status != 200:
                raise RuntimeError(f"{self.path} answered {response.status}: {answer[:200]!r}")


def wait_answering(proc, port, path, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before answering")
        try:
            Client(port, path, BODY).send(1)
            return
        except (OSError, RuntimeError, http.client.HTTPException):
            time.sleep(0.5)
    raise RuntimeError(f"nothing answered {path} on port {port} within {timeout} s")


def instructions(out_file, exclude):
    """The instruction count of one callgrind dump, less what ran inside the
    functions named by `exclude` (inclusive counts, from callgrind_annotate)."""
    text = out_file.read_text(errors="replace")
    found = re.search(r"^totals:\s+(\d+)", text, re.M)
    if not found:
        raise RuntimeError(f"no instruction total in {out_file}")
    total = int(found.group(1))
    if not exclude:
        return total
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out_file)],
                               capture_output=True, text=True, check=True).stdout
    inside = 0
    for line in annotated.splitlines():
        count = re.match(r"\s*([\d,]+) \(", line)
        if count and exclude in line:
            inside = max(inside, int(count.group(1).replace(",", "")))
    return total - inside


def grpc_window(grpc_port, seconds=GRPC_SECONDS):
    """One window of sequential gRPC Predict calls on one connection; returns the calls made."""
    out = subprocess.run([str(RELEASE / "tfserve-bench"), "grpc", "--model-dir", str(MODEL), "--model",
                          "half_plus_three", "--target", f"http://127.0.0.1:{grpc_port}", "--concurrency", "1",
                          "--connections", "1", "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    if result.get("errors"):
        raise RuntimeError(f"gRPC Predict failed {result['errors']} times")
    return result["requests"]


def under_callgrind(cmd, work, name, env=None):
    out = work / f"{name}.callgrind"
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                "--dump-line=no", "--compress-strings=no", "--error-limit=no"]
    return subprocess.Popen(valgrind + cmd, stdout=subprocess.DEVNULL, stderr=open(work / f"{name}.log", "w"),
                            env=env)


def window(proc, work, name, send, exclude=None):
    """Instructions per request while `send()` -> requests sent runs."""
    subprocess.run(["callgrind_control", "--instr=on", str(proc.pid)], check=True, capture_output=True)
    sent = send()
    subprocess.run(["callgrind_control", "--instr=off", str(proc.pid)], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "--zero", str(proc.pid)], check=True, capture_output=True)
    dumps = sorted(work.glob(f"{name}.callgrind.*"), key=lambda p: int(p.suffix[1:]))
    return instructions(dumps[-1], exclude) / sent


def per_request(cmd, port, path, work, name, env=None, exclude=None, grpc_port=None):
    """Median instructions per request over WINDOWS windows of REQUESTS requests;
    with `grpc_port`, also per gRPC Predict call (over windows of GRPC_SECONDS)."""
    proc = under_callgrind(cmd, work, name, env)
    try:
        wait_answering(proc, port, path, timeout=900)
        client = Client(port, path, BODY)
        client.send(REQUESTS)  # warm: caches, lazily built state, measured run times
        counts = [window(proc, work, name, lambda: client.send(REQUESTS) or REQUESTS, exclude)
                  for _ in range(WINDOWS)]
        if grpc_port is None:
            return statistics.median(counts), counts, None
        grpc_window(grpc_port)  # warm, as REST was
        grpc_counts = [window(proc, work, name, lambda: grpc_window(grpc_port), exclude) for _ in range(WINDOWS)]
        return statistics.median(counts), counts, statistics.median(grpc_counts)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def grpc_ceiling(work):
    """Median instructions per call of the gRPC ceiling, over WINDOWS windows of GRPC_SECONDS."""
    port = free_port()
    proc = under_callgrind([str(RELEASE / "tfserve-bench"), "grpc-ceiling", "--model-dir", str(MODEL), "--model",
                            "half_plus_three", "--port", str(port)], work, "grpc-ceiling",
                           dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        deadline = time.time() + 300
        while True:
            try:
                grpc_window(port, seconds=0.2)
                break
            except (subprocess.CalledProcessError, RuntimeError):
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("the gRPC ceiling never answered") from None
                time.sleep(0.5)
        grpc_window(port)  # warm, as tfserve was
        counts = [window(proc, work, "grpc-ceiling", lambda: grpc_window(port)) for _ in range(WINDOWS)]
        return statistics.median(counts), counts
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def measure(server_args=()):
    work = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-cost-"))
    try:
        port = free_port()
        ceiling, ceiling_windows, _ = per_request(
            [str(RELEASE / "tfserve-bench"), "ceiling", "--port", str(port), "--workers", "1"], port, "/", work,
            "ceiling")
        grpc_ceiling_count, grpc_ceiling_windows = grpc_ceiling(work)
        port, grpc = free_port(), free_port()
        env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
        server, server_windows, grpc_server = per_request(
            [str(RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(port), "--port", str(grpc),
             "--model_name", "half_plus_three", "--model_base_path", str(MODEL), "--enable_batching=true",
             "--inline_run_max_micros=1000000", *server_args],
            port, "/v1/models/half_plus_three:predict", work, "tfserve", env, exclude=MODEL_RUN, grpc_port=grpc)
        port, grpc = free_port(), free_port()
        captured, _, _ = per_request(
            [str(RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(port), "--port", str(grpc),
             "--model_name", "half_plus_three", "--model_base_path", str(MODEL), "--enable_batching=true",
             "--inline_run_max_micros=1000000", "--capture_jsonl_dir", str(work / "capture"), *server_args],
            port, "/v1/models/half_plus_three:predict", work, "capture", env, exclude=MODEL_RUN)
        return {"ceiling_instructions": round(ceiling), "tfserve_instructions": round(server),
                "grpc_instructions": round(grpc_server), "grpc_ceiling_instructions": round(grpc_ceiling_count),
                "capture_instructions": round(captured), "ratio": server / ceiling,
                "grpc_ratio": grpc_server / grpc_ceiling_count, "capture_ratio": captured / ceiling,
                "windows": {"ceiling": ceiling_windows, "tfserve": server_windows,
                            "grpc_ceiling": grpc_ceiling_windows}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="write the measurement as the new baseline")
    parser.add_argument("--repeat", type=int, default=1, help="checks in a row (each one full measurement)")
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--server-args", default="",
                        help="more tfserve flags, to see what a feature costs a request "
                             "(e.g. --server-args=--capture_jsonl_dir=/tmp/capture)")
    args = parser.parse_args()
    ensure_valgrind()
    if not args.no_build:
        build()
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else None
    failed = False
    for n in range(args.repeat):
        result = measure(args.server_args.split())
        line = (f"instructions per request: tfserve {result['tfserve_instructions']:,} (session runs left out), "
                f"ceiling {result['ceiling_instructions']:,}, ratio {result['ratio']:.3f} "
                f"(windows: tfserve {min(result['windows']['tfserve']):,.0f}-{max(result['windows']['tfserve']):,.0f}, "
                f"ceiling {min(result['windows']['ceiling']):,.0f}-{max(result['windows']['ceiling']):,.0f}); "
                f"gRPC Predict {result['grpc_instructions']:,} per call, gRPC ceiling "
                f"{result['grpc_ceiling_instructions']:,}, ratio {result['grpc_ratio']:.3f} "
                f"(REST / gRPC ceiling {result['tfserve_instructions'] / result['grpc_ceiling_instructions']:.3f}); "
                f"captured REST "
                f"{result['capture_instructions']:,} ({result['capture_instructions'] / result['tfserve_instructions']:.2f}x "
                f"uncaptured)")
        if args.update:
            BASELINE.write_text(json.dumps({k: result[k] for k in
                                            ("ceiling_instructions", "tfserve_instructions", "ratio",
                                             "grpc_ceiling_instructions", "grpc_instructions", "grpc_ratio",
                                             "capture_instructions", "capture_ratio")}, indent=2) + "\n")
            print(f"{line}; written to {BASELINE.relative_to(ROOT)}")
            continue
        if baseline is None:
            sys.exit(f"no baseline at {BASELINE}; run with --update")
        bound = baseline["ratio"] * TOLERANCE
        verdict = "ok" if result["ratio"] <= bound else "FAILED"
        grpc_check = ""
        if "grpc_ceiling_instructions" in baseline:
            grpc_bound = baseline["grpc_ratio"] * TOLERANCE
            grpc_check = (f"; gRPC / gRPC ceiling {result['grpc_ratio']:.3f} against baseline "
                          f"{baseline['grpc_ratio']:.3f} ({baseline['grpc_instructions']:,} / "
                          f"{baseline['grpc_ceiling_instructions']:,}), bound {grpc_bound:.3f}")
            if result["grpc_ratio"] > grpc_bound:
                verdict = "FAILED"
        if "capture_ratio" in baseline:
            capture_bound = baseline["capture_ratio"] * TOLERANCE
            grpc_check += (f"; captured ratio {result['capture_ratio']:.3f} against baseline "
                           f"{baseline['capture_ratio']:.3f}, bound {capture_bound:.3f}")
            if result["capture_ratio"] > capture_bound:
                verdict = "FAILED"
        print(f"[{n + 1}/{args.repeat}] {line}; baseline ratio {baseline['ratio']:.3f} "
              f"(tfserve {baseline['tfserve_instructions']:,}), bound {bound:.3f}{grpc_check}: {verdict}",
              flush=True)
        failed |= verdict != "ok"
    if failed:
        sys.exit("per-request cost is more than 25% over the baseline: find what the request path gained "
                 "(python3 benches/ceiling.py measures it under load)")


if __name__ == "__main__":
    main()
