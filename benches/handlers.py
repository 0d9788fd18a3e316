#!/usr/bin/env python3
"""What an inference.py handler costs: in one run, one server, requests/s of
SageMaker /invocations on half_plus_three with a pass-through
input_handler/output_handler pair vs. the same model without handlers, at
several concurrencies (wrk, JSON body {"instances": [1.0, 2.0, 5.0]}).

    python3 benches/handlers.py                 # c = 1, 16, 64; 10 s each
    python3 benches/handlers.py --duration 5 --workers 4
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402  (wrk, build and server helpers)

PASS_THROUGH = '''
def input_handler(data, context):
    return data.read()


def output_handler(response, context):
    return response.content, context.accept_header
'''

WRK_SCRIPT = bench.WRK_SCRIPT + """
wrk.headers["X-Amzn-SageMaker-Custom-Attributes"] = "tfs-model-name=" .. os.getenv("TFSERVE_BENCH_MODEL")
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="--python_workers (default: cores)")
    args = parser.parse_args()
    bench.ensure_wrk()
    bench.build()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        models = work / "models"
        source = bench.ROOT / "models" / "half_plus_three" / "1"
        for name in ("plain", "passthrough"):
            shutil.copytree(source, models / name / "1")
        (models / "passthrough" / "code").mkdir()
        (models / "passthrough" / "code" / "inference.py").write_text(PASS_THROUGH)
        body = work / "body.json"
        body.write_text('{"instances": [1.0, 2.0, 5.0]}')
        script = work / "invoke.lua"
        script.write_text(WRK_SCRIPT)
        port = 18720
        env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.Popen([str(bench.RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(port),
                                 "--models_dir", str(models), "--python_workers", str(args.workers),
                                 "--tensorflow_intra_op_parallelism=1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            for name in ("plain", "passthrough"):
                bench.wait_ready(proc, port, name)
            check = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body.read_bytes(),
                                           headers={"Content-Type": "application/json",
                                                    "X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=passthrough"})
            answer = urllib.request.urlopen(check, timeout=10).read().decode()
            assert answer == '{"predictions":[3.5,4.0,5.5]}', answer
            rows = []
            for c in args.concurrency:
                results = {}
                for name in ("plain", "passthrough"):
                    os.environ["TFSERVE_BENCH_MODEL"] = name
                    results[name] = bench.wrk(f"http://127.0.0.1:{port}/invocations", body, c, args.duration, script)
                    bench.log(f"{name} c={c}: {results[name]}")
                    time.sleep(1)
                rows.append((c, results))
        finally:
            bench.stop(proc)
    print(f"\n{args.workers} Python worker(s), {os.cpu_count()} cores, {args.duration} s per point\n")
    print("| concurrency | without handlers req/s (p99 ms) | pass-through handlers req/s (p99 ms) | ratio |")
    print("|---|---|---|---|")
    for c, r in rows:
        plain, handled = r["plain"], r["passthrough"]
        print(f"| {c} | {plain['rps']:.0f} ({plain['p99_ms']:.2f}) | {handled['rps']:.0f} ({handled['p99_ms']:.2f}) "
              f"| {handled['rps'] / plain['rps']:.2f} |")
        if plain["errors"] or handled["errors"]:
            print(f"  errors: without {plain['errors']}, with {handled['errors']}")


if __name__ == "__main__":
    main()
