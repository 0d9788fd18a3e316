#!/usr/bin/env python3
"""Small requests against the HTTP ceiling, in one run on one machine.

A new user's first test: half_plus_three with default flags, one instance per
request, 64 connections from wrk. Each round, interleaved, measures

  - the HTTP ceiling (`tfserve-bench ceiling`: the same actix-web stack
    answering a fixed body),
  - tfserve with `--enable_batching=true` and with batching off (REST),
  - tfserve's gRPC Predict on the same model (`tfserve-bench grpc`),
  - on request, `capture`: batching on with every request captured to the
    JSON Lines sink (`--capture_jsonl_dir`), the writer's CPU included,

each as req/s and server CPU per request (user + system time of the server
process, from /proc, over the requests answered). Also reports one raw batch-1
session run (`tfserve-bench raw`) and checks the targets:

  batching on:  req/s >= 0.80 x ceiling, CPU/request <= 1.25 x ceiling's
  batching off: CPU/request <= 1.25 x (ceiling's + one raw batch-1 run)
  gRPC:         CPU/request <= REST's (batching on)
  capture:      req/s >= 0.85 x batching on's, CPU/request <= 1.15 x its

    python3 benches/ceiling.py                    # 3 rounds of 10 s cells
    python3 benches/ceiling.py --rounds 1 --duration 5 --binary /tmp/tfserve-old
    python3 benches/ceiling.py --cells on,capture
    python3 benches/ceiling.py --baseline /tmp/tfserve-old --cells ceiling,on,on-base,grpc,grpc-base,capture,capture-base
        # a cell named CELL-base runs --baseline's binary, with CELL's flags: before and after, interleaved, in one run
"""
import argparse
import json
import os
import pathlib
import re
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


def grpc_load(binary_dir, port, connections, duration):
    out = subprocess.run([str(binary_dir / "tfserve-bench"), "grpc", "--model-dir", str(MODEL),
                          "--model", "half_plus_three", "--target", f"http://127.0.0.1:{port}",
                          "--concurrency", str(connections), "--connections", "16",
                          "--seconds", str(duration)],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    return result["requests"], result.get("errors", 0)


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
            grpc_load(binary_dir, grpc_port, args.connections, 1)
            load = lambda: grpc_load(binary_dir, grpc_port, args.connections, args.duration)  # noqa: E731
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
    parser.add_argument("--cells", default="ceiling,on,off,grpc")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    cells = args.cells.split(",")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-ceiling-"))
    (work / "body.json").write_text(BODY)
    script = work / "post.lua"
    script.write_text(bench.WRK_SCRIPT)
    raw_us = raw_run_us(RELEASE, 2.0) if "off" in cells else None
    rounds = []
    for n in range(args.rounds):
        row = {}
        for cell in cells:
            if cell == "ceiling":
                row[cell] = ceiling_cell(RELEASE, work, script, args)
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
    lines = [f"half_plus_three, default flags, c={args.connections}, {args.duration} s cells; {machine}; "
             f"raw batch-1 session run: {raw_us or 0:.1f} µs", "",
             "| round | cell | req/s | server CPU µs/req | mean batch | errors | req/s vs ceiling | CPU vs bound |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for n, row in enumerate(rounds, 1):
        ceiling = row.get("ceiling")
        for cell, x in row.items():
            vs, bound = "", ""
            if ceiling and cell != "ceiling":
                vs = f"{x['rps'] / ceiling['rps']:.2f}"
                limit = ceiling["cpu_us"] + (raw_us or 0 if cell == "off" else 0)
                bound = f"{x['cpu_us'] / limit:.2f}"
            lines.append(f"| {n} | {cell} | {x['rps']:,.0f} | {x['cpu_us']:.1f} | {x.get('mean_batch', 0):.1f} | "
                         f"{x['errors']} | {vs} | {bound} |")
    captured = [(row["capture"], row["on"]) for row in rounds if "capture" in row and "on" in row]
    if captured:
        lines += ["", "| round | capture req/s vs batching on (>= 0.85) | capture CPU/request vs batching on (<= 1.15) "
                      "| records written | records dropped |",
                  "|---:|---:|---:|---:|---:|"]
        for n, (capture, on) in enumerate(captured, 1):
            lines.append(f"| {n} | {capture['rps'] / on['rps']:.2f} | {capture['cpu_us'] / on['cpu_us']:.2f} "
                         f"| {capture['captured']:,.0f} | {capture['capture_dropped']:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
