#!/usr/bin/env python3
"""Writes the access corpus: tests/access/models/<name>/1/.

Small TF2 SavedModels whose `serving_default` signature reaches outside the
request (reads, lists or writes files, opens a summary writer, prints to a
file, runs an opaque XlaCallModule), and one `benign` model that only looks
like it might (a table read from an asset by the init op, tf.print to
stderr). They are fixtures for the load-time audit that refuses the former.

Every model is loaded back from disk and run once: the generator checks that
it does what it says (reads /etc/hostname, lists /etc/host*, writes under a
scratch directory, ...) and that its signature holds the ops it should (the
benign one none that touches a file).

Run with any Python 3: the script re-executes itself inside the virtual
environment of scripts/tfvenv.py (pinned TensorFlow). `jax_export` is built
in a second environment of its own in the same cache (the same TensorFlow plus
a pinned JAX, for jax2tf), created on first use, so that JAX's numpy and
ml_dtypes never reach the other models. Every model is deterministic and a
few KB.

    python3 tests/access/generate.py              # every model
    python3 tests/access/generate.py read_file    # only the named ones
    python3 tests/access/generate.py --show       # print the committed models' signatures and ops
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
MODELS = HERE / "models"
sys.path.insert(0, str(HERE.parent.parent / "scripts"))
import tfvenv  # noqa: E402

JAX_PINS = ("jax==0.10.2", "jaxlib==0.10.2")

# Where print_to_file's tf.print writes: a fixed path, as a model in the wild
# would carry one.
PRINT_FILE = "/tmp/tfserve-print-to-file.txt"

# Op types that reach a file (or other state outside the request) when a
# signature runs; the benign model must hold none of them.
FILE_OPS = {"ReadFile", "WriteFile", "MatchingFiles", "TextLineDataset", "TFRecordDataset",
            "FixedLengthRecordDatasetV2", "CreateSummaryFileWriter", "CreateSummaryDbWriter", "SummaryWriter",
            "WriteScalarSummary", "XlaCallModule", "Save", "SaveV2", "RestoreV2", "ImmutableConst",
            "InitializeTableFromTextFile", "InitializeTableFromTextFileV2"}

tf = None  # bound in build_one(), inside the venv
np = None


def jax_venv() -> pathlib.Path:
    return tfvenv.cache_root() / "gen-jax-venv"


def jax_python() -> str:
    """The Python of the JAX environment, created (TensorFlow from the same
    pin and wheel cache as scripts/tfvenv.py, JAX pinned) on first use."""
    python = jax_venv() / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(jax_venv())], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--find-links", str(tfvenv.cache_root() / "wheels"), tfvenv.TF_PIN, *JAX_PINS], check=True)
    return str(python)


def fresh(name: str, version: int = 1) -> str:
    path = MODELS / name / str(version)
    if path.parent.exists():
        shutil.rmtree(path.parent)
    path.parent.mkdir(parents=True)
    return str(path)


def stable_fingerprint(path):
    """fingerprint.pb carries a random UUID per save; it is derived from the
    model's hashes instead so that re-running changes nothing."""
    from tensorflow.core.protobuf import fingerprint_pb2

    pb = pathlib.Path(path) / "fingerprint.pb"
    fingerprint = fingerprint_pb2.FingerprintDef()
    fingerprint.ParseFromString(pb.read_bytes())
    fingerprint.uuid = str(fingerprint.saved_model_checksum ^ fingerprint.checkpoint_hash)
    pb.write_bytes(fingerprint.SerializeToString(deterministic=True))


def save(module, name):
    path = fresh(name)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    stable_fingerprint(path)
    return path


# ---------------------------------------------------------------------------
# Reading a model back: its signature, the ops that signature reaches, and
# running it the two ways a server does.


def load_meta_graph(path):
    from tensorflow.core.protobuf import saved_model_pb2

    model = saved_model_pb2.SavedModel()
    model.ParseFromString((pathlib.Path(path) / "saved_model.pb").read_bytes())
    (meta,) = [m for m in model.meta_graphs if "serve" in m.meta_info_def.tags]
    return meta


def signature_ops(path, signature="serving_default"):
    """What running `signature` can execute: the graph nodes its outputs
    depend on, and every library function those call (through a function
    attr, a list of them, or an op named after a function), recursively.
    Returns ({function name: sorted op types}, {graph node op types},
    [the PrintV2 output streams met])."""
    meta = load_meta_graph(path)
    sig = meta.signature_def[signature]
    nodes = {node.name: node for node in meta.graph_def.node}
    library = {f.signature.name: f for f in meta.graph_def.library.function}
    functions, graph_ops, streams = {}, set(), []

    def visit(node, into):
        into.add(node.op)
        if node.op == "PrintV2":
            # The export strips attrs left at their default, "stderr".
            streams.append(node.attr["output_stream"].s.decode() if "output_stream" in node.attr else "stderr")
        if node.op in library:
            walk(node.op)
        for attr in node.attr.values():
            if attr.HasField("func"):
                walk(attr.func.name)
            if attr.HasField("list"):
                for func in attr.list.func:
                    walk(func.name)

    def walk(name):
        if name in functions or name not in library:
            return
        functions[name] = set()
        for node in library[name].node_def:
            visit(node, functions[name])

    stack, seen = [info.name.split(":")[0] for info in sig.outputs.values()], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        visit(nodes[name], graph_ops)
        stack += [i.lstrip("^").split(":")[0] for i in nodes[name].input]
    return {k: sorted(v) for k, v in functions.items()}, graph_ops, streams


def all_ops(path):
    functions, graph_ops, _ = signature_ops(path)
    return set().union(graph_ops, *functions.values())


def describe(path):
    """The serve MetaGraph's signatures as `saved_model_cli show --all`
    prints them, then the ops `serving_default` reaches."""
    from tensorflow.core.framework import types_pb2

    def shape(info):
        proto = info.tensor_shape
        if proto.unknown_rank:
            return "unknown_rank"
        return "(" + ", ".join(str(d.size) for d in proto.dim) + ")"

    meta = load_meta_graph(path)
    lines = [f"MetaGraphDef with tag-set: '{', '.join(meta.meta_info_def.tags)}'"]
    for key, sig in sorted(meta.signature_def.items()):
        lines.append(f"  signature_def['{key}']: method_name {sig.method_name}")
        for title, infos in (("inputs", sig.inputs), ("outputs", sig.outputs)):
            for k, info in sorted(infos.items()):
                dtype = types_pb2.DataType.Name(info.dtype)
                lines.append(f"    {title}['{k}']: dtype {dtype} shape {shape(info)} name {info.name}")
    functions, graph_ops, streams = signature_ops(path)
    lines.append(f"  serving_default graph nodes: {', '.join(sorted(graph_ops))}")
    for name, ops in sorted(functions.items()):
        lines.append(f"  function {name}: {', '.join(ops)}")
    if streams:
        lines.append(f"  PrintV2 output_stream: {', '.join(streams)}")
    size = sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file())
    lines.append(f"  {size} bytes on disk")
    return "\n".join(lines)


def run_v2(path, /, **inputs):
    """tf.saved_model.load and the concrete signature function."""
    loaded = tf.saved_model.load(path)
    outputs = loaded.signatures["serving_default"](**{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


def run_v1(path, /, **inputs):
    """A TF1 session over the serve MetaGraph, fed and fetched by the tensor
    names of the SignatureDef, as the C API (and so tfserve) runs it: the
    load runs the init op (table initializers) once, the signature after."""
    from tensorflow.core.protobuf import config_pb2

    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    with graph.as_default():
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
    sig = meta.signature_def["serving_default"]
    feed_keys, fetch_keys = sorted(inputs), sorted(sig.outputs)
    run = session._make_callable_from_options(config_pb2.CallableOptions(
        feed=[sig.inputs[k].name for k in feed_keys], fetch=[sig.outputs[k].name for k in fetch_keys]))
    feeds = [np.array(inputs[k], dtype=object if isinstance(np.asarray(inputs[k]).flat[0], (str, bytes)) else
                      np.float32) for k in feed_keys]
    return dict(zip(fetch_keys, run(*feeds)))


def both_ways(path, /, **inputs):
    """Runs the signature through both loaders and returns the two answers."""
    return run_v2(path, **inputs), run_v1(path, **inputs)


def expect_ops(path, *wanted):
    ops = all_ops(path)
    missing = set(wanted) - ops
    assert not missing, f"{path}: serving_default lacks {sorted(missing)} (has {sorted(ops)})"


# ---------------------------------------------------------------------------
# The models.


def read_file(name="read_file"):
    """The request names a file; the answer is its contents (ReadFile)."""
    class ReadFile(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.string, name="path")])
        def serve(self, path):
            return {"contents": tf.io.read_file(path)}

    path = save(ReadFile(), name)
    expect_ops(path, "ReadFile")
    expected = pathlib.Path("/etc/hostname").read_bytes()
    for outputs in both_ways(path, path="/etc/hostname"):
        assert outputs["contents"] == expected, outputs


def list_files(name="list_files"):
    """The request holds a glob; the answer lists what matches (MatchingFiles)."""
    class ListFiles(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.string, name="pattern")])
        def serve(self, pattern):
            return {"names": tf.io.matching_files(pattern)}

    path = save(ListFiles(), name)
    expect_ops(path, "MatchingFiles")
    import glob

    expected = sorted(glob.glob("/etc/host*"))
    assert expected
    for outputs in both_ways(path, pattern="/etc/host*"):
        assert sorted(n.decode() for n in outputs["names"]) == expected, outputs


def write_file(name="write_file"):
    """Writes the request's `contents` to the request's `path` (WriteFile),
    answering the path; the write is a control dependency of the output."""
    class WriteFile(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.string, name="path"),
                                      tf.TensorSpec([], tf.string, name="contents")])
        def serve(self, path, contents):
            write = tf.io.write_file(path, contents)
            with tf.control_dependencies([write]):
                return {"written": tf.identity(path)}

    path = save(WriteFile(), name)
    expect_ops(path, "WriteFile")
    with tempfile.TemporaryDirectory() as scratch:
        for way, run in (("v2", run_v2), ("v1", run_v1)):
            target = os.path.join(scratch, f"written-{way}.txt")
            outputs = run(path, path=target, contents=f"written by {way}")
            assert outputs["written"] == target.encode(), outputs
            assert pathlib.Path(target).read_text() == f"written by {way}"


def read_lines(name="read_lines"):
    """The first line of the file the request names, through a tf.data
    pipeline (TextLineDataset, TakeDataset, DatasetToSingleElement)."""
    class ReadLines(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.string, name="path")])
        def serve(self, path):
            return {"first_line": tf.data.TextLineDataset(path).take(1).get_single_element()}

    path = save(ReadLines(), name)
    expect_ops(path, "TextLineDataset")
    expected = pathlib.Path("/etc/hostname").read_text().splitlines()[0].encode()
    for outputs in both_ways(path, path="/etc/hostname"):
        assert outputs["first_line"] == expected, outputs


def summary_writer(name="summary_writer"):
    """Opens an event file in the request's `logdir` and writes the sum of
    `x` there as a scalar summary, answering y = x. tf.summary's
    create_file_writer() refuses a logdir computed inside a tf.function (it
    lifts the writer out of the function), so the function holds the ops it
    would have made: SummaryWriter, CreateSummaryFileWriter,
    WriteScalarSummary, FlushSummaryWriter; CloseSummaryWriter at the end
    lets the next request open a writer in its own logdir."""
    class SummaryWriter(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.string, name="logdir"),
                                      tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, logdir, x):
            writer = tf.raw_ops.SummaryWriter(shared_name="tfserve_access_summary_writer")
            create = tf.raw_ops.CreateSummaryFileWriter(writer=writer, logdir=logdir, max_queue=tf.constant(10),
                                                        flush_millis=tf.constant(0), filename_suffix=".v2")
            with tf.control_dependencies([create]):
                write = tf.raw_ops.WriteScalarSummary(writer=writer, step=tf.constant(0, tf.int64),
                                                      tag="x_sum", value=tf.reduce_sum(x))
            with tf.control_dependencies([write]):
                flush = tf.raw_ops.FlushSummaryWriter(writer=writer)
            with tf.control_dependencies([flush]):
                close = tf.raw_ops.CloseSummaryWriter(writer=writer)
            with tf.control_dependencies([close]):
                return {"y": tf.identity(x)}

    path = save(SummaryWriter(), name)
    expect_ops(path, "SummaryWriter", "CreateSummaryFileWriter", "WriteScalarSummary")
    with tempfile.TemporaryDirectory() as scratch:
        for way, run in (("v2", run_v2), ("v1", run_v1)):
            logdir = os.path.join(scratch, way)
            outputs = run(path, logdir=logdir, x=[1.0, 2.5])
            assert outputs["y"].tolist() == [1.0, 2.5], outputs
            (events,) = pathlib.Path(logdir).glob("events.out.tfevents.*")
            values = [value.simple_value if value.HasField("simple_value") else tf.make_ndarray(value.tensor)
                      for event in tf.compat.v1.train.summary_iterator(str(events))
                      for value in event.summary.value if value.tag == "x_sum"]
            assert values == [3.5], values


def print_to_file(name="print_to_file"):
    """tf.print of `x` to a fixed file, PRINT_FILE (PrintV2 with
    output_stream file://...), answering y = x + 1."""
    class PrintToFile(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            tf.print(x, output_stream=f"file://{PRINT_FILE}")
            return {"y": x + 1.0}

    path = save(PrintToFile(), name)
    expect_ops(path, "PrintV2")
    assert signature_ops(path)[2] == [f"file://{PRINT_FILE}"]
    for value in (1.5, -7.25):
        pathlib.Path(PRINT_FILE).unlink(missing_ok=True)
        for outputs in both_ways(path, x=[value, 2.0]):
            assert outputs["y"].tolist() == [value + 1.0, 3.0], outputs
        assert pathlib.Path(PRINT_FILE).read_text() == f"[{value} 2]\n" * 2, pathlib.Path(PRINT_FILE).read_text()
    pathlib.Path(PRINT_FILE).unlink()


def benign(name="benign"):
    """Looks like the others and is not: a StaticHashTable filled from the
    asset vocab.txt (whole line -> line number) by the load's init op, so
    the signature only holds LookupTableFindV2 on the table's handle, and a
    tf.print of `x` to stderr. Answers ids (-1 for an unknown word) and
    y = 2x."""
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        # The table's shared name carries the vocabulary's path as given:
        # a relative one keeps the export free of this run's scratch path.
        os.chdir(scratch)
        try:
            pathlib.Path("vocab.txt").write_text("apple\nbanana\ncherry\ndate\n", encoding="utf-8")

            class Benign(tf.Module):
                def __init__(self):
                    super().__init__()
                    self.table = tf.lookup.StaticHashTable(
                        tf.lookup.TextFileInitializer("vocab.txt", tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                                                      tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER),
                        default_value=tf.constant(-1, tf.int64))

                @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                                              tf.TensorSpec([None], tf.float32, name="x")])
                def serve(self, text, x):
                    tf.print(x)
                    return {"ids": self.table.lookup(text), "y": x * 2.0}

            path = save(Benign(), name)
        finally:
            os.chdir(cwd)
    assert (pathlib.Path(path) / "assets" / "vocab.txt").read_text() == "apple\nbanana\ncherry\ndate\n"
    ops = all_ops(path)
    assert "LookupTableFindV2" in ops and "PrintV2" in ops, ops
    assert not ops & FILE_OPS, ops & FILE_OPS
    assert signature_ops(path)[2] == ["stderr"]
    for outputs in both_ways(path, text=["cherry", "zebra", "apple"], x=[1.0, -2.0]):
        assert outputs["ids"].tolist() == [2, -1, 0], outputs
        assert outputs["y"].tolist() == [2.0, -4.0], outputs


def jax_export(name="jax_export"):
    """y = 2x + 1 written in JAX and converted with jax2tf (native
    serialization, platforms ['cpu']): the signature's one op of substance is
    XlaCallModule, a StableHLO module that TensorFlow runs without its ops
    being seen. Built in the JAX environment (see jax_python())."""
    import jax
    from jax.experimental import jax2tf

    # The StableHLO module carries source locations; without their file
    # names (this script's path, autograph's temporary file) the export is
    # the same wherever and whenever it is built.
    jax.config.update("jax_hlo_source_file_canonicalization_regex", ".*")
    converted = jax2tf.convert(lambda x: 2.0 * x + 1.0, native_serialization_platforms=("cpu",),
                               polymorphic_shapes=["(b,)"])

    class JaxExport(tf.Module):
        @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            return {"y": converted(x)}

    path = save(JaxExport(), name)
    expect_ops(path, "XlaCallModule")
    for outputs in both_ways(path, x=[1.0, -0.5, 3.0]):
        assert outputs["y"].tolist() == [3.0, 0.0, 7.0], outputs
    print(f"jax {jax.__version__}", flush=True)


BUILDERS = (read_file, list_files, write_file, read_lines, summary_writer, print_to_file, benign, jax_export)
NEEDS_JAX = {"jax_export"}


def build_one(name: str) -> None:
    """Builds and checks one model in this process."""
    global tf, np
    import numpy
    import tensorflow

    tf, np = tensorflow, numpy
    tf.get_logger().setLevel("ERROR")
    {b.__name__: b for b in BUILDERS}[name]()
    print(describe(str(MODELS / name / "1")), flush=True)


def show() -> None:
    global tf, np
    import numpy
    import tensorflow

    tf, np = tensorflow, numpy
    for build in BUILDERS:
        path = MODELS / build.__name__ / "1"
        if path.exists():
            print(f"== {build.__name__}\n{describe(str(path))}")


def main() -> None:
    """Writes every model, or only those named on the command line.

    Each model is built in a process of its own: TF function names carry
    process-wide counters, so a model built after others would differ from
    the same model built alone."""
    if pathlib.Path(sys.prefix).resolve() != jax_venv().resolve():
        tfvenv.ensure(__file__)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if sys.argv[1:2] == ["--one"]:
        build_one(sys.argv[2])
        return
    if sys.argv[1:2] == ["--show"]:
        show()
        return
    wanted = set(sys.argv[1:])
    unknown = wanted - {b.__name__ for b in BUILDERS}
    if unknown:
        sys.exit(f"unknown models: {', '.join(sorted(unknown))}")
    for build in BUILDERS:
        name = build.__name__
        if wanted and name not in wanted:
            continue
        python = jax_python() if name in NEEDS_JAX else sys.executable
        subprocess.run([python, __file__, "--one", name], check=True)
        print(f"wrote {name}", flush=True)


if __name__ == "__main__":
    main()
