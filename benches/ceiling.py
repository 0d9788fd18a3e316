#!/usr/bin/env python3
"""Small requests against the HTTP ceiling, in one run on one machine.

A new user's first test: half_plus_three with default flags, one instance per
request, 64 connections from wrk. Each round, interleaved, measures

  - the HTTP ceiling (`tfserve-bench ceiling`: the same actix-web stack
    answering a fixed body),
  - tfserve with `--enable_batching=true` and with batching off (REST),
  - tfserve's gRPC Predict on the same model,
  - the gRPC ceiling (`tfserve-bench grpc-ceiling`: a server on the same `h2`
    crate answering every Predict with a fixed, pre-encoded answer) and, as
    `grpc-tonic`, the same on tonic's server,
  - on request, `capture`: batching on with every request captured to the
    JSON Lines sink (`--capture_jsonl_dir`), the writer's CPU included,

each as req/s and server CPU per request (user + system time of the server
process, from /proc, over the requests answered). Also reports one raw batch-1
session run (`tfserve-bench raw`) and checks the targets:

  batching on:  req/s >= 0.80 x ceiling, CPU/request <= 1.25 x ceiling's
  batching off: CPU/request <= 1.25 x (ceiling's + one raw batch-1 run)
  gRPC:         req/s >= 0.90 x the gRPC ceiling's, CPU/call <= 1.15 x its,
                and CPU/call <= 1.25 x REST's (batching on)
  capture:      req/s >= 0.85 x batching on's, CPU/request <= 1.15 x its

    python3 benches/ceiling.py                    # 3 rounds of 10 s cells
    python3 benches/ceiling.py --rounds 1 --duration 5 --binary /tmp/tfserve-old
    python3 benches/ceiling.py --cells on,capture
    python3 benches/ceiling.py --baseline /tmp/tfserve-old --cells ceiling,on,on-base,grpc,grpc-base,capture,capture-base
        # a cell named CELL-base runs --baseline's binary, with CELL's flags: before and after, interleaved, in one run
    python3 benches/ceiling.py --cells ceiling,on,grpc-ceiling,grpc-tonic,grpc --rounds 5

gRPC cells are loaded by h2load (nghttp2-client), --grpc-connections
connections of --grpc-streams concurrent calls each (16 x 4: as many calls in
flight as wrk's 64 connections), each call the body `tfserve-bench grpc
--write-body` writes; before each cell one second of `tfserve-bench grpc`
checks that the calls end with grpc-status 0 (h2load sees HTTP status only).
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
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402  (the load script and the batch-size totals)

ROOT = bench.ROOT
RELEASE = ROOT / "target" / "release"
MODEL = ROOT / "models" / "half_plus_three"
BODY = '{"instances": [1.0]}'


def log(message):
    print(f"[ceiling] {message}", file=sys.stderr, flush=True)


def wrk(url, body_file, script, connections, duration):
    env = dict(os.environ, TFSERVE_BENCH_BODY=str(body_file))
    out = subprocess.run(["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{duration}s",
                          "--timeout", "30s", "-s", str(script), url],
                         capture_output=True, text=True, check=True, env=env).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return requests, int(non2xx.group(1)) if non2xx else 0


def grpc_checked(port):
    """One second of Predict calls from `tfserve-bench grpc`, which counts a
    call only when it ends with grpc-status 0: fails when any does not."""
    out = subprocess.run([str(RELEASE / "tfserve-bench"), "grpc", "--model-dir", str(MODEL),
                          "--model", "half_plus_three", "--target", f"http://127.0.0.1:{port}",
                          "--concurrency", "4", "--connections", "1", "--seconds", "1"],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    if result.get("errors") or not result["requests"]:
        raise RuntimeError(f"gRPC Predict on port {port} failed: {result}")


def grpc_load(body_file, port, args, duration):
    out = subprocess.run(["h2load", "-D", str(duration), "-t", "1", "-c", str(args.grpc_connections),
                          "-m", str(args.grpc_streams), "-d", str(body_file),
                          "-H", "content-type: application/grpc", "-H", "te: trailers",
                          f"http://127.0.0.1:{port}/tensorflow.serving.PredictionService/Predict"],
                         capture_output=True, text=True, check=True).stdout
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored",
                     out)
    if not done:
        raise RuntimeError(f"h2load printed no request counts:\n{out}")
    return int(done.group(1)), int(done.group(2)) + int(done.group(3))


def wait_http(port, path, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing answers on port {port}{path} after {timeout} s")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(proc, load):
    """Runs `load()` -> (requests, errors) and charges the server's CPU to it."""
    before, started = bench.cpu_seconds(proc.pid), time.time()
    requests, errors = load()
    elapsed, cpu = time.time() - started, bench.cpu_seconds(proc.pid) - before
    return {"rps": requests / elapsed, "cpu_us": cpu / max(requests, 1) * 1e6, "requests": requests,
            "errors": errors}


def ceiling_cell(binary_dir, work, script, args):
    port = free_port()
    proc = subprocess.Popen([str(binary_dir / "tfserve-bench"), "ceiling", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(port, "/")
        url = f"http://127.0.0.1:{port}/"
        wrk(url, work / "body.json", script, args.connections, 1)
        return measure(proc, lambda: wrk(url, work / "body.json", script, args.connections, args.duration))
    finally:
        proc.kill()
        proc.wait()


def grpc_ceiling_cell(work, stack, args):
    port = free_port()
    proc = subprocess.Popen([str(RELEASE / "tfserve-bench"), "grpc-ceiling", "--model-dir", str(MODEL),
                             "--model", "half_plus_three", "--port", str(port), "--stack", stack],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        deadline = time.time() + 60
        while True:
            try:
                grpc_checked(port)
                break
            except (subprocess.CalledProcessError, RuntimeError):
                if time.time() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        return measure(proc, lambda: grpc_load(work / "predict.bin", port, args, args.duration))
    finally:
        proc.kill()
        proc.wait()


def tfserve_cell(binary, binary_dir, work, script, args, batching, grpc, extra=()):
    port, grpc_port = free_port(), free_port()
    cmd = [str(binary), "--host", "127.0.0.1", "--rest_api_port", str(port), "--port", str(grpc_port),
           "--model_name", "half_plus_three", "--model_base_path", str(MODEL),
           f"--enable_batching={'true' if batching else 'false'}", *extra]
    env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_http(port, "/v1/models/half_plus_three")
        url = f"http://127.0.0.1:{port}/v1/models/half_plus_three:predict"
        if grpc:
            grpc_checked(grpc_port)
            load = lambda: grpc_load(work / "predict.bin", grpc_port, args, args.duration)  # noqa: E731
        else:
            wrk(url, work / "body.json", script, args.connections, 1)
            load = lambda: wrk(url, work / "body.json", script, args.connections, args.duration)  # noqa: E731
        before = bench.batch_totals(port)
        result = measure(proc, load)
        after = bench.batch_totals(port)
        count = after["count"] - before["count"]
        result["mean_batch"] = (after["sum"] - before["sum"]) / count if count else 0.0
        if extra:
            result.update(capture_totals(port))
        return result
    finally:
        proc.kill()
        proc.wait()


def capture_totals(port):
    """Records the capture sinks wrote and dropped, from /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    totals = {"captured": 0.0, "capture_dropped": 0.0}
    for line in text.splitlines():
        if line.startswith("tfserve_capture_records_total{"):
            totals["captured"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("tfserve_capture_dropped_total{"):
            totals["capture_dropped"] += float(line.rsplit(" ", 1)[1])
    return totals


def raw_run_us(binary_dir, seconds):
    out = subprocess.run([str(binary_dir / "tfserve-bench"), "raw", "--model-dir", str(MODEL), "--batches", "1",
                          "--seconds", str(seconds)], capture_output=True, text=True, check=True).stdout
    line = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    return line["p50_ms"] * 1000.0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10, help="seconds of load per cell")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--binary", type=pathlib.Path, default=RELEASE / "tfserve",
                        help="the tfserve binary (tfserve-bench always comes from target/release)")
    parser.add_argument("--baseline", type=pathlib.Path,
                        help="another tfserve binary, for the cells named CELL-base")
    parser.add_argument("--grpc-connections", type=int, default=16)
    parser.add_argument("--grpc-streams", type=int, default=4, help="concurrent calls per gRPC connection")
    parser.add_argument("--cells", default="ceiling,on,off,grpc-ceiling,grpc")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    cells = args.cells.split(",")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-ceiling-"))
    (work / "body.json").write_text(BODY)
    script = work / "post.lua"
    script.write_text(bench.WRK_SCRIPT)
    if any(cell.startswith("grpc") for cell in cells):
        if not shutil.which("h2load"):
            sys.exit("the gRPC cells are loaded by h2load: install it (Debian: apt-get install nghttp2-client)")
        subprocess.run([str(RELEASE / "tfserve-bench"), "grpc", "--model-dir", str(MODEL), "--model",
                        "half_plus_three", "--write-body", str(work / "predict.bin")], check=True,
                       capture_output=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    raw_us = raw_run_us(RELEASE, 2.0) if "off" in cells else None
    rounds = []
    for n in range(args.rounds):
        row = {}
        for cell in cells:
            if cell == "ceiling":
                row[cell] = ceiling_cell(RELEASE, work, script, args)
            elif cell in ("grpc-ceiling", "grpc-tonic"):
                row[cell] = grpc_ceiling_cell(work, "h2" if cell == "grpc-ceiling" else "tonic", args)
            else:
                kind, base = cell.removesuffix("-base"), cell.endswith("-base")
                if base and args.baseline is None:
                    parser.error(f"cell {cell} needs --baseline")
                binary = args.baseline if base else args.binary
                capture = ["--capture_jsonl_dir", str(work / f"{cell}-{n}")] if kind == "capture" else []
                row[cell] = tfserve_cell(binary, RELEASE, work, script, args, kind != "off", kind == "grpc", capture)
            log(f"round {n + 1} {cell}: " + json.dumps({k: round(v, 2) for k, v in row[cell].items()}))
        rounds.append(row)
    print(report(rounds, raw_us, args))
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "raw_batch1_us": raw_us}, indent=2))


def report(rounds, raw_us, args):
    machine = f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end"
    lines = [f"half_plus_three, default flags, REST c={args.connections} (wrk), gRPC "
             f"{args.grpc_connections} x {args.grpc_streams} (h2load), {args.duration} s cells; {cpu_model()}, "
             f"{machine}; raw batch-1 session run: {raw_us or 0:.1f} µs", "",
             "| round | cell | req/s | server CPU µs/req | mean batch | errors | req/s vs ceiling | CPU vs bound |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for n, row in enumerate(rounds, 1):
        ceiling = row.get("ceiling")
        for cell, x in row.items():
            vs, bound = "", ""
            if ceiling and cell not in ("ceiling", "grpc-ceiling", "grpc-tonic"):
                vs = f"{x['rps'] / ceiling['rps']:.2f}"
                limit = ceiling["cpu_us"] + (raw_us or 0 if cell == "off" else 0)
                bound = f"{x['cpu_us'] / limit:.2f}"
            lines.append(f"| {n} | {cell} | {x['rps']:,.0f} | {x['cpu_us']:.1f} | {x.get('mean_batch', 0):.1f} | "
                         f"{x['errors']} | {vs} | {bound} |")
    lines += grpc_report(rounds)
    captured = [(row["capture"], row["on"]) for row in rounds if "capture" in row and "on" in row]
    if captured:
        lines += ["", "| round | capture req/s vs batching on (>= 0.85) | capture CPU/request vs batching on (<= 1.15) "
                      "| records written | records dropped |",
                  "|---:|---:|---:|---:|---:|"]
        for n, (capture, on) in enumerate(captured, 1):
            lines.append(f"| {n} | {capture['rps'] / on['rps']:.2f} | {capture['cpu_us'] / on['cpu_us']:.2f} "
                         f"| {capture['captured']:,.0f} | {capture['capture_dropped']:,.0f} |")
    return "\n".join(lines)


def grpc_report(rounds):
    """Each gRPC Predict cell against the gRPC ceiling of its round, and against REST's batching-on cell."""
    import statistics
    cells = [cell for cell in rounds[0] if cell.startswith("grpc") and cell != "grpc-ceiling"]
    if "grpc-ceiling" not in rounds[0] or not cells:
        return []
    lines = ["", "| round | cell | calls/s vs gRPC ceiling (>= 0.90) | CPU/call vs gRPC ceiling (<= 1.15) "
                 "| CPU/call vs REST batching on (<= 1.25) |", "|---:|---|---:|---:|---:|"]
    ratios = {cell: [] for cell in cells}
    for n, row in enumerate(rounds, 1):
        ceiling, rest = row["grpc-ceiling"], row.get("on")
        for cell in cells:
            x = row[cell]
            ratio = (x["rps"] / ceiling["rps"], x["cpu_us"] / ceiling["cpu_us"],
                     x["cpu_us"] / rest["cpu_us"] if rest else float("nan"))
            ratios[cell].append(ratio)
            lines.append(f"| {n} | {cell} | {ratio[0]:.2f} | {ratio[1]:.2f} | {ratio[2]:.2f} |")
    for cell, rows in ratios.items():
        medians = [statistics.median(r[i] for r in rows) for i in range(3)]
        lines.append(f"| median | {cell} | {medians[0]:.2f} | {medians[1]:.2f} | {medians[2]:.2f} |")
    return lines


def cpu_model():
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


if __name__ == "__main__":
    main()
