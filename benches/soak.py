#!/usr/bin/env python3
"""Soak: one release server under mixed traffic for a long time, watching
that memory and file descriptors stay flat and that nothing fails but the bad
inputs sent on purpose.

Traffic (threads looping over keep-alive connections): TF Serving REST
predict, SageMaker /invocations (CSV), Simple TensorFlow Serving `POST /`
(JSON, and PNG uploads to an image model), KServe v2 infer, an
inference.py handler model, and bad bodies that must get 400; every 20 s a
burst of gRPC Predict calls (`tfserve-bench grpc`). Reloads while it runs:
a new version of the served model every 60 s (answers must not change) and
the config file rewritten every 45 s, adding or removing a model.

Every 10 s it samples the server's RSS and open descriptors, requests/s and
p99 over the interval, and unexpected answers; it writes
benches/out/soak.csv and benches/out/soak.svg and prints a summary.

    python3 benches/soak.py --minutes 30
"""
import argparse
import http.client
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402

ROOT = bench.ROOT
OUT = ROOT / "benches" / "out"
CSV_HEADER = "seconds,rss_mb,fds,rps,p99_ms,unexpected,bad_inputs,grpc_errors\n"


def multipart(fields, files):
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, data) in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                     f'Content-Type: application/octet-stream\r\n\r\n'.encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def requests_mix():
    """(name, method, path, headers, body, check) for each kind of request."""
    sm = {"Content-Type": "text/csv", "X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=half_plus_three"}
    png = (ROOT / "tests" / "data" / "gradient.png").read_bytes()
    upload, upload_type = multipart({"model_name": "image_classifier"}, {"image": ("gradient.png", png)})

    def predictions(expected):
        return lambda status, body: status == 200 and json.loads(body)["predictions"] == expected

    return [
        ("tfs", "/v1/models/half_plus_three:predict", {"Content-Type": "application/json"},
         b'{"instances": [1.0, 2.0, 5.0]}', predictions([3.5, 4.0, 5.5])),
        ("sagemaker", "/invocations", sm, b"1.0\n2.0", predictions([3.5, 4.0])),
        ("stfs", "/", {"Content-Type": "application/json"},
         b'{"model_name": "half_plus_three", "data": {"x": [1.0]}}',
         lambda status, body: status == 200 and abs(json.loads(body)["y"][0] - 3.5) < 1e-6),
        ("kserve", "/v2/models/half_plus_three/infer", {"Content-Type": "application/json"},
         b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 5.0]}]}',
         lambda status, body: status == 200 and json.loads(body)["outputs"][0]["data"] == [3.5, 5.5]),
        ("handler", "/invocations",
         {"Content-Type": "application/json", "X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=pair"},
         b'{"instances": [1.0]}', predictions([3.5])),
        ("image", "/", {"Content-Type": upload_type}, upload,
         lambda status, body: status == 200 and len(json.loads(body)["classes"]) == 1),
        ("bad", "/v1/models/half_plus_three:predict", {"Content-Type": "application/json"},
         b'{"instances": "oops"}', None),
        ("bad", "/v1/models/half_plus_three:predict", {"Content-Type": "application/json"},
         b'{"instances": [1.0,', None),
    ]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = []
        self.unexpected = 0
        self.bad = 0
        self.grpc_errors = 0
        self.examples = []

    def take(self):
        with self.lock:
            out = (self.latencies, self.unexpected, self.bad, self.grpc_errors)
            self.latencies, self.unexpected, self.bad, self.grpc_errors = [], 0, 0, 0
            return out


def client(port, mix, offset, stop, stats):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    i = offset
    while not stop.is_set():
        name, path, headers, body, check = mix[i % len(mix)]
        i += 1
        started = time.perf_counter()
        try:
            conn.request("POST", path, body, headers)
            response = conn.getresponse()
            content = response.read()
            status = response.status
        except OSError as exc:
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            status, content = 0, str(exc).encode()
        elapsed = time.perf_counter() - started
        ok = (status == 400 and b'"error"' in content) if check is None else check(status, content)
        with stats.lock:
            stats.latencies.append(elapsed)
            if check is None and ok:
                stats.bad += 1
            elif not ok:
                stats.unexpected += 1
                if len(stats.examples) < 20:
                    stats.examples.append(f"{name}: {status} {content[:200]!r}")


def grpc_bursts(grpc_port, stop, stats):
    while not stop.wait(20):
        done = subprocess.run([str(bench.RELEASE / "tfserve-bench"), "grpc", "--model-dir",
                               str(ROOT / "models" / "half_plus_three"), "--model", "half_plus_three",
                               "--target", f"http://127.0.0.1:{grpc_port}", "--concurrency", "2",
                               "--connections", "1", "--seconds", "2"], capture_output=True, text=True)
        try:
            errors = json.loads(done.stdout.strip().splitlines()[-1])["errors"] if done.returncode == 0 else 1
        except (ValueError, IndexError, KeyError):
            errors = 1
        with stats.lock:
            stats.grpc_errors += errors


def write_config(path, models_dir, with_adder):
    names = ["half_plus_three", "image_classifier", "pair"] + (["adder"] if with_adder else [])
    entries = "".join(f'  config {{ name: "{n}" base_path: "{models_dir / n}" model_platform: "tensorflow" }}\n'
                      for n in names)
    staged = path.with_suffix(".tmp")
    staged.write_text("model_config_list {\n" + entries + "}\n")
    os.replace(staged, path)


def reloads(models_dir, config, stop, log):
    """A new half_plus_three version every 60 s (the oldest removed), the config rewritten every 45 s."""
    started, version, with_adder = time.time(), 1, False
    next_version, next_config = started + 60, started + 45
    while not stop.wait(1):
        now = time.time()
        if now >= next_version:
            next_version += 60
            version += 1
            staged = models_dir / "staging"
            shutil.copytree(ROOT / "models" / "half_plus_three" / "1", staged)
            os.rename(staged, models_dir / "half_plus_three" / str(version))
            if version > 3:
                shutil.rmtree(models_dir / "half_plus_three" / str(version - 2), ignore_errors=True)
            log.append(("version", now - started, version))
        if now >= next_config:
            next_config += 45
            with_adder = not with_adder
            write_config(config, models_dir, with_adder)
            log.append(("config", now - started, with_adder))


def process_sample(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def svg_plot(rows, path):
    """Three stacked line charts over time: RSS MB, requests/s, p99 ms."""
    width, height, pad = 760, 170, 50
    panels = [("RSS (MB)", 1, "#1f77b4"), ("requests/s", 3, "#2ca02c"), ("p99 (ms)", 4, "#d62728")]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height * len(panels) + 20}" '
           'font-family="sans-serif" font-size="11">']
    t_max = max(r[0] for r in rows) or 1
    for index, (title, column, colour) in enumerate(panels):
        top = index * height + 10
        values = [r[column] for r in rows]
        v_max = max(values) * 1.1 or 1
        x = lambda t: pad + (width - pad - 30) * t / t_max  # noqa: E731
        y = lambda v: top + height - 30 - (height - 50) * v / v_max  # noqa: E731
        points = " ".join(f"{x(r[0]):.1f},{y(r[column]):.1f}" for r in rows)
        out.append(f'<text x="{pad}" y="{top + 12}" font-weight="bold">{title}</text>')
        out.append(f'<line x1="{pad}" y1="{y(0):.1f}" x2="{width - 30}" y2="{y(0):.1f}" stroke="#999"/>')
        out.append(f'<line x1="{pad}" y1="{top + 16}" x2="{pad}" y2="{y(0):.1f}" stroke="#999"/>')
        for fraction in (0.5, 1.0):
            v = v_max / 1.1 * fraction
            out.append(f'<text x="{pad - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
        for minute in range(0, int(t_max // 60) + 1, 5):
            out.append(f'<text x="{x(minute * 60):.1f}" y="{y(0) + 14:.1f}" text-anchor="middle">{minute} min</text>')
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--warmup-minutes", type=float, default=5, help="growth is measured from here")
    args = parser.parse_args()
    bench.build()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        models = pathlib.Path(tmp) / "models"
        for name in ("half_plus_three", "image_classifier", "adder"):
            shutil.copytree(ROOT / "models" / name, models / name)
        shutil.copytree(ROOT / "models" / "half_plus_three", models / "pair")
        shutil.copytree(ROOT / "tests" / "handlers" / "pair" / "code", models / "pair" / "code")
        config = models / "models.config"
        write_config(config, models, False)
        port, grpc_port = 18761, 18762
        env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
        server = subprocess.Popen([str(bench.RELEASE / "tfserve"), "--host", "127.0.0.1",
                                   "--rest_api_port", str(port), "--port", str(grpc_port),
                                   "--model_config_file", str(config),
                                   "--model_config_file_poll_wait_seconds", "5",
                                   "--file_system_poll_wait_seconds", "2", "--python_workers", "2"], env=env)
        try:
            bench.wait_ready(server, port, "half_plus_three")
            stop, stats, reload_log = threading.Event(), Stats(), []
            mix = requests_mix()
            threads = [threading.Thread(target=client, args=(port, mix, i, stop, stats), daemon=True)
                       for i in range(args.clients)]
            threads.append(threading.Thread(target=grpc_bursts, args=(grpc_port, stop, stats), daemon=True))
            threads.append(threading.Thread(target=reloads, args=(models, config, stop, reload_log), daemon=True))
            for thread in threads:
                thread.start()
            rows, started = [], time.time()
            csv = open(OUT / "soak.csv", "w")
            csv.write(CSV_HEADER)
            totals = {"requests": 0, "unexpected": 0, "bad": 0, "grpc_errors": 0}
            while time.time() - started < args.minutes * 60:
                time.sleep(10)
                latencies, unexpected, bad, grpc_errors = stats.take()
                rss, fds = process_sample(server.pid)
                latencies.sort()
                p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0
                row = (round(time.time() - started), round(rss, 1), fds, round(len(latencies) / 10, 1),
                       round(p99, 2), unexpected, bad, grpc_errors)
                rows.append(row)
                csv.write(",".join(map(str, row)) + "\n")
                csv.flush()
                totals["requests"] += len(latencies)
                totals["unexpected"] += unexpected
                totals["bad"] += bad
                totals["grpc_errors"] += grpc_errors
                print(dict(zip(CSV_HEADER.strip().split(","), row)), flush=True)
            stop.set()
            csv.close()
            after_warmup = [r for r in rows if r[0] >= args.warmup_minutes * 60] or rows
            summary = {
                **totals,
                "minutes": args.minutes,
                "rss_mb_after_warmup": after_warmup[0][1],
                "rss_mb_end": rows[-1][1],
                "rss_mb_max": max(r[1] for r in rows),
                "rss_growth_pct": round(100 * (rows[-1][1] / after_warmup[0][1] - 1), 2),
                "fds_after_warmup": after_warmup[0][2],
                "fds_end": rows[-1][2],
                "fds_max": max(r[2] for r in rows),
                "rps_mean": round(sum(r[3] for r in rows) / len(rows), 1),
                "p99_ms_median_interval": sorted(r[4] for r in rows)[len(rows) // 2],
                "version_swaps": sum(1 for kind, *_ in reload_log if kind == "version"),
                "config_rewrites": sum(1 for kind, *_ in reload_log if kind == "config"),
                "unexpected_examples": stats.examples,
            }
            svg_plot(rows, OUT / "soak.svg")
            print(json.dumps(summary, indent=2))
        finally:
            bench.stop(server)


if __name__ == "__main__":
    main()
