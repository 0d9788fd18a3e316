#!/usr/bin/env python3
"""Closed-loop callers against a latency objective, in one run: many callers
that each send their next request the moment the last is answered (wrk over
REST, `tfserve-bench grpc` over gRPC), against a server with no objective and
with each objective given, for this build and, alternated with it, a
baseline's. Counts what was answered and what refused (503 / UNAVAILABLE).

Such callers keep as many requests waiting however many are refused: the
wait before the server reads a request is their number times its time per
request, which no refusal shortens. The table shows whether an objective
tighter than that wait still answers them.

    python3 benches/closed_loop.py --baseline /path/to/old/release
    python3 benches/closed_loop.py --connections 1024 --objectives none,20,5 --seconds 5

The server runs on --server-cpus (default core 1), the load on --load-cpus
(default core 0).
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402
import slo  # noqa: E402

PORT = 18900


def serve(binary, model, model_dir, objective, cpus, log):
    flags = ["--enable_batching", "--batching_target_latency_ms", objective] if objective != "none" else []
    env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([str(binary), "--host", "127.0.0.1", "--rest_api_port", str(PORT), "--port",
                             str(PORT + 1), "--model_name", model, "--model_base_path", str(model_dir),
                             "--tensorflow_intra_op_parallelism=1", *flags], env=env, stdout=log, stderr=log,
                            preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    bench.wait_ready(proc, PORT, model)
    return proc


def rest(model, body, connections, seconds, script, cpus):
    env = dict(os.environ, TFSERVE_BENCH_BODY=str(body))
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s", "-s", str(script),
                          f"http://127.0.0.1:{PORT}/v1/models/{model}:predict"], capture_output=True, text=True,
                         env=env, check=True, preexec_fn=lambda: os.sched_setaffinity(0, cpus)).stdout
    total, wall = re.search(r"(\d+) requests in ([\d.]+(?:ms|s|m))", out).groups()
    wall = bench.parse_duration_ms(wall) / 1000
    refused = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    refused = int(refused.group(1)) if refused else 0
    mean = bench.parse_duration_ms(re.search(r"Latency\s+(\S+)", out).group(1))
    return {"per_s": int(total) / wall, "answered_per_s": (int(total) - refused) / wall,
            "refused": refused / max(int(total), 1), "mean_ms": mean}


def grpc(binary_dir, model, model_dir, connections, seconds, cpus):
    out = subprocess.run([str(binary_dir / "tfserve-bench"), "grpc", "--model-dir", str(model_dir), "--model", model,
                          "--target", f"http://127.0.0.1:{PORT + 1}", "--concurrency", str(connections),
                          "--connections", "64", "--seconds", str(seconds)], capture_output=True, text=True,
                         check=True, preexec_fn=lambda: os.sched_setaffinity(0, cpus)).stdout
    result = json.loads(out.strip().splitlines()[-1])
    answered = result["rps"]
    per_s = answered * (result["requests"] + result["errors"]) / max(result["requests"], 1)
    return {"per_s": per_s, "answered_per_s": answered, "refused": 1 - answered / per_s if per_s else 0.0,
            "mean_ms": result["p50_ms"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="half_plus_three")
    parser.add_argument("--connections", type=int, default=1024)
    parser.add_argument("--objectives", default="none,20,5")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=pathlib.Path, help="a folder with an older tfserve and tfserve-bench")
    parser.add_argument("--no-grpc", action="store_true")
    parser.add_argument("--server-cpus", default="1")
    parser.add_argument("--load-cpus", default="0")
    args = parser.parse_args()
    bench.ensure_wrk()
    bench.build()
    model_dir = bench.model_dirs([args.model])[args.model]
    server_cpus, load_cpus = slo.cpu_list(args.server_cpus), slo.cpu_list(args.load_cpus)
    builds = [("new", bench.RELEASE)] + ([("baseline", args.baseline)] if args.baseline else [])
    rows = []
    with tempfile.TemporaryDirectory() as work:
        work = pathlib.Path(work)
        script, body = work / "post.lua", work / "body.json"
        script.write_text(bench.WRK_SCRIPT)
        if args.model == "half_plus_three":
            body.write_text('{"instances": [1.0, 2.0]}')
        else:
            bench.body_for(args.model, body)
        log = open(work / "server.log", "w")
        for round_ in range(args.rounds):
            order = builds if round_ % 2 == 0 else builds[::-1]
            for objective in args.objectives.split(","):
                for label, binaries in order:
                    proc = serve(binaries / "tfserve", args.model, model_dir, objective, server_cpus, log)
                    try:
                        transports = [("REST", lambda: rest(args.model, body, args.connections, args.seconds,
                                                            script, load_cpus))]
                        if not args.no_grpc:
                            transports.append(("gRPC", lambda: grpc(binaries, args.model, model_dir,
                                                                    args.connections, args.seconds, load_cpus)))
                        for transport, load in transports:
                            result = load()
                            bench.log(f"{label} objective={objective} {transport}: {result}")
                            rows.append((round_ + 1, label, objective, transport, result))
                    finally:
                        bench.stop(proc)
    print(f"\n{args.model}, {args.connections} callers in closed loop, {args.seconds} s each\n")
    print("| round | build | objective | transport | handled/s | refused | answered/s | latency ms (REST mean, gRPC p50) |")
    print("|---:|---|---|---|---:|---:|---:|---:|")
    for round_, label, objective, transport, r in rows:
        objective = objective if objective == "none" else f"{objective} ms"
        print(f"| {round_} | {label} | {objective} | {transport} | {r['per_s']:,.0f} | {r['refused']:.1%} | "
              f"{r['answered_per_s']:,.0f} | {r['mean_ms']:.1f} |")


if __name__ == "__main__":
    main()
