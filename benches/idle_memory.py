#!/usr/bin/env python3
"""What the server keeps after one large request: starts tfserve on
half_plus_three, sends one JSON predict of N floats (33 million: a 188 MiB
body), and prints the resident set at idle, when answered, and each second
for 12 seconds after (the idle release runs after two idle seconds). Each
`--env` runs the same again with that variable set, so allocator choices
compare in one run, for example TensorFlow's oneDNN pool against the
system allocator:

    python3 benches/idle_memory.py --binary target/debug/tfserve \\
        --env TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1 --env TF_ENABLE_ONEDNN_OPTS=0
"""
import argparse
import os
import pathlib
import subprocess
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
PORT = 18777


def rss_mib(pid):
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


def one_run(binary, floats, extra_env):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RUST_LOG="info", **extra_env)
    server = subprocess.Popen(
        [binary, "--model_name=half", f"--model_base_path={ROOT / 'models/half_plus_three'}",
         "--port=0", f"--rest_api_port={PORT}", "--host=127.0.0.1", "--max_request_bytes=400000000",
         "--max_in_flight_bytes=4000000000", "--rest_api_timeout_in_ms=600000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    log = []
    threading.Thread(target=lambda: log.extend(line.rstrip() for line in server.stdout), daemon=True).start()
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/v1/models/half", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        time.sleep(3)
        idle = rss_mib(server.pid)
        body = ('{"instances": [' + ",".join(["0.123"] * floats) + "]}").encode()
        request = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/models/half:predict", data=body)
        with urllib.request.urlopen(request, timeout=900) as answer:
            answer.read()
        answered = rss_mib(server.pid)
        del body
        after = []
        for _ in range(12):
            time.sleep(1)
            after.append(rss_mib(server.pid))
        return idle, answered, after, [line for line in log if "idle:" in line]
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=str(ROOT / "target/release/tfserve"))
    parser.add_argument("--floats", type=int, default=33_000_000)
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE: one more run with it set")
    args = parser.parse_args()
    runs = [("as configured", {})] + [(e, dict([e.split("=", 1)])) for e in args.env]
    print("| run | idle MiB | answered MiB | 12 s later MiB | over idle MiB |")
    print("|---|---:|---:|---:|---:|")
    for name, extra in runs:
        idle, answered, after, released = one_run(args.binary, args.floats, extra)
        print(f"| {name} | {idle} | {answered} | {after[-1]} | {after[-1] - idle} |", flush=True)
        for line in released:
            print(f"  {line}")


if __name__ == "__main__":
    main()
