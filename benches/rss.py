#!/usr/bin/env python3
"""Memory of a model load and unload: starts tfserve with no models, loads the
benchmark's ResNet-50 through the management API, unloads it, and prints the
server's resident memory at each step (a second cycle shows the steady state,
after TensorFlow's one-time process-wide initialisation).

    python3 benches/rss.py [cycles, default 2]
"""
import json
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent


def rss_mib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def request(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as response:
        return response.status


def main():
    subprocess.run(["cargo", "build", "--release", "--bin", "tfserve"], cwd=ROOT, check=True)
    out = subprocess.run([sys.executable, str(ROOT / "benches" / "make_models.py")], capture_output=True, text=True,
                         check=True).stdout
    models = pathlib.Path(out.strip().splitlines()[-1])
    empty = tempfile.mkdtemp(prefix="tfserve-rss-")
    port = 18900
    proc = subprocess.Popen([str(ROOT / "target" / "release" / "tfserve"), "--host", "127.0.0.1", "--rest_api_port",
                             str(port), "--models_dir", empty, "--model_roots", str(models)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        base = f"http://127.0.0.1:{port}"
        print(f"started: {rss_mib(proc.pid):.0f} MiB")
        for cycle in range(1, int(sys.argv[1]) + 1 if len(sys.argv) > 1 else 3):
            before = rss_mib(proc.pid)
            request("POST", f"{base}/tfserve/models", {"name": "resnet50", "base_path": str(models / "resnet50")})
            loaded = rss_mib(proc.pid)
            request("DELETE", f"{base}/tfserve/models/resnet50")
            time.sleep(1)
            after = rss_mib(proc.pid)
            verdict = "within 10%" if after <= before * 1.10 else "NOT within 10%"
            print(f"cycle {cycle}: before load {before:.0f} MiB, loaded {loaded:.0f} MiB, "
                  f"after unload {after:.0f} MiB ({verdict} of before)")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
