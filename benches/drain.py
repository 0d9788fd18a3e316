#!/usr/bin/env python3
"""SIGTERM under load, repeated: 64 clients loop on half_plus_three over
keep-alive connections; after 2 s the server gets SIGTERM. Every request must
be answered 200, or refused before the server accepted its connection
(ECONNREFUSED); anything else (a connection closed or reset under a request
already sent) is a lost request. Also checks that readiness turned 503 during
the drain and that the server exited 0.

    python3 benches/drain.py --runs 20 --clients 64
"""
import argparse
import http.client
import json
import pathlib
import signal
import subprocess
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
BODY = json.dumps({"instances": [1.0, 2.0, 5.0]})


def client(port, stop, tally, lock):
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.connect()
        except OSError:
            # Refused (or reset) while connecting: no request was sent.
            with lock:
                tally["refused"] += 1
            conn = None
            time.sleep(0.02)
            continue
        try:
            conn.request("POST", "/v1/models/half_plus_three:predict", BODY,
                         {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            key = "ok" if response.status == 200 else f"status {response.status}"
            with lock:
                tally[key] = tally.get(key, 0) + 1
            if response.getheader("connection", "").lower() == "close":
                conn.close()
                conn = None
        except (ConnectionError, http.client.HTTPException, OSError) as error:
            with lock:
                tally["lost"] += 1
                tally.setdefault("lost_kinds", {}).setdefault(type(error).__name__, 0)
                tally["lost_kinds"][type(error).__name__] += 1
            conn = None


def ready_status(port):
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health/ready", timeout=2).status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def one_run(binary, port, clients, load_seconds, drain_timeout):
    server = subprocess.Popen(
        [str(binary), "--host", "127.0.0.1", "--rest_api_port", str(port), "--model_name", "half_plus_three",
         "--model_base_path", str(ROOT / "models" / "half_plus_three"), f"--drain_timeout={drain_timeout}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while ready_status(port) != 200:
        if time.time() > deadline or server.poll() is not None:
            raise RuntimeError("server did not become ready")
        time.sleep(0.1)
    stop, lock = threading.Event(), threading.Lock()
    tally = {"ok": 0, "refused": 0, "lost": 0}
    threads = [threading.Thread(target=client, args=(port, stop, tally, lock)) for _ in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(load_seconds)
    sent_term = time.time()
    server.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    readiness = ready_status(port)
    code = server.wait(timeout=60)
    exited_after = time.time() - sent_term
    time.sleep(0.2)
    stop.set()
    for thread in threads:
        thread.join()
    return {**tally, "ready_during_drain": readiness, "exit": code, "exit_after_s": round(exited_after, 2)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--load-seconds", type=float, default=2.0)
    parser.add_argument("--drain-timeout", type=float, default=1.0)
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "--bin", "tfserve"], cwd=ROOT, check=True)
    binary = ROOT / "target" / "release" / "tfserve"
    totals = {"ok": 0, "refused": 0, "lost": 0, "bad_runs": 0}
    for run in range(args.runs):
        result = one_run(binary, 18900 + run % 50, args.clients, args.load_seconds, args.drain_timeout)
        print(json.dumps({"run": run + 1, **result}), flush=True)
        for key in ("ok", "refused", "lost"):
            totals[key] += result[key]
        if result["exit"] != 0 or result["ready_during_drain"] != 503:
            totals["bad_runs"] += 1
    print(json.dumps({"runs": args.runs, "clients": args.clients, **totals}))
    raise SystemExit(1 if totals["lost"] or totals["bad_runs"] else 0)


if __name__ == "__main__":
    main()
