#!/usr/bin/env python3
"""tfserve's benchmark: in one run on one machine, measures

  1. raw model throughput through the same C API path, no HTTP
     (`tfserve-bench raw`, samples/s at batch 1, 8, 32, 64);
  2. the HTTP ceiling: the same actix-web stack answering a fixed response
     (`tfserve-bench ceiling`);
  3. tfserve with batching off and on, at concurrency 1, 16 and 64 (and 32 for
     ResNet-50), for half_plus_three, an MLP and a ResNet-50 (one instance per
     request), with throughput, p50, p99, the mean batch size formed, and the
     ratios to (1) and (2);

then prints a Markdown table and checks the targets. Load comes from `wrk`
(installed from Debian's packages when missing). Models: models/half_plus_three
and, generated into the cache on first use, benches/make_models.py's MLP and
ResNet-50.

    python3 benches/bench.py                  # everything (~15 minutes)
    python3 benches/bench.py --models mlp --duration 5
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

ROOT = pathlib.Path(__file__).resolve().parent.parent
# TFSERVE_BENCH_RELEASE: a folder of prebuilt tfserve and tfserve-bench (a
# machine with no toolchain), which build() then leaves alone.
PREBUILT = os.environ.get("TFSERVE_BENCH_RELEASE")
RELEASE = pathlib.Path(PREBUILT) if PREBUILT else ROOT / "target" / "release"
WRK_SCRIPT = """
local f = io.open(os.getenv("TFSERVE_BENCH_BODY"), "rb")
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
"""

# Batching parameters per model (TF Serving's text format). The MLP and
# ResNet-50 list their batch sizes: throughput is not monotonic in batch size,
# and listed sizes are exactly the ones warmed up.
BATCHING = {
    "half_plus_three": "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 0 }\n"
                       "max_enqueued_batches { value: 100 }\nnum_batch_threads { value: 1 }\n",
    "mlp": "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 1000 }\n"
           "max_enqueued_batches { value: 100 }\nallowed_batch_sizes: [1, 2, 4, 8, 16, 32, 64]\n",
    "resnet50": "max_batch_size { value: 32 }\nbatch_timeout_micros { value: 0 }\n"
                "max_enqueued_batches { value: 100 }\nallowed_batch_sizes: [1, 2, 4, 8, 16, 32]\n",
}
# Flags for both modes. A graph this small runs fastest single-threaded: Eigen's
# pool costs more than the elementwise op it would parallelise.
FLAGS = {"half_plus_three": ["--tensorflow_intra_op_parallelism=1"]}
CONCURRENCY = {"half_plus_three": [1, 16, 64], "mlp": [1, 16, 64], "resnet50": [1, 16, 32, 64]}


def log(message):
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def run(cmd, **kwargs):
    return subprocess.run(cmd, check=True, text=True, **kwargs)


def ensure_wrk():
    if shutil.which("wrk"):
        return
    log("installing wrk from Debian's packages")
    # A host that cannot reach them would otherwise wait on apt for as long as the run is given.
    try:
        run(["apt-get", "update", "-qq"], timeout=180)
        run(["apt-get", "install", "-y", "-qq", "wrk"], timeout=300)
    except subprocess.TimeoutExpired as error:
        sys.exit(f"wrk is not installed and apt-get could not install it ({error}): put wrk on PATH")


def cpu_seconds(pid):
    """User + system CPU seconds a process (all its threads) has used so far, from /proc."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build():
    if PREBUILT:
        log(f"using the prebuilt binaries in {RELEASE}")
        return
    run([sys.executable, str(ROOT / "scripts" / "setup_libtensorflow.py")])
    run(["cargo", "build", "--release", "--bin", "tfserve", "--bin", "tfserve-bench"], cwd=ROOT)


def model_dirs(names):
    dirs = {"half_plus_three": ROOT / "models" / "half_plus_three"}
    if set(names) - {"half_plus_three"}:
        # TFSERVE_BENCH_MODELS: make_models.py's output, made elsewhere.
        made = os.environ.get("TFSERVE_BENCH_MODELS")
        if made:
            bench_models = pathlib.Path(made)
        else:
            out = run([sys.executable, str(ROOT / "benches" / "make_models.py")], capture_output=True).stdout
            bench_models = pathlib.Path(out.strip().splitlines()[-1])
        dirs["mlp"] = bench_models / "mlp"
        dirs["resnet50"] = bench_models / "resnet50"
        dirs["image_head"] = bench_models / "image_head"
        dirs["bert_base"] = bench_models / "bert_base"
    return {name: dirs[name] for name in names}


def body_for(name, path):
    """One instance per request."""
    if name == "half_plus_three":
        text = '{"instances": [1.0]}'
    elif name == "mlp":
        text = '{"instances": [[' + ",".join(["0.5"] * 784) + "]]}"
    elif name == "bert_base":
        text = '{"instances": [[' + ",".join(["101"] + ["7"] * 126 + ["102"]) + "]]}"
    else:
        pixel = "[0.5,0.25,0.75]"
        row = "[" + ",".join([pixel] * 224) + "]"
        text = '{"instances": [[' + ",".join([row] * 224) + "]]}"
    path.write_text(text)
    return len(text)


def parse_duration_ms(text):
    value, unit = re.match(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def wrk(url, body_file, connections, duration, script):
    env = dict(os.environ, TFSERVE_BENCH_BODY=str(body_file))
    out = run(["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{duration}s", "--timeout", "120s",
               "--latency", "-s", str(script), url], capture_output=True, env=env).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    latency = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, socket.groups())) if socket else 0)
    return {"rps": rps, "p50_ms": parse_duration_ms(latency["50"]), "p99_ms": parse_duration_ms(latency["99"]),
            "errors": errors}


def batch_totals(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for kind in total:
            if line.startswith(f"tfserve_batch_size_{kind}{{"):
                total[kind] += float(line.rsplit(" ", 1)[1])
    return total


def wait_ready(proc, port, name, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server for {name} exited with {proc.returncode}")
        try:
            status = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/{name}", timeout=2))
            if any(v["state"] == "AVAILABLE" for v in status["model_version_status"]):
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server for {name} not ready after {timeout} s")


def mode_decided(proc, port, name, timeout=3600):
    """The dashboard's `mode` of `name`'s newest version once its
    `mixed_precision: auto` trial (run in the background) has decided."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server for {name} exited with {proc.returncode}")
        try:
            state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard/state", timeout=5))
            model = next(m for m in state["models"] if m["name"] == name)
            mode = model["versions"][0]["mode"]
            if mode and mode["state"] == "decided":
                return mode
        except (OSError, StopIteration, KeyError, IndexError):
            pass
        time.sleep(1)
    raise RuntimeError(f"the mode trial of {name} did not decide within {timeout} s")


def captured_records(prefix):
    """How many TFRecords the capture files `PREFIX-*.tfrecord` hold."""
    prefix = pathlib.Path(prefix)
    count = 0
    for path in prefix.parent.glob(prefix.name + "-*.tfrecord"):
        data = path.read_bytes()
        offset = 0
        while offset + 12 <= len(data):
            length = int.from_bytes(data[offset:offset + 8], "little")
            offset += 12 + length + 4
            count += offset <= len(data)
    return count


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def raw_throughput(model_dir, seconds):
    out = run([str(RELEASE / "tfserve-bench"), "raw", "--model-dir", str(model_dir), "--batches", "1,8,32,64",
               "--seconds", str(seconds)], capture_output=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def http_ceiling(work, script, duration, concurrencies):
    port = 18600
    proc = subprocess.Popen([str(RELEASE / "tfserve-bench"), "ceiling", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        body = work / "ceiling.json"
        body.write_text('{"instances": [1.0]}')
        return {c: wrk(f"http://127.0.0.1:{port}/", body, c, duration, script) for c in concurrencies}
    finally:
        stop(proc)


def serve_and_load(name, model_dir, batching, work, script, duration):
    port = 18700 + (1 if batching else 0)
    args = [str(RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(port),
            "--model_name", name, "--model_base_path", str(model_dir), *FLAGS.get(name, [])]
    if batching:
        params = work / f"{name}.batching"
        params.write_text(BATCHING[name])
        args += ["--enable_batching", "--batching_parameters_file", str(params)]
    env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    results = {}
    try:
        wait_ready(proc, port, name)
        body = work / f"{name}.json"
        body_for(name, body)
        url = f"http://127.0.0.1:{port}/v1/models/{name}:predict"
        for c in CONCURRENCY[name]:
            before = batch_totals(port)
            result = wrk(url, body, c, duration, script)
            after = batch_totals(port)
            count = after["count"] - before["count"]
            result["mean_batch"] = (after["sum"] - before["sum"]) / count if count else 0.0
            results[c] = result
            log(f"{name} batching={'on' if batching else 'off'} c={c}: {result}")
    finally:
        stop(proc)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="half_plus_three,mlp,resnet50")
    parser.add_argument("--duration", type=int, default=10, help="seconds of load per cell")
    parser.add_argument("--raw-seconds", type=float, default=3.0)
    parser.add_argument("--json", type=pathlib.Path, default=ROOT / "target" / "bench" / "results.json")
    args = parser.parse_args()
    names = args.models.split(",")

    ensure_wrk()
    build()
    dirs = model_dirs(names)
    work = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-bench-"))
    script = work / "post.lua"
    script.write_text(WRK_SCRIPT)
    machine = f"{os.cpu_count()} cores, {os.uname().machine}, load average {os.getloadavg()[0]:.2f} at start"

    log("HTTP ceiling")
    ceiling = http_ceiling(work, script, args.duration, [1, 16, 32, 64])
    results = {"machine": machine, "ceiling": ceiling, "models": {}}
    for name in names:
        log(f"raw throughput of {name}")
        raw = raw_throughput(dirs[name], args.raw_seconds)
        off = serve_and_load(name, dirs[name], False, work, script, args.duration)
        on = serve_and_load(name, dirs[name], True, work, script, args.duration)
        results["models"][name] = {"raw": raw, "off": off, "on": on}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(report(results))


def report(results):
    lines = [f"Machine: {results['machine']}.", ""]
    lines.append("| model | raw samples/s at batch 1 / 8 / 32 / 64 |")
    lines.append("|---|---|")
    for name, r in results["models"].items():
        lines.append(f"| {name} | " + " / ".join(f"{x['samples_per_s']:,.0f}" for x in r["raw"]) + " |")
    lines += ["", "| HTTP ceiling c | req/s | p50 ms | p99 ms |", "|---:|---:|---:|---:|"]
    for c, x in results["ceiling"].items():
        lines.append(f"| {c} | {x['rps']:,.0f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} |")
    lines += ["", "| model | batching | c | req/s | p50 ms | p99 ms | mean batch | errors | vs raw best | vs HTTP ceiling |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results["models"].items():
        best_raw = max(x["samples_per_s"] for x in r["raw"])
        for mode in ("off", "on"):
            for c, x in r[mode].items():
                ceiling = results["ceiling"].get(c) or results["ceiling"][max(results["ceiling"])]
                lines.append(f"| {name} | {mode} | {c} | {x['rps']:,.1f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | "
                             f"{x['mean_batch']:.1f} | {x['errors']} | {x['rps'] / best_raw:.0%} | "
                             f"{x['rps'] / ceiling['rps']:.0%} |")
    lines += ["", "Targets:"] + targets(results)
    return "\n".join(lines)


def targets(results):
    out = []
    models = results["models"]
    if "half_plus_three" in models:
        x = models["half_plus_three"]["on"][64]
        ratio = x["rps"] / results["ceiling"][64]["rps"]
        out.append(f"- half_plus_three c=64 batching on: {ratio:.0%} of the HTTP ceiling (target >= 80%): "
                   f"{'met' if ratio >= 0.8 else 'NOT met'}")
    if "resnet50" in models:
        r = models["resnet50"]
        best = max(x["samples_per_s"] for x in r["raw"])
        ratio = r["on"][32]["rps"] / best
        gain = r["on"][32]["rps"] / r["off"][32]["rps"]
        out.append(f"- resnet50 c=32 batching on: {ratio:.0%} of the best raw throughput (target >= 85%): "
                   f"{'met' if ratio >= 0.85 else 'NOT met'}")
        out.append(f"- resnet50 c=32 batching on vs off: {gain:.2f}x (target >= 1.5x): "
                   f"{'met' if gain >= 1.5 else 'NOT met'}")
    if "mlp" in models:
        r = models["mlp"]
        timeout_ms = 1.0
        raw64 = next(x for x in r["raw"] if x["batch"] == 64)["p50_ms"]
        bound = 2 * timeout_ms + 2 * raw64
        p99 = r["on"][64]["p99_ms"]
        out.append(f"- mlp c=64 batching on: p99 {p99:.2f} ms, bound 2 x timeout + 2 x raw batch-64 run = "
                   f"{bound:.2f} ms: {'met' if p99 <= bound else 'NOT met'}")
    return out


if __name__ == "__main__":
    main()
