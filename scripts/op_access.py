#!/usr/bin/env python3
"""Checks the audit's op table (`src/audit/ops/`) against TensorFlow's own op registry.

The audit classes what each op a signature can run reaches outside the request:
files read, files written, the network. This script reads every op the pinned
TensorFlow registers, picks the *candidates* (ops whose name, or the name of an
input or attribute, says they might touch a file, a folder, a socket or another
process; generous on purpose, so that nothing is missed) and reports

- every candidate that none of the table's arrays names: each must be reviewed
  and added to one of them (`REVIEWED_LOCAL` when it reaches nothing outside);
- every name in the arrays that TensorFlow does not register (a typo, or an op
  a TensorFlow upgrade removed);
- every name that two arrays hold.

It exits 1 when any of these is found, so that after a TensorFlow upgrade
(bump `TF_PIN` in `scripts/tfvenv.py`) a rerun shows the ops that are new.
How each candidate was decided is in the comments of the table itself.

Run with any Python 3: the script re-executes itself inside the virtual
environment with the pinned TensorFlow (the one `scripts/client_venv.py` made,
when it has the pin, else the one `scripts/tfvenv.py` makes).

    python3 scripts/op_access.py          # check the table
    python3 scripts/op_access.py --list   # every candidate: inputs, attributes, kernels, the table's verdict
"""
import argparse
import os
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import tfvenv  # noqa: E402

TABLE = HERE.parent / "src" / "audit" / "ops"

# Words in an op's name (matched anywhere, case-sensitively, so `Send` finds
# `_HostSend` and `TPU` finds `TPUCompile`). `Dataset` is not among them: a
# dataset is a candidate through the names of its inputs and attributes.
NAME_WORDS = (
    "File", "Reader", "Writer", "Write", "Save", "Restore", "Checkpoint", "Summary", "Event", "Print", "Debug", "Dump",
    "Rpc", "DataService", "Distributed", "Register", "Collective", "AllReduce", "AllGather", "AllToAll",
    "AllScatter", "ReduceScatter", "CrossReplica", "Mesh", "Relayout", "Nccl", "Send", "Recv", "Remote", "Host",
    "Heartbeat", "Server", "Client", "Tpu", "TPU", "Infeed", "Outfeed", "Gcs", "GCS", "Cloud", "BigQuery",
    "Bigtable", "Kafka", "Socket", "Http", "Url", "URL", "Immutable", "Memmapped", "Mmap", "Snapshot", "Cache",
    "Load", "Import", "Export", "Sql", "LMDB", "CSV", "TFRecord", "TextLine", "FixedLength", "Matching", "Glob",
    "Config", "PyFunc", "Session", "Proto", "Calibration", "Aggregator", "Skipgram", "Vocab", "Mlir",
    "CustomCall", "Callback", "Profil", "Trace", "Fdo",
)

# Names of inputs and attributes: a match is one of these names whole, or one
# with a `_`-separated part among ARG_PARTS (`chunk_file`, `log_dir_path`).
ARG_NAMES = ("tensor_name", "send_device", "recv_device", "output_stream", "descriptor_source", "data_source_name")
ARG_PARTS = (
    "file", "files", "filename", "filenames", "filepath", "pattern", "patterns", "path", "paths", "dir",
    "directory", "logdir", "prefix", "prefixes", "root", "url", "urls", "uri", "address", "addresses", "target",
    "worker", "workers", "host", "hosts", "port", "server", "client", "driver", "query", "db", "snapshot",
    "checkpoint", "ckpt", "vocab", "region", "scheme", "socket", "endpoint", "job", "task", "cluster", "protocol",
    "network", "stream", "descriptor", "source", "dump", "log",
)

NAME_RE = re.compile("|".join(re.escape(w) for w in NAME_WORDS))


def arg_matches(name: str) -> bool:
    name = name.lower()
    return name in ARG_NAMES or any(part in ARG_PARTS for part in name.split("_"))


def reexec_in_tf_venv() -> None:
    """Runs this script under the pinned TensorFlow: in the client environment
    (`scripts/client_venv.py`) when it exists with the pin, else in `tfvenv`'s
    (made on first use, as for models/generate.py)."""
    client = tfvenv.cache_root() / "client-venv"
    if pathlib.Path(sys.prefix).resolve() == client.resolve():
        return
    stamp = client / "tfserve-packages.txt"
    python = client / "bin" / "python"
    if python.exists() and stamp.exists() and tfvenv.TF_PIN in stamp.read_text().splitlines():
        os.execv(str(python), [str(python), __file__, *sys.argv[1:]])
    tfvenv.ensure(__file__)


def registered_ops():
    """Every OpDef the pinned TensorFlow registers, by name, and its version."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # TensorFlow's C++ side prints start-up lines (no CUDA driver, ...) before the level applies: keep them
    # off stderr while it loads, and put stderr back for anything after.
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow as tf
        from tensorflow.python.framework import kernels  # noqa: F401 (loads the rest of what prints)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api

    want = tfvenv.TF_PIN.split("==")[1]
    if tf.__version__ != want:
        sys.exit(f"TensorFlow {tf.__version__} imported, {want} ({tfvenv.TF_PIN}) wanted")
    buffer = c_api.TF_GetAllOpList()
    try:
        ops = op_def_pb2.OpList.FromString(c_api.TF_GetBuffer(buffer))
    finally:
        c_api.TF_DeleteBuffer(buffer)
    return {op.name: op for op in ops.op}, tf.__version__


def kernel_devices(name: str) -> list:
    """The device types the pip build of TensorFlow has kernels for (none: the op only runs after a rewrite,
    XLA's or DTensor's, or on a TPU host). libtensorflow, which tfserve loads, has the same but for the
    kernels of TensorFlow's Python extension (`PyFunc`'s)."""
    from tensorflow.python.framework import kernels

    return sorted({k.device_type for k in kernels.get_registered_kernels_for_op(name).kernel})


def is_candidate(op) -> bool:
    if NAME_RE.search(op.name):
        return True
    return any(arg_matches(a.name) for a in [*op.input_arg, *op.attr])


def table_arrays() -> dict:
    """The quoted names in each `const NAME: &[&str] = &[...]` of the table, comments left out."""
    sources = sorted(p for p in TABLE.glob("*.rs") if p.name != "tests.rs")
    text = re.sub(r"//[^\n]*", "", "\n".join(p.read_text() for p in sources))
    arrays = {}
    for m in re.finditer(r"const\s+([A-Z_][A-Z0-9_]*)\s*:\s*&\[&str\]\s*=\s*&\[(.*?)\];", text, re.DOTALL):
        arrays[m.group(1)] = re.findall(r'"([^"]+)"', m.group(2))
    return arrays


def describe(op) -> str:
    inputs = ", ".join(f"{a.name}" for a in op.input_arg)
    attrs = ", ".join(f"{a.name}: {a.type}" for a in op.attr)
    return f"({inputs}) [{attrs}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print every candidate with its arguments and verdict")
    args = parser.parse_args()
    reexec_in_tf_venv()

    ops, version = registered_ops()
    candidates = sorted(name for name, op in ops.items() if is_candidate(op))
    arrays = table_arrays()
    if not arrays:
        sys.exit(f"no `const NAME: &[&str]` arrays found in {TABLE}")
    where = {}
    for array, names in arrays.items():
        for name in names:
            where.setdefault(name, []).append(array)

    if args.list:
        try:
            for name in candidates:
                verdict = ",".join(where.get(name, ["UNREVIEWED"]))
                devices = ",".join(kernel_devices(name)) or "no kernel"
                print(f"{name}{describe(ops[name])}  -> {verdict}  (kernels: {devices})")
            sys.stdout.flush()
        except BrokenPipeError:  # `--list | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return
        print(f"{len(candidates)} candidates of {len(ops)} ops in TensorFlow {version}", file=sys.stderr)
        return

    unreviewed = [name for name in candidates if name not in where]
    unknown = sorted(name for name in where if name not in ops)
    twice = sorted(name for name, found in where.items() if len(found) > 1)
    counts = ", ".join(f"{array} {len(names)}" for array, names in arrays.items())
    print(f"TensorFlow {version}: {len(ops)} ops, {len(candidates)} candidates; {TABLE.name}: {counts}")
    for name in unreviewed:
        print(f"unreviewed: {name}{describe(ops[name])}  (kernels: {','.join(kernel_devices(name)) or 'none'})")
    for name in unknown:
        print(f"not registered in TensorFlow {version}: {name} (in {', '.join(where[name])})")
    for name in twice:
        print(f"in more than one array: {name} ({', '.join(where[name])})")
    if unreviewed or unknown or twice:
        print(f"{len(unreviewed)} unreviewed, {len(unknown)} unregistered, {len(twice)} in two arrays: "
              f"classify them in {TABLE.relative_to(HERE.parent)}")
        sys.exit(1)
    print("every candidate is classified")


if __name__ == "__main__":
    main()
