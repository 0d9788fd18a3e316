#!/usr/bin/env python3
"""Overload, measured in one run against one release server:

1. the sustainable rate S: requests/s at saturation (wrk, closed loop);
2. unloaded latency: an open-loop run at S/2 (`tfserve-bench open`: each
   latency counts from when its request was due);
3. overload: an open-loop run at 10 x S. The excess must get 503 with
   Retry-After at once, and the admitted requests' p99 must stay within 2x
   the unloaded p99 (the bound that makes it so is --max_in_flight_requests;
   this script sets it from Little's law, S x the unloaded p99);
4. memory: 1,000 clients each send a 20 MB body at once; the server's peak
   RSS is compared with --max_in_flight_bytes.

    python3 benches/overload.py                  # resnet50, 10 s per step
    python3 benches/overload.py --model mlp --seconds 5

Pick a model whose 10x rate the generator can send from the same machine:
at mlp's ~17k req/s sustainable, 10x is past what one generator thread sends.
"""
import argparse
import asyncio
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class PeakRss:
    """Samples a process's RSS every 20 ms while in a `with` block."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()

    def __enter__(self):
        def sample():
            while not self.stop.wait(0.02):
                self.peak = max(self.peak, rss_mb(self.pid))
        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def open_loop(port, path, body, rate, seconds):
    out = bench.run([str(bench.RELEASE / "tfserve-bench"), "open", "--address", f"127.0.0.1:{port}",
                     "--path", path, "--body", str(body), "--rate", str(rate), "--seconds", str(seconds)],
                    capture_output=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def start(model, model_dir, port, extra):
    env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([str(bench.RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(port),
                             "--model_name", model, "--model_base_path", str(model_dir), *extra], env=env)
    bench.wait_ready(proc, port, model)
    return proc


async def big_bodies(port, clients, megabytes, path):
    """`clients` connections each POST a `megabytes` MB JSON body at once; outcome counts."""
    chunk = b" " * (1 << 20)
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {megabytes << 20}\r\nConnection: close\r\n\r\n").encode()
    outcomes = {}

    async def one():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            outcomes["connect failed"] = outcomes.get("connect failed", 0) + 1
            return
        status = None
        try:
            writer.write(head)
            # The body starts with '[' and is whitespace after: a 400 once read whole.
            writer.write(b"[")
            for i in range(megabytes):
                writer.write(chunk if i else chunk[1:])
                await writer.drain()
            line = await asyncio.wait_for(reader.readline(), 120)
            status = line.split()[1].decode() if line else "closed"
        except (OSError, asyncio.TimeoutError):
            # Refused before its body was read: the server answered and closed
            # while this client was still writing.
            try:
                line = await asyncio.wait_for(reader.readline(), 5)
                status = line.split()[1].decode() if line else "reset"
            except (OSError, asyncio.TimeoutError, IndexError):
                status = "reset"
        finally:
            writer.close()
        outcomes[status] = outcomes.get(status, 0) + 1

    started = time.time()
    await asyncio.gather(*(one() for _ in range(clients)))
    return outcomes, time.time() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50", choices=["half_plus_three", "mlp", "resnet50"])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--bodies", type=int, default=1000)
    parser.add_argument("--body-mb", type=int, default=20)
    parser.add_argument("--max-in-flight-bytes-mb", type=int, default=1024)
    args = parser.parse_args()
    bench.ensure_wrk()
    bench.build()
    model_dir = bench.model_dirs([args.model])[args.model]
    path = f"/v1/models/{args.model}:predict"
    port = 18790
    report = {"model": args.model}
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        body = work / "body.json"
        bench.body_for(args.model, body)
        script = work / "post.lua"
        script.write_text(bench.WRK_SCRIPT)
        proc = start(args.model, model_dir, port, ["--enable_batching"])
        try:
            closed = bench.wrk(f"http://127.0.0.1:{port}{path}", body, 16, int(args.seconds), script)
            sustainable = closed["rps"]
            unloaded = open_loop(port, path, body, sustainable / 2, args.seconds)
        finally:
            bench.stop(proc)
        unloaded_p99 = unloaded["statuses"]["200"]["p99_ms"]
        limit = max(2, math.ceil(sustainable * unloaded_p99 / 1000))
        report.update(sustainable_rps=sustainable, unloaded=unloaded, max_in_flight_requests=limit)
        proc = start(args.model, model_dir, port, ["--enable_batching", "--max_in_flight_requests", str(limit)])
        try:
            with PeakRss(proc.pid) as peak:
                overload = open_loop(port, path, body, sustainable * 10, args.seconds)
            report.update(overload=overload, overload_peak_rss_mb=round(peak.peak, 1))
        finally:
            bench.stop(proc)
        # Bodies are bounded by bytes, not by the request count: the default count bound here.
        proc = start(args.model, model_dir, port,
                     ["--enable_batching", "--max_in_flight_bytes", str(args.max_in_flight_bytes_mb << 20)])
        try:
            baseline = rss_mb(proc.pid)
            with PeakRss(proc.pid) as peak:
                outcomes, took = asyncio.run(big_bodies(port, args.bodies, args.body_mb, path))
            alive = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--data-binary",
                                    f"@{body}", f"http://127.0.0.1:{port}{path}"],
                                   capture_output=True, text=True).stdout
            report.update(big_bodies={"clients": args.bodies, "body_mb": args.body_mb, "outcomes": outcomes,
                                      "seconds": round(took, 1), "rss_mb_before": round(baseline, 1),
                                      "peak_rss_mb": round(peak.peak, 1),
                                      "max_in_flight_bytes_mb": args.max_in_flight_bytes_mb,
                                      "next_request_status": alive})
        finally:
            bench.stop(proc)
    admitted = report["overload"]["statuses"].get("200", {})
    refused = report["overload"]["statuses"].get("503", {})
    report["verdict"] = {
        "admitted_p99_ratio": round(admitted.get("p99_ms", math.inf) / unloaded_p99, 2),
        "refused_p99_ms": refused.get("p99_ms"),
        "refused_with_retry_after": report["overload"]["retry_after"],
        "rss_within_budget": report["big_bodies"]["peak_rss_mb"]
        < report["big_bodies"]["rss_mb_before"] + args.max_in_flight_bytes_mb,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
