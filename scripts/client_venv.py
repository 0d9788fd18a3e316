"""Makes the virtual environment the tests run real gRPC and KServe clients
from: tensorflow-serving-api (over the pinned tensorflow-cpu wheel the set-up
script fetches), tritonclient[http,grpc], grpcio-health-checking and
grpcio-reflection, and kubernetes-validate (deploy/'s manifest checks), in the
tfserve cache. Prints the environment's Python.

    python3 scripts/client_venv.py
"""
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from tfvenv import TF_PIN, cache_root  # noqa: E402

PACKAGES = [TF_PIN, "tritonclient[http,grpc]==2.73.0", "grpcio-health-checking==1.81.1",
            "grpcio-reflection==1.81.1", "requests", "kubernetes-validate==1.37.0", "jsonschema==4.26.0"]
# tensorflow-serving-api requires the `tensorflow` project; its modules only
# need TensorFlow's Python package, which tensorflow-cpu provides.
NO_DEPS = ["tensorflow-serving-api==2.21.0"]


def main() -> None:
    venv = cache_root() / "client-venv"
    python = venv / "bin" / "python"
    stamp = venv / "tfserve-packages.txt"
    wanted = "\n".join(PACKAGES + NO_DEPS)
    if stamp.exists() and stamp.read_text() == wanted:
        print(python)
        return
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["--find-links", str(cache_root() / "wheels"), *PACKAGES], check=True)
    subprocess.run(pip + ["--no-deps", *NO_DEPS], check=True)
    stamp.write_text(wanted)
    print(python)


if __name__ == "__main__":
    main()
