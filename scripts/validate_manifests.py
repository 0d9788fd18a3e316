#!/usr/bin/env python3
"""Checks deploy/ offline, as a cluster would and then some:

1. every document of every deploy/**/*.yaml validates: Kubernetes' own kinds
   with kubernetes-validate (strict: unknown fields are errors), KServe's
   and KEDA's kinds against the OpenAPI schemas of their CRDs in deploy/schemas;
2. with --tfserve, the container command lines of the KServe runtime and the
   Deployments are run for real against --models (ports moved to free ones):
   their probe paths answer 200, the HPA's metric is on /metrics, SIGTERM
   turns readiness 503 and the process exits 0 within the pod's grace period
   after its preStop hook.

    python3 scripts/validate_manifests.py [--tfserve target/debug/tfserve --models models]
"""
import argparse
import json
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import jsonschema
import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUBERNETES_VERSION = "1.33.0"
SCHEMAS = {
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "clusterservingruntime-v1alpha1.json",
    ("serving.kserve.io/v1beta1", "InferenceService"): "inferenceservice-v1beta1.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-v1alpha1.json",
}


def documents():
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                yield path.relative_to(ROOT), index, doc


def validate(doc):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in SCHEMAS:
        schema = json.loads((DEPLOY / "schemas" / SCHEMAS[key]).read_text())
        jsonschema.validate(doc, schema)
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_of(url):
    try:
        return urllib.request.urlopen(url, timeout=5).status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def run_container(tfserve, container, grace, models, model_name):
    """Starts `container`'s args on `tfserve`, checks its probes and drain."""
    args = [a.replace("{{.Name}}", model_name).replace("/mnt/models", str(models / model_name))
              .replace("=/models", f"={models}") for a in container.get("args", [])]
    ports = {p["containerPort"]: free_port() for p in container.get("ports", [])}
    for flag, default in (("--rest_api_port", 8501), ("--port", 8500)):
        given = next((int(a.split("=", 1)[1]) for a in args if a.startswith(flag + "=")), default)
        ports.setdefault(given, free_port())
        args = [a for a in args if not a.startswith(flag + "=")] + [f"{flag}={ports[given]}"]
    named = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    proc = subprocess.Popen([str(tfserve), "--host=127.0.0.1", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def url(probe):
            port = probe["httpGet"]["port"]
            return f"http://127.0.0.1:{ports[named.get(port, port)]}{probe['httpGet']['path']}"

        readiness, liveness = container["readinessProbe"], container["livenessProbe"]
        deadline = time.time() + 120
        while status_of(url(readiness)) != 200:
            assert proc.poll() is None, f"exited with {proc.returncode}"
            assert time.time() < deadline, f"{url(readiness)} never answered 200"
            time.sleep(0.25)
        assert status_of(url(liveness)) == 200, url(liveness)
        rest = url(readiness).rsplit("/v2/", 1)[0]
        metrics = urllib.request.urlopen(rest + "/metrics", timeout=5).read().decode()
        assert "tfserve_requests_in_flight" in metrics, "the HPA's metric is missing from /metrics"
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        pre_stop_seconds = float(pre_stop[-1]) if pre_stop and pre_stop[0].endswith("sleep") else 0.0
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert status_of(url(readiness)) in (503, None), "readiness did not turn 503 on SIGTERM"
        code = proc.wait(timeout=max(1.0, grace - pre_stop_seconds))
        assert code == 0, f"exit status {code} after SIGTERM"
        return f"ready, live, drained and exited 0 in {time.time() - sent:.1f} s (grace {grace} s)"
    finally:
        if proc.poll() is None:
            proc.kill()


def drain_budget(container, grace):
    """preStop + --drain_timeout + the request timeout must fit in the grace period."""
    args = " ".join(container.get("args", []))
    drain = float(re.search(r"--drain_timeout=([\d.]+)", args).group(1)) if "--drain_timeout" in args else 5.0
    timeout_ms = re.search(r"--rest_api_timeout_in_ms=(\d+)", args)
    request = int(timeout_ms.group(1)) / 1000 if timeout_ms else 30.0
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", ["", "0"])
    need = float(pre_stop[-1]) + drain + request
    assert grace >= need, f"terminationGracePeriodSeconds {grace} < preStop + drain + request timeout = {need}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tfserve", type=pathlib.Path)
    parser.add_argument("--models", type=pathlib.Path, default=ROOT / "models")
    args = parser.parse_args()
    docs = list(documents())
    for path, index, doc in docs:
        try:
            validate(doc)
        except Exception as error:  # noqa: BLE001 - reported with the document it came from
            raise SystemExit(f"{path} document {index} ({doc.get('kind')}): {error}")
        print(f"valid: {path} {doc['kind']} {doc['metadata']['name']}")
    if args.tfserve is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        models = pathlib.Path(tmp) / "models"
        shutil.copytree(args.models / "half_plus_three", models / "half_plus_three")
        for path, _, doc in docs:
            if doc["kind"] == "ClusterServingRuntime":
                container, grace = doc["spec"]["containers"][0], 30
                print(f"{path}: {run_container(args.tfserve, container, grace, models, 'half_plus_three')}")
            elif doc["kind"] == "Deployment":
                pod = doc["spec"]["template"]["spec"]
                container, grace = pod["containers"][0], pod.get("terminationGracePeriodSeconds", 30)
                drain_budget(container, grace)
                print(f"{path}: {run_container(args.tfserve, container, grace, models, 'half_plus_three')}")


if __name__ == "__main__":
    main()
