#!/usr/bin/env python3
"""benches/slo.py on a machine with many cores, as one command: every config
of slo.py (batching off, TF Serving's starting point, the static grid, the
objectives) runs in its own slo.py instance, each on a core pair of its own
(the server on one core, its load generators on the next), as many at once as
there are pairs. Capacity is measured first, the same way, one model per pair.
With --baseline, the objective rows are also run with an earlier version's
binaries, beside the current ones, so a controller's change is measured
against the one before it in the same run. The rows are merged into one
slo.json and one table per model (slo.md), "best static" chosen across them.

    python3 benches/slo_wide.py --out /tmp/wide                  # all core pairs
    python3 benches/slo_wide.py --baseline /tmp/old-bin --seconds 20 --out /tmp/wide

A machine that can reach no package registry (a lent device host, say) runs it
from a payload made here: `pack` puts tfserve, tfserve-bench, wrk, the
libraries they load and the MLP into one archive split into parts small enough
to travel one at a time; `--payload DIR` (after `unpack`) runs from it.

    python3 benches/slo_wide.py pack --bin-dir BIN --baseline-bin OLD_BIN --to .gpu
    python3 benches/slo_wide.py unpack --parts .gpu --to /tmp/payload
    python3 benches/slo_wide.py --payload /tmp/payload --baseline /tmp/payload/baseline --out /tmp/wide
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402
import slo  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
# A device call carries 64 MiB with the working tree (~11 MiB): a part and the tree must fit.
PART_BYTES = 40 * 1024 * 1024


def groups(objectives):
    """The slo.py --only filters, one instance each: two configs per instance at most,
    so that no pair runs much longer than the others."""
    statics = [f"static {size}/{timeout}us" for size, timeout in slo.GRID]
    out = ["off,tfs"] + [",".join(statics[i:i + 2]) for i in range(0, len(statics), 2)]
    return out + [f"objective {o} ms" for o in objectives]


def core_pairs(limit):
    cores = sorted(os.sched_getaffinity(0))
    pairs = [(cores[i], cores[i + 1]) for i in range(0, len(cores) - 1, 2)]
    return pairs[:limit] if limit else pairs


def run_instance(job, pair, port, args, env):
    """One slo.py instance; its rows, or None if it failed or outran its time."""
    name, model, only, capacity, release = job
    out = args.out / name
    cmd = [sys.executable, str(HERE / "slo.py"), "--models", model, "--only", only, "--seconds", str(args.seconds),
           "--server-cpus", str(pair[0]), "--client-cpus", str(pair[1]), "--port", str(port), "--out", str(out)]
    if capacity:
        cmd += ["--capacity", f"{capacity:.0f}"]
    configs = max(len(only.split(",")), 1)
    limit = configs * (len(slo.RATES) * args.seconds + 60) + (0 if capacity else 180)
    with open(args.out / f"{name}.log", "w") as log:
        try:
            subprocess.run(cmd, env=dict(env, TFSERVE_BENCH_RELEASE=str(release)), stdout=log,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=limit, check=True)
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as error:
            bench.log(f"{name} on cores {pair}: {error} (see {log.name})")
            return None
    return json.loads((out / "slo.json").read_text())[model]


def run_jobs(jobs, pairs, args, env):
    """Each job on the first free core pair; {job name: its slo.json entry}."""
    free = queue.Queue()
    for slot, pair in enumerate(pairs):
        free.put((slot, pair))

    def one(job):
        slot, pair = free.get()
        try:
            bench.log(f"{job[0]} on cores {pair[0]} (server) and {pair[1]} (generators)")
            return job[0], run_instance(job, pair, args.port + 10 * slot, args, env)
        finally:
            free.put((slot, pair))

    with concurrent.futures.ThreadPoolExecutor(len(pairs)) as pool:
        return dict(pool.map(one, jobs))


def merge(model, capacity, closed, parts, objectives):
    rows = []
    for (label_suffix, result) in parts:
        for row in result["rows"]:
            if row["config"] == "best static":
                continue
            rows.append(dict(row, config=row["config"] + label_suffix))
    for load in slo.RATES:
        statics = [r for r in rows if r["config"].startswith("static") and r["load"] == load]
        if statics:
            best = max(statics, key=lambda r: (round(r["answered_per_s"], -1), -r["p99_ms"]))
            rows.append(dict(best, config="best static", chosen=best["config"]))
    complete = {r["config"] for r in rows}
    wanted = {"off", "best static"} | {f"objective {o} ms" for o in objectives}
    text = slo.table(model, capacity, closed, rows, objectives) if wanted <= complete else \
        slo.table(model, capacity, closed, rows, [])
    return {"capacity": capacity, "closed_loop_capacity": closed, "rows": rows}, text


def payload_env(payload):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if payload:
        env["PATH"] = f"{payload / 'bin'}:{env.get('PATH', '')}"
        env["LD_LIBRARY_PATH"] = f"{payload / 'lib'}:{env.get('LD_LIBRARY_PATH', '')}"
        env["TFSERVE_BENCH_MODELS"] = str(payload / "models")
    return env


def measure(args):
    args.out.mkdir(parents=True, exist_ok=True)
    env = payload_env(args.payload)
    release = args.payload / "bin" if args.payload else pathlib.Path(os.environ.get(
        "TFSERVE_BENCH_RELEASE", bench.ROOT / "target" / "release"))
    if not args.payload and not os.environ.get("TFSERVE_BENCH_RELEASE"):
        bench.build()
    pairs = core_pairs(args.slots)
    if not pairs:
        sys.exit("slo_wide.py needs at least two cores (a server's and its generators')")
    models = args.models.split(",")
    objectives = [float(x) if "." in x else int(x) for x in args.objectives.split(",")]
    capacity = {m: float(rate) for m, rate in (kv.split("=") for kv in args.capacity.split(",") if kv)}
    closed = {}
    unknown = [m for m in models if m not in capacity]
    if unknown:
        found = run_jobs([(f"capacity-{m}", m, "none", None, release) for m in unknown], pairs, args, env)
        for m in unknown:
            if not found.get(f"capacity-{m}"):
                sys.exit(f"capacity of {m} could not be measured (see {args.out}/capacity-{m}.log)")
            capacity[m], closed[m] = found[f"capacity-{m}"]["capacity"], found[f"capacity-{m}"]["closed_loop_capacity"]
            bench.log(f"{m}: capacity {capacity[m]:.0f} req/s open-loop")
    jobs = []
    for m in models:
        for only in groups(objectives):
            if args.only and not any(part in only for part in args.only.split(",")):
                continue
            jobs.append((f"{m}-{only.replace(' ', '_').replace('/', '-').replace(',', '+')}", m, only, capacity[m],
                         release))
            if args.baseline and only.startswith("objective"):
                jobs.append((jobs[-1][0] + "-baseline", m, only, capacity[m], args.baseline))
    # Longest first, so that no pair is left with a two-config instance after the others end.
    done = run_jobs(sorted(jobs, key=lambda job: -len(job[2].split(","))), pairs, args, env)
    results, report = {}, []
    for m in models:
        parts = [(" (baseline)" if name.endswith("-baseline") else "", done[name])
                 for name, model, *_ in jobs if model == m and done.get(name)]
        results[m], text = merge(m, capacity[m], closed.get(m), parts, objectives)
        report.append(text)
    missing = [name for name, *_ in jobs if not done.get(name)]
    if missing:
        report.append("instances that failed or outran their time: " + ", ".join(missing))
    (args.out / "slo.json").write_text(json.dumps(results, indent=2))
    (args.out / "slo.md").write_text("\n\n".join(report))
    print("\n\n".join(report))
    return 1 if missing else 0


def pack(args):
    """tfserve, tfserve-bench and wrk (bin/), what they load that a bare host lacks (lib/), the MLP
    (models/) and the baseline's tfserve (baseline/), as .tar.xz parts and their sha256."""
    bin_dir = args.bin_dir.resolve()
    libs = set()
    for binary in [bin_dir / "tfserve", shutil.which("wrk")]:
        for line in subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout.splitlines():
            parts = line.split("=>")
            if len(parts) == 2 and any(n in parts[0] for n in ("libtensorflow", "libluajit")):
                libs.add(pathlib.Path(parts[1].split()[0]).resolve())
    models = pathlib.Path(os.environ.get("TFSERVE_BENCH_MODELS") or bench.model_dirs(["mlp"])["mlp"].parent)
    args.to.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        archive = pathlib.Path(tmp) / "payload.tar"
        with tarfile.open(archive, "w") as tar:
            for name in ("tfserve", "tfserve-bench"):
                tar.add(bin_dir / name, f"bin/{name}")
            tar.add(shutil.which("wrk"), "bin/wrk")
            for lib in sorted(libs):
                name = lib.name if lib.name.endswith(".2") else lib.name.split(".so")[0] + ".so.2"
                tar.add(lib, f"lib/{name}")
            tar.add(models / "mlp", "models/mlp")
            if args.baseline_bin:
                tar.add(args.baseline_bin.resolve() / "tfserve", "baseline/tfserve")
        bench.run(["xz", "-T0", "-6", str(archive)])
        data = archive.with_suffix(".tar.xz").read_bytes()
    split(data, args.to)


def split(data, folder):
    for old in folder.glob("part-*"):
        old.unlink()
    for index in range(0, len(data), PART_BYTES):
        (folder / f"part-{index // PART_BYTES:02d}").write_bytes(data[index:index + PART_BYTES])
    (folder / "payload.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    print(f"{len(data) / 2**20:.0f} MiB in {len(list(folder.glob('part-*')))} parts under {folder}")


def unpack(args):
    data = b"".join(p.read_bytes() for p in sorted(args.parts.glob("part-*")))
    expected = (args.parts / "payload.sha256").read_text().split()[0]
    if hashlib.sha256(data).hexdigest() != expected:
        sys.exit("the parts do not add up to the packed payload (sha256 differs): send them again")
    args.to.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xJ", "-C", str(args.to)], input=data, check=True)
    if (args.to / "baseline" / "tfserve").exists():
        # The baseline's rows use the current load generator, so only the server differs.
        shutil.copy2(args.to / "bin" / "tfserve-bench", args.to / "baseline" / "tfserve-bench")
    print(f"unpacked into {args.to}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    packing = sub.add_parser("pack", help="make a payload for a host without registries")
    packing.add_argument("--bin-dir", type=pathlib.Path, default=bench.ROOT / "target" / "release")
    packing.add_argument("--baseline-bin", type=pathlib.Path, help="a folder holding an earlier version's tfserve")
    packing.add_argument("--to", type=pathlib.Path, required=True)
    unpacking = sub.add_parser("unpack", help="check and unpack a payload's parts")
    unpacking.add_argument("--parts", type=pathlib.Path, required=True)
    unpacking.add_argument("--to", type=pathlib.Path, required=True)
    parser.add_argument("--models", default="mnist_cnn,mlp")
    parser.add_argument("--objectives", default="5,20")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--slots", type=int, help="core pairs to use (default: every pair of this machine's cores)")
    parser.add_argument("--only", help="run only the config groups containing one of these (comma-separated)")
    parser.add_argument("--capacity", default="", help="model=req/s,... instead of measuring it")
    parser.add_argument("--baseline", type=pathlib.Path, help="an earlier version's binaries for the objective rows")
    parser.add_argument("--payload", type=pathlib.Path, help="an unpacked payload to run from")
    parser.add_argument("--port", type=int, default=19000, help="the first instance's REST port (each next: +10)")
    parser.add_argument("--out", type=pathlib.Path, default=bench.ROOT / "target" / "bench" / "slo-wide")
    args = parser.parse_args()
    if args.command == "pack":
        return pack(args)
    if args.command == "unpack":
        return unpack(args)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
