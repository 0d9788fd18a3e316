"""Runs a script inside the virtual environment with the pinned TensorFlow.

Used by models/generate.py and benches/make_models.py: they call `ensure()`
first, which re-executes them under the environment's Python (creating it in
the tfserve cache on first use; the cached wheel is reused when present).
"""
import os
import pathlib
import subprocess
import sys

TF_PIN = "tensorflow-cpu==2.21.0"


def cache_root() -> pathlib.Path:
    if os.environ.get("TFSERVE_CACHE_DIR"):
        return pathlib.Path(os.environ["TFSERVE_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(xdg) / "tfserve"


def ensure(script: str) -> None:
    venv = cache_root() / "gen-venv"
    python = venv / "bin" / "python"
    if pathlib.Path(sys.prefix).resolve() == venv.resolve():
        return
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--find-links", str(cache_root() / "wheels"), TF_PIN], check=True)
    os.execv(str(python), [str(python), script, *sys.argv[1:]])
