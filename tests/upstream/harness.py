"""Starting the tfserve binary for the ported suites, without any peer's
client library: it binds port 0 for REST and gRPC and the addresses are read
from its start-up line, so runs never race for ports.
"""

import atexit
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time

STARTUP = re.compile(r" on http://(\S+) and gRPC on (\S+)")

class Server:
    """A started tfserve process and everything it wrote to stderr."""

    def __init__(self, command, keep_stderr):
        self.proc = subprocess.Popen(
            shlex.split(command), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
            env=dict(os.environ, RUST_LOG="info"))
        atexit.register(self.proc.kill)
        self.lines = []
        self.addresses = None
        self.started = threading.Event()
        self.keep_stderr = keep_stderr
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            match = STARTUP.search(line)
            if match and self.addresses is None:
                rest, grpc_addr = match.groups()
                self.addresses = (_local(grpc_addr), _local(rest))
                self.started.set()
        self.started.set()

    def stderr(self, timeout=60):
        """Everything written to stderr once the process has exited."""
        self.proc.wait(timeout)
        self.started.wait(timeout)
        time.sleep(0.1)
        return "".join(self.lines).encode("utf-8")


# Every temporary file and directory a suite makes (configs, sockets, model
# copies) lives under one directory of its own, removed when the suite exits.
SCRATCH = tempfile.mkdtemp(prefix="tfserve-suite-")
tempfile.tempdir = SCRATCH
atexit.register(shutil.rmtree, SCRATCH, True)

REPO_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "models")


def repo_models_config(names):
    """A model config file serving the named models of the repository's models/."""
    handle, path = tempfile.mkstemp(suffix=".conf", prefix="tfserve-models-")
    with os.fdopen(handle, "w") as f:
        f.write("model_config_list {\n" + "".join(
            'config {{ name: "{0}" base_path: "{1}/{0}" model_platform: "tensorflow" }}\n'.format(
                name, REPO_MODELS) for name in names) + "}\n")
    return path


def _local(addr):
    return "localhost:" + addr.rsplit(":", 1)[1]


