#!/usr/bin/env python3
"""`tfserve transform` throughput against the raw model, in one run: many
small JPEGs through `image_classifier` (decode and classify in-graph), the
seed notebook's workload shape.

    python3 benches/transform.py [--images 20000] [--work-dir /dev/shm]

The input and output files go under --work-dir (default: the system's
temporary directory). On a disk-backed filesystem, creating one output file
per input can cost more than the model; tmpfs shows the pipeline's own rate.
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

ROOT = pathlib.Path(__file__).resolve().parent.parent
RELEASE = ROOT / "target" / "release"
BATCHING = "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 1000 }\nmax_enqueued_batches { value: 1000 }\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--work-dir", default=None, help="where the images and outputs are written")
    args = parser.parse_args()
    subprocess.run([sys.executable, str(ROOT / "scripts" / "setup_libtensorflow.py")], check=True)
    subprocess.run(["cargo", "build", "--release", "--bin", "tfserve", "--bin", "tfserve-bench"], cwd=ROOT, check=True)
    jpeg = ROOT / "tests" / "data" / "gradient.jpg"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RUST_LOG="warn")
    raw = subprocess.run([str(RELEASE / "tfserve-bench"), "raw", "--model-dir", str(ROOT / "models" / "image_classifier"),
                          "--image", str(jpeg), "--batches", "1,8,32,64"], capture_output=True, text=True, env=env,
                         check=True).stdout
    rows = [json.loads(line) for line in raw.splitlines() if line.startswith("{")]
    best = max(rows, key=lambda r: r["samples_per_s"])
    work = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-transform-bench-", dir=args.work_dir))
    try:
        images = work / "images"
        images.mkdir()
        for i in range(args.images):
            shutil.copyfile(jpeg, images / f"img{i:06}.jpg")
        params = work / "batching.cfg"
        params.write_text(BATCHING)
        out = subprocess.run([str(RELEASE / "tfserve"), "transform", "--input", str(images), "--output", str(work / "out"),
                              "--content_type", "application/x-image",
                              "--custom_attributes", "tfs-model-name=image_classifier",
                              "--models_dir", str(ROOT / "models"), "--enable_batching",
                              "--batching_parameters_file", str(params),
                              "--max_concurrent_transforms", str(args.concurrency)],
                             capture_output=True, text=True, env=env, check=True).stdout
        rate = float(re.search(r"([\d.]+) records/s", out).group(1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("raw image_classifier: " + ", ".join(f"batch {r['batch']} {r['samples_per_s']:,.0f}/s" for r in rows))
    print(f"tfserve transform: {rate:,.0f} images/s over {args.images} files in {work.parent} = "
          f"{rate / best['samples_per_s']:.0%} "
          f"of the best raw throughput (batch {best['batch']}); target >= 85%")


if __name__ == "__main__":
    main()
