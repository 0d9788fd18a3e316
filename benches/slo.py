#!/usr/bin/env python3
"""Batching against a latency objective, in one run per model: open-loop
Poisson load (`tfserve-bench open --poisson`) at 10, 30, 60, 90, 110, 150 and 200%
of the model's measured capacity, against servers that differ only in how
they batch:

- off: batching off;
- tfs: TF Serving's batching guide's starting point for CPUs (num_batch_threads
  = cores, a very large max_batch_size, batch_timeout_micros 0);
- a grid of static configurations (max_batch_size x batch_timeout_micros); at
  each rate and for each objective the best of them (the highest goodput:
  answers within the objective per second) is "best static for X ms";
- queue timeout X ms: 32 rows at most, no wait to fill, and a request still
  queued after half the objective answered 503 unrun (--queue_timeout_micros,
  Triton's queue timeout): the yardstick past capacity;
- objective X ms: --batching_target_latency_ms X, nothing else set.

Capacity is what the grid's best configuration answers the open-loop generator
offered its closed-loop throughput (wrk, 64 connections), the median of three
measurements of it on fresh servers (the first picked it): the rate this load,
not wrk's, saturates the server at. Closed-loop clients cost the server less per
request (a steady 64 connections, no bursts), so percentages of wrk's figure
would put "60%" past saturation already. Both figures are reported.
Reported per rate: goodput (answers within each objective per second, from
when each request was due), answered requests per second, p50/p99 of the answered (from
when each request was due), the server's own p99 (tfserve_request_duration_seconds,
arrival to answer), the share refused (503), the refusals' p99, and the share the
generator could not send because all its connections (4000) were waiting: past
that the load is no longer open-loop, and latency is connections / throughput.
Also per rate: the cores the server kept busy and its CPU per request (answered
or refused, from /proc), and the generator's own lag (p99 of how late it sent
requests): where that is more than a fraction of the latencies, the generator's
core, not the server, set them.

    python3 benches/slo.py                         # mnist_cnn and mlp, objectives 5 and 20 ms
    python3 benches/slo.py --models mlp --seconds 20 --objectives 5
    python3 benches/slo.py --models mlp --server-cpus 1   # the generators on the other cores
    python3 benches/slo.py --models mlp --server-cpus 0 --client-cpus 1-3 --port 19000 --out /tmp/a &
    python3 benches/slo.py --models mnist_cnn --server-cpus 4 --client-cpus 5-7 --port 19010 --out /tmp/b
                                                          # side by side on a machine with cores to spare
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402

PORT = 18970
# The objectives goodput is counted for (ms), set from --objectives.
OBJECTIVES = []
RATES = [0.1, 0.3, 0.6, 0.9, 1.1, 1.5, 2.0]
# (max_batch_size, batch_timeout_micros)
GRID = [(8, 0), (32, 0), (32, 2000), (128, 2000)]


def mnist_body(path):
    pixels = ",".join(["[0.5]"] * 28)
    image = "[" + ",".join([f"[{pixels}]"] * 28) + "]"
    path.write_text('{"instances": [' + image + "]}")


# The cores the server runs on (--server-cpus); None: any.
SERVER_CPUS = None


def cpu_list(text):
    """`1`, `0,2` or `4-7` as a set of cores."""
    cores = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return cores


def serve(model, model_dir, work, label, flags):
    env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
    log = open(work / f"server-{model}-{label}.log", "w")
    pin = (lambda: os.sched_setaffinity(0, SERVER_CPUS)) if SERVER_CPUS else None
    proc = subprocess.Popen([str(bench.RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(PORT),
                             "--port", str(PORT + 1), "--model_name", model, "--model_base_path", str(model_dir),
                             *flags], env=env, stdout=log, stderr=log, preexec_fn=pin)
    bench.wait_ready(proc, PORT, model)
    return proc


def settings(grid_cell=None, objective=None, tfs=False, queue_timeout=None):
    if tfs:
        return ["--enable_batching", "--max_batch_size", "1000000", "--batch_timeout_micros", "0",
                "--max_enqueued_batches", "1000000", "--num_batch_threads", str(len(SERVER_CPUS or os.sched_getaffinity(0)))]
    if grid_cell:
        size, timeout = grid_cell
        return ["--enable_batching", "--max_batch_size", str(size), "--batch_timeout_micros", str(timeout),
                "--max_enqueued_batches", "1000"]
    if objective:
        return ["--enable_batching", "--batching_target_latency_ms", str(objective), "--max_enqueued_batches", "1000"]
    if queue_timeout:
        return ["--enable_batching", "--max_batch_size", "32", "--batch_timeout_micros", "0",
                "--queue_timeout_micros", str(int(queue_timeout * 1000 / 2)), "--max_enqueued_batches", "1000"]
    return []


def open_loop(model, body, rate, seconds):
    within = [arg for o in OBJECTIVES for arg in ("--within-ms", str(o))]
    out = bench.run([str(bench.RELEASE / "tfserve-bench"), "open", "--address", f"127.0.0.1:{PORT}", "--path",
                     f"/v1/models/{model}:predict", "--body", str(body), "--rate", f"{rate:.1f}",
                     "--seconds", str(seconds), "--poisson", *within], capture_output=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    ok = result["statuses"].get("200", {"count": 0, "p50_ms": 0.0, "p99_ms": 0.0})
    refused = result["statuses"].get("503", {"count": 0, "p99_ms": 0.0})
    sent = max(result["sent"], 1)
    return {"rate": rate, "answered_per_s": ok["count"] / result["seconds"], "p50_ms": ok["p50_ms"],
            "goodput": {float(ms): per_s for ms, per_s in result.get("goodput", {}).items()},
            "generator_lag_p99_ms": result.get("lag_p99_ms", 0.0),
            "p99_ms": ok["p99_ms"], "refused_share": refused["count"] / sent, "refused_p99_ms": refused["p99_ms"],
            "unsent": result["unsent"], "other": {k: v["count"] for k, v in result["statuses"].items()
                                                  if k not in ("200", "503")}}


def request_buckets(model):
    """The server's cumulative request-duration buckets for `model`: {upper bound: count}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=10).read().decode()
    buckets = {}
    for line in text.splitlines():
        if line.startswith("tfserve_request_duration_seconds_bucket{") and f'model="{model}"' in line:
            bound = float(re.search(r'le="([^"]+)"', line).group(1))
            buckets[bound] = buckets.get(bound, 0) + float(line.rsplit(" ", 1)[1])
    return buckets


def server_p99_ms(before, after):
    """The 99th percentile of the requests answered between two readings, interpolated in
    the bucket it falls in (as Prometheus' histogram_quantile): the server's own view, from a
    request's arrival to its answer, without the load generator's queueing."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return 0.0
    target, lower, below = 0.99 * counts[-1], 0.0, 0.0
    for bound, seen in zip(bounds, counts):
        if seen >= target:
            if bound == float("inf"):
                return lower * 1000
            return (lower + (bound - lower) * (target - below) / max(seen - below, 1)) * 1000
        lower, below = bound, seen
    return lower * 1000


def measure(model, model_dir, body, work, label, flags, rates, seconds):
    proc = serve(model, model_dir, work, label.replace(" ", "-").replace("/", "-"), flags)
    try:
        # Warm the connections and the batch sizes a first burst meets.
        open_loop(model, body, rates[0], 1)
        rows = []
        for rate in rates:
            before, cpu_before = request_buckets(model), bench.cpu_seconds(proc.pid)
            row = dict(open_loop(model, body, rate, seconds), config=label, seconds=seconds)
            cpu = bench.cpu_seconds(proc.pid) - cpu_before
            row["server_p99_ms"] = server_p99_ms(before, request_buckets(model))
            # Cores the server kept busy, and its CPU per request answered or refused.
            row["server_cores"] = cpu / seconds
            row["cpu_us_per_request"] = cpu * 1e6 / max(row["answered_per_s"] * seconds
                                                        + row["refused_share"] * rate * seconds, 1)
            rows.append(row)
    finally:
        bench.stop(proc)
    for row in rows:
        bench.log(f"{model} {label} {row['rate']:.0f}/s: {row['answered_per_s']:.0f}/s p50 {row['p50_ms']:.2f} "
                  f"p99 {row['p99_ms']:.2f} (server {row['server_p99_ms']:.2f}) refused {row['refused_share']:.1%} "
                  f"cores {row['server_cores']:.2f} ({row['cpu_us_per_request']:.0f} us/request) "
                  f"generator lag p99 {row['generator_lag_p99_ms']:.2f}")
    return rows


def capacity(model, model_dir, body, work, script, seconds):
    """(open-loop capacity, closed-loop capacity): what the grid cell that answered the open-loop
    generator most (offered its own wrk throughput) answers, the median of that measurement and
    two more of the same cell on fresh servers, and its wrk throughput likewise. One measurement
    of the best of four cells is the largest of four draws, and on a machine whose speed moves by
    a third from one minute to the next it puts the stepped rates past saturation."""
    def measure(cell, name):
        proc = serve(model, model_dir, work, name, settings(cell))
        try:
            closed = bench.wrk(f"http://127.0.0.1:{PORT}/v1/models/{model}:predict", body, 64, seconds, script)["rps"]
            answered = open_loop(model, body, closed, seconds)["answered_per_s"]
        finally:
            bench.stop(proc)
        bench.log(f"{model} capacity at {cell}: {closed:.0f} req/s closed-loop, {answered:.0f} open-loop")
        return answered, closed

    measured = {cell: measure(cell, f"capacity-{cell[0]}-{cell[1]}") for cell in GRID}
    best = max(GRID, key=lambda cell: measured[cell][0])
    again = [measured[best]] + [measure(best, f"capacity-{best[0]}-{best[1]}-again-{i}") for i in (1, 2)]
    median = sorted(again)[1]
    return median[0], sorted(closed for _, closed in again)[1]


def goodput(row, objective):
    return row.get("goodput", {}).get(float(objective), 0.0)


def table(model, cap, closed, rows, objectives):
    closed_text = f", {closed:,.0f} closed-loop" if closed else ""
    good = " | ".join(f"goodput/s {o} ms" for o in objectives)
    lines = [f"### {model} (capacity {cap:,.0f} req/s open-loop{closed_text})", "",
             f"| config | load | rate/s | {good} | answered/s | p50 ms | p99 ms | server p99 ms | refused "
             "| refusals' p99 ms | server cores | CPU µs/request | generator lag p99 ms | unsent |",
             "|---|---:|---:|" + "---:|" * len(objectives) + "---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        sent = row["rate"] * row.get("seconds", 1)
        config = row["config"] + (f" ({row['chosen'].removeprefix('static ')})" if row.get("chosen") else "")
        goods = " | ".join(f"{goodput(row, o):,.0f}" for o in objectives)
        lines.append(f"| {config} | {row['load']:.0%} | {row['rate']:,.0f} | {goods} | {row['answered_per_s']:,.0f} | "
                     f"{row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['server_p99_ms']:.2f} | "
                     f"{row['refused_share']:.1%} | {row['refused_p99_ms']:.2f} | "
                     f"{row.get('server_cores', 0):.2f} | {row.get('cpu_us_per_request', 0):.0f} | "
                     f"{row.get('generator_lag_p99_ms', 0):.2f} | {row['unsent'] / max(sent, 1):.1%} |")
    lines.append("")
    by = {(r["config"], r["load"]): r for r in rows}
    for objective in objectives:
        label = f"objective {objective} ms"
        for load in RATES:
            ours, best = by.get((label, load)), by.get((f"best static for {objective} ms", load))
            baseline = by.get((f"queue timeout {objective} ms", load))
            if not ours:
                continue
            parts = []
            if best and load <= 0.9:
                ratio = goodput(ours, objective) / max(goodput(best, objective), 1e-9)
                parts.append(f"{ratio:.2f}x the best static's goodput ({'met' if ratio >= 0.95 else 'NOT met'}: "
                             "target >= 0.95)")
            if baseline and load >= 1.1:
                ratio = goodput(ours, objective) / max(goodput(baseline, objective), 1e-9)
                parts.append(f"{ratio:.2f}x the queue timeout's goodput ({'met' if ratio >= 1.1 else 'NOT met'}: "
                             "target >= 1.1)")
            if parts:
                lines.append(f"- {label} at {load:.0%}: " + "; ".join(parts))
    return "\n".join(lines)


def summary(results, objectives):
    """The one table docs/batching.md shows: per model and objective, the goodput (answers within
    the objective per second) of the objective, the best static configuration at that load and the
    queue timeout, at each load, with the objective's refused share."""
    loads = " | ".join(f"{load:.0%}" for load in RATES)
    lines = [f"| model, objective | config | {loads} |", "|---|---|" + "---:|" * len(RATES)]
    for model, result in results.items():
        by = {(r["config"], r["load"]): r for r in result["rows"]}
        for o in objectives:
            for label in (f"objective {o} ms", f"best static for {o} ms", f"queue timeout {o} ms"):
                cells = []
                for load in RATES:
                    row = by.get((label, load))
                    cell = f"{goodput(row, o):,.0f}" if row else "–"
                    if row and label.startswith("objective") and row["refused_share"] > 0:
                        cell += f" ({row['refused_share']:.0%} refused)"
                    cells.append(cell)
                name = label.removesuffix(f" {o} ms").removesuffix(" for")
                lines.append(f"| {model}, {o} ms | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    global SERVER_CPUS, PORT
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mnist_cnn,mlp")
    parser.add_argument("--objectives", default="5,20")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--out", type=pathlib.Path, default=bench.ROOT / "target" / "bench" / "slo")
    parser.add_argument("--only", help="run only the configs whose labels contain one of these (comma-separated)")
    parser.add_argument("--capacity", type=float, help="req/s to take as (open-loop) capacity instead of measuring it")
    parser.add_argument("--server-cpus", help="cores the server runs on (e.g. 1, or 0-3), so that the load "
                        "generators, pinned to the others, do not take its cycles")
    parser.add_argument("--client-cpus", help="cores the load generators run on (default: all the server's not)")
    parser.add_argument("--port", type=int, default=PORT, help="the server's REST port (gRPC: the next one)")
    args = parser.parse_args()
    PORT = args.port
    if args.server_cpus:
        SERVER_CPUS = cpu_list(args.server_cpus)
    if args.server_cpus or args.client_cpus:
        others = cpu_list(args.client_cpus) if args.client_cpus else set(os.sched_getaffinity(0)) - SERVER_CPUS
        if not others or others & (SERVER_CPUS or set()):
            parser.error("the load generators need cores of their own, apart from --server-cpus")
        # wrk and tfserve-bench inherit this process's cores.
        os.sched_setaffinity(0, others)
    bench.ensure_wrk()
    bench.build()
    args.out.mkdir(parents=True, exist_ok=True)
    script = args.out / "post.lua"
    script.write_text(bench.WRK_SCRIPT)
    objectives = [float(x) if "." in x else int(x) for x in args.objectives.split(",")]
    OBJECTIVES[:] = objectives
    names = args.models.split(",")
    dirs = bench.model_dirs([n for n in names if n != "mnist_cnn"])
    dirs["mnist_cnn"] = bench.ROOT / "models" / "mnist_cnn"
    report, results = [], {}
    for model in names:
        body = args.out / f"{model}.json"
        if model == "mnist_cnn":
            mnist_body(body)
        else:
            bench.body_for(model, body)
        cap, closed = (args.capacity, None) if args.capacity else capacity(model, dirs[model], body, args.out,
                                                                          script, 5)
        rates = [cap * load for load in RATES]
        rows = []
        configs = [("off", settings()), ("tfs", settings(tfs=True))]
        configs += [(f"static {size}/{timeout}us", settings((size, timeout))) for size, timeout in GRID]
        configs += [(f"queue timeout {o} ms", settings(queue_timeout=o)) for o in objectives]
        configs += [(f"objective {o} ms", settings(objective=o)) for o in objectives]
        for label, flags in configs:
            if args.only and not any(part in label for part in args.only.split(",")):
                continue
            for load, row in zip(RATES, measure(model, dirs[model], body, args.out, label, flags, rates,
                                                args.seconds)):
                rows.append(dict(row, load=load))
        for load in RATES:
            statics = [r for r in rows if r["config"].startswith("static") and r["load"] == load]
            if not statics:
                continue
            for o in objectives:
                best = max(statics, key=lambda r: (goodput(r, o), -r["p99_ms"]))
                rows.append(dict(best, config=f"best static for {o} ms", chosen=best["config"]))
        results[model] = {"capacity": cap, "closed_loop_capacity": closed, "rows": rows}
        (args.out / "slo.json").write_text(json.dumps(results, indent=2))
        report.append(table(model, cap, closed, rows, objectives) if not args.only else json.dumps(rows, indent=1))
        (args.out / "slo.json").write_text(json.dumps(results, indent=2))
    if not args.only:
        report.insert(0, summary(results, objectives))
    text = "\n\n".join(report)
    (args.out / "slo.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
