"""The Python side of tfserve's inference.py support: loads a model's handler
module and calls it with SageMaker's Context, normalising what it returns.
tfserve imports this once, as the module `tfserve_handlers`."""
import os
import sys

# libtensorflow exports BoringSSL's EVP_/CRYPTO_ symbols; without DEEPBIND the
# OpenSSL that _hashlib and _ssl load would call into those and crash.
# Extension modules loaded from here on resolve their own libraries first.
if hasattr(os, "RTLD_DEEPBIND"):
    sys.setdlopenflags(sys.getdlopenflags() | os.RTLD_DEEPBIND)

import collections  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402

# The container's fields in its order (handlers may unpack them), then grpc_uri.
Context = collections.namedtuple("Context", [
    "model_name", "model_version", "method", "rest_uri", "grpc_port", "channel",
    "custom_attributes", "request_content_type", "accept_header", "content_length", "grpc_uri",
])


_channels = {}


def make_context(*fields):
    """The container's Context; `channel` is a gRPC channel to tfserve when the
    handler uses grpcio (imported by the handler itself: tfserve never imports it)."""
    context = Context(*fields)
    grpc = sys.modules.get("grpc")
    if context.grpc_uri and grpc is not None:
        channel = _channels.get(context.grpc_uri)
        if channel is None:
            channel = _channels.setdefault(context.grpc_uri, grpc.insecure_channel(context.grpc_uri))
        context = context._replace(channel=channel)
    return context


class Response:
    """What output_handler receives: the model's answer, shaped like the
    requests.Response the container passes (status_code, content, text, json())."""

    def __init__(self, status_code, content):
        self.status_code = status_code
        self.content = content
        self.headers = {"Content-Type": "application/json"}
        self.ok = status_code < 400

    @property
    def text(self):
        return self.content.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content)


def python_executable():
    """The interpreter this process embeds, as a program (for pip)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (os.path.join(sys.base_exec_prefix, "bin", version),
                      os.path.join(sys.base_exec_prefix, "bin", "python3")):
        if os.path.exists(candidate):
            return candidate
    return version


_install_lock = threading.Lock()


def install_requirements(requirements, target):
    """pip-installs requirements.txt into target, once: an earlier complete
    install is reused. Staged next to the target and renamed, so a half-done
    install is never used; one install at a time (models may share a target).
    Returns "" or what went wrong."""
    done = os.path.join(target, ".tfserve-complete")
    with _install_lock:
        if os.path.exists(done):
            return ""
        staging = target + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        command = [python_executable(), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                   "--quiet", "--target", staging, "-r", requirements]
        # --target leaves the interpreter's own packages alone; older Debian pips
        # still refuse an "externally managed" Python without this.
        env = dict(os.environ, PIP_BREAK_SYSTEM_PACKAGES="1")
        finished = subprocess.run(command, capture_output=True, text=True, env=env)
        if finished.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            return f"pip install -r {requirements} failed: " + (finished.stderr or finished.stdout).strip()[-2000:]
        open(os.path.join(staging, ".tfserve-complete"), "w").close()
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging, target)
        return ""


def _under(path, roots):
    path = os.path.abspath(path or "")
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def _local_names(search_paths):
    """Top-level module names a model's code/, code/lib or deps directory provides."""
    names = set()
    for entry in search_paths:
        if os.path.isdir(entry):
            for item in os.listdir(entry):
                name, ext = os.path.splitext(item)
                if ext == ".py" or os.path.isdir(os.path.join(entry, item)):
                    names.add(name)
    return names


def load(module_name, path, search_paths):
    """Imports inference.py under a name of its own; returns (handler, input_handler, output_handler)."""
    roots = [os.path.abspath(p) for p in search_paths]
    # Another model's helper module of the same name must not stand in for this one's.
    for name in _local_names(search_paths):
        module = sys.modules.get(name)
        if module is not None and not _under(getattr(module, "__file__", None), roots):
            del sys.modules[name]
    for entry in reversed(search_paths):
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)
        _path_users[entry] = _path_users.get(entry, 0) + 1
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    handler = getattr(module, "handler", None)
    input_handler = getattr(module, "input_handler", None)
    output_handler = getattr(module, "output_handler", None)
    if handler is None and (input_handler is None or output_handler is None):
        raise ValueError(f"{path} defines neither handler(data, context) nor both "
                         "input_handler(data, context) and output_handler(response, context)")
    if handler is not None:
        return handler, None, None
    return None, input_handler, output_handler


# How many loaded models use each sys.path entry (models may share code/,
# --handler_path, or an install of the same requirements).
_path_users = {}


def unload(module_name, search_paths):
    """Forgets a model's handler module (None: a newer load has its name), and
    the paths and modules no other loaded model uses."""
    if module_name is not None:
        sys.modules.pop(module_name, None)
    unused = []
    for entry in search_paths:
        users = _path_users.get(entry, 0) - 1
        if users > 0:
            _path_users[entry] = users
            continue
        _path_users.pop(entry, None)
        unused.append(os.path.abspath(entry))
        while entry in sys.path:
            sys.path.remove(entry)
    for name, module in list(sys.modules.items()):
        if _under(getattr(module, "__file__", None), unused):
            del sys.modules[name]


def _body(value):
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if hasattr(value, "read"):
        return _body(value.read())
    return json.dumps(value).encode("utf-8")


def _answer(result):
    """(body, content type or None) from what a handler or output_handler returned."""
    if isinstance(result, tuple):
        body = result[0] if result else None
        content_type = result[1] if len(result) > 1 and result[1] else None
        return _body(body), content_type
    return _body(result), None


def call_handler(handler, body, context):
    return _answer(handler(io.BytesIO(body), context))


def call_input(input_handler, body, context):
    return _body(input_handler(io.BytesIO(body), context))


def call_output(output_handler, status, content, context):
    return _answer(output_handler(Response(status, content), context))


_STATUS_IN_MESSAGE = re.compile(r"^\s*Error:\s*(\d{3}),\s*(.*)$", re.S)


def error_of(exc):
    """(HTTP status, message) for a handler's exception: the status it names
    (a status_code attribute, or the documented 'Error: <code>, <message>'
    text), else 500 as the container answers."""
    message = str(exc) or type(exc).__name__
    value = getattr(exc, "status_code", None)
    if isinstance(value, int) and 400 <= value <= 599:
        return value, message
    match = _STATUS_IN_MESSAGE.match(message)
    if match and 400 <= int(match.group(1)) <= 599:
        return int(match.group(1)), match.group(2).strip()
    return 500, message
