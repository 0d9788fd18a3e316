"""A tfserve handler worker: one Python process that loads models'
inference.py modules and calls them with SageMaker's Context, normalising what
they return. tfserve runs it as `python3 -c <this file>` and talks to it over
stdin/stdout in frames (see `serve`); a worker runs one call at a time, so a
handler that crashes, hangs or leaks costs only its own process."""
import collections
import importlib.util
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import traceback

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
        command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
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


def describe(exc):
    """`Type: message`, with the innermost traceback line when there is one."""
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f' (File "{last.filename}", line {last.lineno}, in {last.name})'
    return text


# module name -> (handler, input_handler, output_handler)
_loaded = {}


def _call(header, body):
    functions = _loaded.get(header["module"])
    if functions is None:
        raise LookupError(f"handler module {header['module']} is not loaded in this worker")
    handler, input_handler, output_handler = functions
    context = make_context(*header["context"])
    op = header["op"]
    if op == "handler":
        return call_handler(handler, body, context)
    if op == "input":
        return call_input(input_handler, body, context), None
    return call_output(output_handler, header["status"], body, context)


def dispatch(header, body):
    """One request from tfserve: (reply header, reply body)."""
    op = header["op"]
    if op == "install":
        failure = install_requirements(header["requirements"], header["target"])
        return ({"ok": False, "error": failure} if failure else {"ok": True}), b""
    if op == "load":
        try:
            functions = load(header["module"], header["path"], header["search_paths"])
        except Exception as exc:
            return {"ok": False, "error": describe(exc)}, b""
        _loaded[header["module"]] = functions
        return {"ok": True, "handler": functions[0] is not None}, b""
    if op == "unload":
        if header["module"] is not None:
            _loaded.pop(header["module"], None)
        unload(header["module"], header["search_paths"])
        return {"ok": True}, b""
    try:
        out, content_type = _call(header, body)
    except Exception as exc:
        status, message = error_of(exc)
        return {"ok": False, "status": status, "error": message, "detail": describe(exc)}, b""
    return {"ok": True, "content_type": content_type}, out


def _read_exact(stream, size):
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def serve(requests, replies):
    """Frames both ways: u32 LE header length, JSON header, u64 LE body length, body."""
    while True:
        try:
            (header_size,) = struct.unpack("<I", _read_exact(requests, 4))
            header = json.loads(_read_exact(requests, header_size))
            (body_size,) = struct.unpack("<Q", _read_exact(requests, 8))
            body = _read_exact(requests, body_size)
        except EOFError:
            return
        reply, out = dispatch(header, body)
        encoded = json.dumps(reply).encode("utf-8")
        replies.write(struct.pack("<I", len(encoded)) + encoded + struct.pack("<Q", len(out)))
        replies.write(out)
        replies.flush()


def _die_with_parent():
    """Linux: SIGKILL this worker when tfserve goes, even if a handler is stuck."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() == 1:
        sys.exit(0)


if __name__ == "__main__":
    _die_with_parent()
    # The protocol keeps the real stdout; handlers' print() goes to stderr (tfserve's log).
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, replies)
