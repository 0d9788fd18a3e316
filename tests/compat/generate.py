#!/usr/bin/env python3
"""Writes the compatibility corpus: tests/compat/models/<name>/<version>/ and tests/compat/cases.json.

The models reproduce the shapes SavedModels take in the wild (TF1 graphs with
shapeless or wrongly declared placeholders, TF Serving's half_plus_two,
Estimator-style exports, Keras 2 and Keras 3 exports, table initializers,
several tag sets, unusual dtypes). Every expected value in cases.json comes
from TensorFlow itself: each model is loaded back from disk and its signature
run on the case's inputs.

Run with any Python 3: the script re-executes itself inside the virtual
environment of scripts/tfvenv.py (pinned TensorFlow; tf-keras is added for the
Keras 2 model). Every model is deterministic and well under 1 MB.

    python3 tests/compat/generate.py                  # every model
    python3 tests/compat/generate.py vocab_table      # only the named ones
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
MODELS = HERE / "models"
CASES_FILE = HERE / "cases.json"
sys.path.insert(0, str(HERE.parent.parent / "scripts"))
import tfvenv  # noqa: E402

TF_KERAS_PIN = "tf-keras==2.21.0"

tf = None  # bound in build_one(), inside the venv
np = None
CASES = []


def fresh(name: str, version: int = 1) -> str:
    path = MODELS / name / str(version)
    if path.parent.exists():
        shutil.rmtree(path.parent)
    path.parent.mkdir(parents=True)
    return str(path)


def tensor_info(tensor, shape="keep"):
    """A TensorInfo for `tensor`; `shape` overrides the declared shape the way
    old exporters wrote it: None gives an empty TensorShapeProto (no dims,
    unknown_rank false), a list gives those dims."""
    info = tf.compat.v1.saved_model.utils.build_tensor_info(tensor)
    if shape is None:
        info.tensor_shape.CopyFrom(tf.TensorShape([]).as_proto())
    elif shape != "keep":
        info.tensor_shape.CopyFrom(tf.TensorShape(shape).as_proto())
    return info


def signature(inputs, outputs, method="predict"):
    methods = {
        "predict": tf.compat.v1.saved_model.signature_constants.PREDICT_METHOD_NAME,
        "classify": tf.compat.v1.saved_model.signature_constants.CLASSIFY_METHOD_NAME,
        "regress": tf.compat.v1.saved_model.signature_constants.REGRESS_METHOD_NAME,
    }
    return tf.compat.v1.saved_model.signature_def_utils.build_signature_def(inputs, outputs, methods[method])


def ref_variable(value, name, **kwargs):
    """TF 1.x graphs held ref variables (VariableV2 and Assign ops), not the
    resource variables tf.compat.v1 makes by default now."""
    return tf.compat.v1.Variable(value, name=name, use_resource=False, **kwargs)


def hash_table(name):
    """A string -> int64 HashTableV2 with a fixed shared name: the lookup
    classes of TF 2 name their tables with a random UUID or the vocabulary's
    path, which would make every export differ."""
    return tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64, shared_name=f"hash_table_{name}",
                                  name=name)


def lookup(table, keys):
    """Looks `keys` up, -1 where absent."""
    return tf.raw_ops.LookupTableFindV2(table_handle=table, keys=keys, default_value=tf.constant(-1, tf.int64))


def edit_saved_model(path, edit):
    """Rewrites saved_model.pb through `edit(SavedModel proto)`, for quirks no
    current exporter writes by itself."""
    from tensorflow.core.protobuf import saved_model_pb2

    pb = pathlib.Path(path) / "saved_model.pb"
    model = saved_model_pb2.SavedModel()
    model.ParseFromString(pb.read_bytes())
    edit(model)
    pb.write_bytes(model.SerializeToString(deterministic=True))


def exporter_asset_paths(model):
    """Points the asset path constants of a TF1 export at the directory
    TF Serving's own exports name (/tmp/original/export/assets), not at this
    run's scratch directory: the loader feeds the real path at load time, and
    the export stays byte-for-byte reproducible."""
    from tensorflow.core.protobuf import meta_graph_pb2

    for meta_graph in model.meta_graphs:
        nodes = {node.name: node for node in meta_graph.graph_def.node}
        for packed in meta_graph.collection_def["saved_model_assets"].any_list.value:
            asset = meta_graph_pb2.AssetFileDef()
            packed.Unpack(asset)
            value = nodes[asset.tensor_info.name.split(":")[0]].attr["value"].tensor
            value.string_val[:] = [f"/tmp/original/export/assets/{asset.filename}".encode()]


def stable_fingerprint(path):
    """fingerprint.pb carries a random UUID per save; it is derived from the
    model's hashes instead so that re-running changes nothing."""
    from tensorflow.core.protobuf import fingerprint_pb2

    pb = pathlib.Path(path) / "fingerprint.pb"
    fingerprint = fingerprint_pb2.FingerprintDef()
    fingerprint.ParseFromString(pb.read_bytes())
    fingerprint.uuid = str(fingerprint.saved_model_checksum ^ fingerprint.checkpoint_hash)
    pb.write_bytes(fingerprint.SerializeToString(deterministic=True))


# ---------------------------------------------------------------------------
# Running the exported models back, and turning their answers into cases.


class V1Model:
    """A SavedModel loaded into a TF1 session, run by the tensor names of its
    SignatureDefs, as the C API (and so TF Serving and tfserve) runs it."""

    def __init__(self, path, tags=("serve",)):
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        with self.graph.as_default():
            meta = tf.compat.v1.saved_model.loader.load(self.session, list(tags), path)
        self.signatures = meta.signature_def

    def input_dtypes(self, name):
        return {k: tf.as_dtype(v.dtype) for k, v in self.signatures[name].inputs.items()}

    def run(self, name, feeds):
        # A callable, not Session.run: Session.run checks fed shapes against
        # the graph's static shapes, which the C API does not (half_plus_two
        # takes [N] at an Identity of static shape [-1, 1]).
        from tensorflow.core.protobuf import config_pb2

        sig = self.signatures[name]
        feed_keys, fetch_keys = sorted(feeds), sorted(sig.outputs)
        run = self.session._make_callable_from_options(config_pb2.CallableOptions(
            feed=[sig.inputs[k].name for k in feed_keys], fetch=[sig.outputs[k].name for k in fetch_keys]))
        return dict(zip(fetch_keys, run(*(feeds[k] for k in feed_keys))))


class V2Model:
    """A SavedModel loaded with tf.saved_model.load, run through its concrete
    signature functions."""

    def __init__(self, path):
        self.loaded = tf.saved_model.load(path)

    def input_dtypes(self, name):
        return {k: spec.dtype for k, spec in self.loaded.signatures[name].structured_input_signature[1].items()}

    def run(self, name, feeds):
        outputs = self.loaded.signatures[name](**{k: tf.constant(v) for k, v in feeds.items()})
        return {k: v.numpy() for k, v in outputs.items()}


def to_numpy(value, dtype):
    if dtype == tf.string:
        def encode(v):
            return [encode(x) for x in v] if isinstance(v, list) else v.encode("utf-8")
        return np.array(encode(value), dtype=object)
    return np.array(value, dtype=dtype.as_numpy_dtype)


def to_json(value):
    """A TF result as TF Serving's JSON writes it: float32 in its shortest
    round-tripping form, bytes as UTF-8 text."""
    array = np.asarray(value)
    if array.ndim:
        return [to_json(item) for item in array]
    item = array.item()
    if isinstance(item, bytes):
        return item.decode("utf-8")
    if array.dtype == np.float32:
        return float(str(array))
    return item


def csv_body(model, signature, inputs):
    """The SageMaker CSV form of a single numeric input, where one row per
    instance carries exactly that input: a rank-1 input (one value a row), or
    a rank-2 input of rows wider than one value (a one-value row reads as a
    scalar instance)."""
    if len(inputs) != 1:
        return None
    (key, value), = inputs.items()
    dtype = model.input_dtypes(signature)[key]
    if not (dtype.is_floating or dtype.is_integer) or not isinstance(value, list):
        return None
    array = np.array(value)
    if array.ndim == 1:
        return "".join(f"{v!r}\n" for v in value)
    if array.ndim == 2 and array.shape[1] > 1:
        return "".join(",".join(repr(v) for v in row) + "\n" for row in value)
    return None


def predict_case(model_name, model, name, inputs, signature="serving_default"):
    dtypes = model.input_dtypes(signature)
    outputs = model.run(signature, {k: to_numpy(v, dtypes[k]) for k, v in inputs.items()})
    case = {"name": name, "model": model_name, "signature": signature, "method": "predict",
            "inputs": inputs, "outputs": {k: to_json(v) for k, v in sorted(outputs.items())}}
    body = csv_body(model, signature, inputs)
    if body is not None:
        case["csv"] = body
    CASES.append(case)


def serialize_examples(examples):
    """tf.Examples built from REST examples as TF Serving builds them: JSON
    floats become float_list, integers int64_list, strings bytes_list."""
    serialized = []
    for example in examples:
        proto = tf.train.Example()
        for key, value in example.items():
            values = value if isinstance(value, list) else [value]
            feature = proto.features.feature[key]
            if all(isinstance(v, str) for v in values):
                feature.bytes_list.value.extend(v.encode("utf-8") for v in values)
            elif all(isinstance(v, int) for v in values):
                feature.int64_list.value.extend(values)
            else:
                feature.float_list.value.extend(values)
        serialized.append(proto.SerializeToString())
    return np.array(serialized, dtype=object)


def example_case(model_name, model, name, method, signature, examples):
    """A classify or regress case: the serialized examples fed to the
    signature's one input, the outputs laid out as TF Serving's REST API
    answers (classify: [label, score] pairs, label "" without a classes
    output; regress: one value per example)."""
    (key,) = model.input_dtypes(signature)
    outputs = model.run(signature, {key: serialize_examples(examples)})
    if method == "regress":
        results = to_json(np.reshape(outputs["outputs"], [len(examples)]))
    else:
        scores = outputs.get("scores")
        classes = outputs.get("classes")
        width = (scores if scores is not None else classes).shape[1]
        results = [[["" if classes is None else to_json(classes[i][j]),
                     0.0 if scores is None else to_json(scores[i][j])] for j in range(width)]
                   for i in range(len(examples))]
    CASES.append({"name": name, "model": model_name, "signature": signature, "method": method,
                  "examples": examples, "results": results})


# ---------------------------------------------------------------------------
# The models.


def tf1_shapeless(name="tf1_shapeless"):
    """TF1 graph whose placeholder has no shape at all, and whose SignatureDef
    declares an empty TensorShapeProto (reads as a scalar) for both input and
    output, as very old exporters wrote it. Any rank is fed through."""
    v1 = tf.compat.v1
    path = fresh(name)
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, shape=None, name="x")
        w = ref_variable(0.5, name="w")
        b = ref_variable(3.0, name="b")
        y = tf.add(w * x, b, name="y")
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(path)
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
                "serving_default": signature({"x": tensor_info(x, None)}, {"y": tensor_info(y, None)})})
            builder.save()
    model = V1Model(path)
    predict_case(name, model, "tf1_shapeless_scalar", {"x": 3.5})
    predict_case(name, model, "tf1_shapeless_rank1", {"x": [1.0, 2.0, 5.0]})
    predict_case(name, model, "tf1_shapeless_rank2", {"x": [[1.0], [2.0]]})


def tf1_wrong_shape(name="tf1_wrong_shape"):
    """Estimator-like TF1 export: the placeholder is [None] but the
    SignatureDef declares [-1, 1]; clients send [N] and TF accepts it."""
    v1 = tf.compat.v1
    path = fresh(name)
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, shape=[None], name="input_x")
        kernel = ref_variable(2.0, name="dense/kernel")
        bias = ref_variable(1.0, name="dense/bias")
        y = tf.add(x * kernel, bias, name="predictions")
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(path)
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
                "serving_default": signature({"x": tensor_info(x, [None, 1])}, {"y": tensor_info(y)})})
            builder.save()
    model = V1Model(path)
    predict_case(name, model, "tf1_wrong_shape_batch3", {"x": [1.0, 2.0, 5.0]})
    predict_case(name, model, "tf1_wrong_shape_batch1", {"x": [-4.0]})


def half_plus_two(name="half_plus_two"):
    """TF Serving's saved_model_half_plus_two_cpu/00000123, rebuilt after
    tensorflow_serving/servables/tensorflow/testdata/saved_model_half_plus_two.py
    as of TF 1.14 (the version that wrote it): a shapeless tf_example
    placeholder, a predict signature fed at an Identity inside the graph, four
    classify/regress signatures, an asset and a main op assigning its name."""
    v1 = tf.compat.v1
    path = fresh(name, 123)

    def old_add(x, y):  # tf.add and tf.multiply of TF 1.14 made Add and Mul (AddV2 came later)
        return tf.raw_ops.Add(x=x, y=y)

    def old_mul(x, y):
        return tf.raw_ops.Mul(x=x, y=y)

    graph = tf.Graph()
    with graph.as_default(), tempfile.TemporaryDirectory() as scratch:
        with tf.device("/cpu:0"):
            a = ref_variable(0.5, name="a")
            b = ref_variable(2.0, name="b")
            c = ref_variable(3.0, name="c")
            serialized = v1.placeholder(tf.string, name="tf_example")
            # TF 1.14 parsed with the first ParseExample op, whose shape
            # function gives [-1, 1] even for a shapeless input (the current
            # ParseExampleV2 leaves the rank unknown).
            _, _, _, (parsed_x, parsed_x2) = tf.raw_ops.ParseExample(
                serialized=serialized, names=tf.constant([], tf.string), sparse_keys=[],
                dense_keys=[tf.constant("x"), tf.constant("x2")],
                dense_defaults=[tf.constant([], tf.float32), tf.reshape(tf.constant([0.0]), [1])],
                sparse_types=[], dense_shapes=[[1], [1]], name="ParseExample/ParseExample")
            x = tf.identity(parsed_x, name="x")
            y = tf.identity(old_add(old_mul(a, x), b), name="y")
            y2 = tf.identity(old_add(old_mul(a, x), c), name="y2")
            x2 = tf.identity(parsed_x2, name="x2")
            a2 = ref_variable(0.5, name="a2")
            c2 = ref_variable(3.0, name="c2")
            y3 = tf.identity(old_add(old_mul(a2, x2), c2), name="y3")

        asset = pathlib.Path(scratch) / "foo.txt"
        asset.write_text("asset-file-contents")
        asset_path = tf.constant(str(asset))
        v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, asset_path)
        filename = ref_variable("foo.txt", name="filename_tensor", trainable=False, collections=[])
        assign_filename = filename.assign("foo.txt")

        def regression(inputs, outputs):
            return signature({"inputs": tensor_info(inputs)}, {"outputs": tensor_info(outputs)}, "regress")

        signatures = {
            "regress_x_to_y": regression(serialized, y),
            "regress_x_to_y2": regression(serialized, y2),
            "regress_x2_to_y3": regression(x2, y3),
            "classify_x_to_y": signature({"inputs": tensor_info(serialized)}, {"scores": tensor_info(y)},
                                         "classify"),
            "serving_default": signature({"x": tensor_info(x)}, {"y": tensor_info(y)}),
        }
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(path)
            builder.add_meta_graph_and_variables(
                session, ["serve"], signature_def_map=signatures,
                assets_collection=v1.get_collection(v1.GraphKeys.ASSET_FILEPATHS),
                main_op=tf.group(assign_filename))
            builder.save()
    edit_saved_model(path, exporter_asset_paths)
    model = V1Model(path)
    predict_case(name, model, "half_plus_two_predict_rank1", {"x": [1.0, 2.0, 5.0]})
    predict_case(name, model, "half_plus_two_predict_rank2", {"x": [[1.0], [2.0]]})
    example_case(name, model, "half_plus_two_classify", "classify", "classify_x_to_y",
                 [{"x": 1.0}, {"x": 2.0}])
    example_case(name, model, "half_plus_two_regress", "regress", "regress_x_to_y",
                 [{"x": 1.0}, {"x": 2.0}, {"x": 5.0}])
    example_case(name, model, "half_plus_two_regress_y2", "regress", "regress_x_to_y2",
                 [{"x": [4.0]}])


def half_plus_three_tf1(name="half_plus_three_tf1"):
    """The SageMaker TFS container's test model: a TF1 export of
    y = 0.5 * x + 3 whose `x` is declared with no dims (an empty
    TensorShapeProto) while its output keeps an unknown rank."""
    v1 = tf.compat.v1
    path = fresh(name, 123)
    graph = tf.Graph()
    with graph.as_default():
        a = ref_variable(0.5, name="a")
        b = ref_variable(3.0, name="b")
        x = v1.placeholder(tf.float32, name="x")
        y = tf.add(tf.multiply(a, x), b, name="y")
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(path)
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
                "serving_default": signature({"x": tensor_info(x, None)}, {"y": tensor_info(y)})})
            builder.save()
    model = V1Model(path)
    predict_case(name, model, "half_plus_three_tf1_batch3", {"x": [1.0, 2.0, 5.0]})
    predict_case(name, model, "half_plus_three_tf1_scalar", {"x": 3.5})
    predict_case(name, model, "half_plus_three_tf1_rank2", {"x": [[1.0, 2.0], [5.0, 7.0]]})


def estimator_dnn(name="estimator_dnn"):
    """What tf.estimator.DNNClassifier(label_vocabulary=["neg", "pos"]) with a
    parsing serving input receiver exported (tf.estimator is gone from TF
    2.16+, so the graph is rebuilt with tf.compat.v1 under the same names):
    serialized tf.Examples in `input_example_tensor`, a numeric feature `x`, a
    vocabulary-list feature `color`, and the head's four signatures."""
    v1 = tf.compat.v1
    path = fresh(name)
    rng = np.random.RandomState(5)
    graph = tf.Graph()
    # Ref variables throughout, global_step included, as TF 1.x Estimators had.
    with graph.as_default(), v1.variable_scope(v1.get_variable_scope(), use_resource=False):
        global_step = v1.train.get_or_create_global_step()
        serialized = v1.placeholder(tf.string, [None], name="input_example_tensor")
        features = v1.parse_example(serialized, {
            "color": v1.VarLenFeature(tf.string),
            "x": v1.FixedLenFeature([1], tf.float32),
        })
        with v1.variable_scope("dnn/input_from_feature_columns/input_layer"):
            with v1.variable_scope("color_embedding"):
                table = hash_table("color_vocabulary")
                v1.add_to_collection(v1.GraphKeys.TABLE_INITIALIZERS, tf.raw_ops.InitializeTableV2(
                    table_handle=table, keys=tf.constant(["red", "green", "blue"]),
                    values=tf.constant([0, 1, 2], tf.int64)))
                color = features["color"]
                ids = tf.SparseTensor(color.indices, lookup(table, color.values), color.dense_shape)
                embedding = v1.get_variable(
                    "embedding_weights", initializer=rng.normal(0, 0.7, [3, 2]).astype(np.float32))
                # Unknown colors map to -1 and are pruned; an example without
                # a color gets a zero embedding, as feature columns do.
                color_embedding = v1.nn.safe_embedding_lookup_sparse(embedding, ids, combiner="mean")
            input_layer = tf.concat([color_embedding, features["x"]], axis=1)
        with v1.variable_scope("dnn/hiddenlayer_0"):
            kernel = v1.get_variable("kernel", initializer=rng.normal(0, 0.8, [3, 3]).astype(np.float32))
            bias = v1.get_variable("bias", initializer=rng.normal(0, 0.1, [3]).astype(np.float32))
            hidden = tf.nn.relu(tf.matmul(input_layer, kernel) + bias)
        with v1.variable_scope("dnn/logits"):
            kernel = v1.get_variable("kernel", initializer=rng.normal(0, 0.8, [3, 1]).astype(np.float32))
            bias = v1.get_variable("bias", initializer=np.array([-0.1], np.float32))
            logits = tf.matmul(hidden, kernel) + bias
        with tf.name_scope("head"):
            logistic = tf.sigmoid(logits, name="logistic")
            probabilities = tf.concat([1.0 - logistic, logistic], axis=1, name="probabilities")
            class_ids = tf.expand_dims(tf.argmax(probabilities, axis=1), -1, name="class_ids")
            labels = tf.constant(["neg", "pos"])
            classes = tf.gather(labels, class_ids, name="str_classes")
            batch = tf.shape(probabilities)[0]
            all_class_ids = tf.tile(tf.constant([[0, 1]]), [batch, 1], name="all_class_ids")
            all_classes = tf.tile(tf.expand_dims(labels, 0), [batch, 1], name="all_classes")

        classification = signature(
            {"inputs": tensor_info(serialized)},
            {"classes": tensor_info(all_classes), "scores": tensor_info(probabilities)}, "classify")
        signatures = {
            "serving_default": classification,
            "classification": classification,
            "regression": signature({"inputs": tensor_info(serialized)}, {"outputs": tensor_info(logistic)},
                                    "regress"),
            "predict": signature({"examples": tensor_info(serialized)}, {
                "logits": tensor_info(logits), "logistic": tensor_info(logistic),
                "probabilities": tensor_info(probabilities), "class_ids": tensor_info(class_ids),
                "classes": tensor_info(classes), "all_class_ids": tensor_info(all_class_ids),
                "all_classes": tensor_info(all_classes)}),
        }
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            session.run(global_step.assign(1000))
            builder = v1.saved_model.Builder(path)
            builder.add_meta_graph_and_variables(
                session, ["serve"], signature_def_map=signatures, clear_devices=True,
                main_op=tf.group(v1.local_variables_initializer(), v1.tables_initializer()))
            builder.save()
    model = V1Model(path)
    examples = [{"x": 1.0, "color": "red"}, {"x": -2.0, "color": "blue"}, {"x": 0.5, "color": "purple"},
                {"x": [3.0]}]
    example_case(name, model, "estimator_dnn_classify_default", "classify", "serving_default", examples)
    example_case(name, model, "estimator_dnn_classify_batch1", "classify", "classification",
                 [{"x": 0.25, "color": "green"}])
    example_case(name, model, "estimator_dnn_regress", "regress", "regression", examples[:3])


def vocab_table(name="vocab_table"):
    """A vocabulary asset read by a text-file table initializer that runs in a
    `legacy_init_op`, the init-op collection of TF 1.x before main_op (the
    loader still honours it when nothing newer is there)."""
    v1 = tf.compat.v1
    path = fresh(name)
    graph = tf.Graph()
    with graph.as_default(), tempfile.TemporaryDirectory() as scratch:
        vocabulary = pathlib.Path(scratch) / "vocab.txt"
        vocabulary.write_text("apple\nbanana\ncherry\ncafé\n", encoding="utf-8")
        word = v1.placeholder(tf.string, [None], name="word")
        table = hash_table("vocab")
        vocabulary_path = tf.constant(str(vocabulary), name="vocab_path")
        v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, vocabulary_path)
        # Whole line -> line number, as index_table_from_file initialised it.
        v1.add_to_collection(v1.GraphKeys.TABLE_INITIALIZERS, tf.raw_ops.InitializeTableFromTextFileV2(
            table_handle=table, filename=vocabulary_path, key_index=-2, value_index=-1))
        ids = tf.identity(lookup(table, word), name="id")
        # Slot 0 is the score of an unknown word.
        scores = ref_variable([-1.0, 0.9, 0.5, 0.25, 0.75], name="word_scores")
        score = tf.gather(scores, ids + 1, name="score")
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(path)
            builder.add_meta_graph_and_variables(
                session, ["serve"],
                signature_def_map={"serving_default": signature(
                    {"word": tensor_info(word)}, {"id": tensor_info(ids), "score": tensor_info(score)})},
                assets_collection=v1.get_collection(v1.GraphKeys.ASSET_FILEPATHS),
                legacy_init_op=v1.tables_initializer(name="legacy_init_op"))
            builder.save()

    def to_legacy_init_op(model):
        exporter_asset_paths(model)
        # Builder.add_meta_graph_and_variables(legacy_init_op=...) now files
        # the op under saved_model_main_op; TF 1.x put it here.
        for meta_graph in model.meta_graphs:
            collections = meta_graph.collection_def
            if "saved_model_main_op" in collections:
                collections["legacy_init_op"].CopyFrom(collections["saved_model_main_op"])
                del collections["saved_model_main_op"]

    edit_saved_model(path, to_legacy_init_op)
    model = V1Model(path)
    predict_case(name, model, "vocab_table_known_and_unknown", {"word": ["banana", "zebra", "apple", "café"]})
    predict_case(name, model, "vocab_table_batch1", {"word": ["cherry"]})


def keras2_mlp(name="keras2_mlp"):
    """A Keras 2 (tf_keras) functional model saved with
    model.save(save_format="tf"): named input `features`, output keyed by the
    last layer's name, keras_metadata.pb alongside."""
    try:
        import tf_keras
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", TF_KERAS_PIN],
                       check=True)
        import tf_keras

    rng = np.random.RandomState(17)
    inputs = tf_keras.Input(shape=(4,), name="features")
    hidden = tf_keras.layers.Dense(8, activation="relu", name="hidden")(inputs)
    outputs = tf_keras.layers.Dense(3, activation="softmax", name="probabilities")(hidden)
    model = tf_keras.Model(inputs, outputs, name="mlp")
    model.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])
    path = fresh(name)
    model.save(path, save_format="tf", include_optimizer=False)
    stable_fingerprint(path)
    loaded = V2Model(path)
    predict_case(name, loaded, "keras2_mlp_batch1", {"features": [[0.5, -1.0, 2.0, 0.0]]})
    predict_case(name, loaded, "keras2_mlp_batch3",
                 {"features": [[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0], [-1.5, 0.25, 0.75, -2.0]]})


def keras3_export(name="keras3_export"):
    """A Keras 3 model written by model.export(): signatures `serve` and
    `serving_default`, with the input key Keras derives (`keras_tensor...`)
    rather than a name the user chose."""
    import keras
    from keras.src.export import saved_model_export_archive as archive

    # Keras gathers the exported variables through an identity set, so their
    # order, and with it the bytes of the export, would change from run to run.
    collect = archive._list_variables_used_by_fns
    archive._list_variables_used_by_fns = lambda fns: tuple(
        sorted(found, key=lambda v: v.name) for found in collect(fns))

    rng = np.random.RandomState(23)
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(4, activation="tanh", name="hidden"),
                              keras.layers.Dense(2, name="logits")], name="regressor")
    model.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])
    path = fresh(name)
    model.export(path, verbose=False)
    stable_fingerprint(path)
    loaded = V2Model(path)
    (key,) = loaded.input_dtypes("serving_default")
    predict_case(name, loaded, "keras3_export_batch1", {key: [[0.1, 0.2, 0.3]]})
    predict_case(name, loaded, "keras3_export_batch2", {key: [[1.0, -1.0, 0.5], [2.0, 0.0, -3.0]]})
    (key,) = loaded.input_dtypes("serve")
    predict_case(name, loaded, "keras3_export_serve_signature", {key: [[1.0, -1.0, 0.5]]}, signature="serve")


def module_multi_sig(name="module_multi_sig"):
    """A tf.Module with three signatures: a [None, None] input, a rank-0
    input next to a rank-1 one, and two string inputs."""
    class MultiSignature(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="x")])
        def doubled_sum(self, x):
            return {"doubled_sum": 2.0 * tf.reduce_sum(x, axis=-1)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x"),
                                      tf.TensorSpec([], tf.float32, name="factor")])
        def scale(self, x, factor):
            return {"scaled": x * factor}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="a"),
                                      tf.TensorSpec([None], tf.string, name="b")])
        def concat_strings(self, a, b):
            return {"joined": tf.strings.join([a, b], separator="-")}

    module = MultiSignature()
    path = fresh(name)
    tf.saved_model.save(module, path, signatures={
        "serving_default": module.doubled_sum, "scale": module.scale, "concat_strings": module.concat_strings})
    stable_fingerprint(path)
    model = V2Model(path)
    predict_case(name, model, "module_multi_sig_default_2x3", {"x": [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]]})
    predict_case(name, model, "module_multi_sig_default_1x1", {"x": [[4.0]]})
    predict_case(name, model, "module_multi_sig_scale", {"x": [1.0, 2.0, -3.0], "factor": 2.5}, signature="scale")
    predict_case(name, model, "module_multi_sig_concat_strings",
                 {"a": ["left", "héllo", ""], "b": ["right", "wörld", "x"]}, signature="concat_strings")


def tf2_examples(name="tf2_examples"):
    """A TF2 tf.Module whose signatures take serialized tf.Examples and answer
    in classify and regress layout; TF2 writes the predict method_name on
    every signature, so only their structure says what they are."""
    features = {"x": tf.io.FixedLenFeature([1], tf.float32)}

    class ExampleModel(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def classify(self, inputs):
            x = tf.io.parse_example(inputs, features)["x"]
            pos = tf.sigmoid(2.0 * x - 1.0)
            scores = tf.concat([1.0 - pos, pos], axis=1)
            classes = tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(x)[0], 1])
            return {"classes": classes, "scores": scores}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def regress(self, inputs):
            x = tf.io.parse_example(inputs, features)["x"]
            return {"outputs": 2.0 * x + 1.0}

    module = ExampleModel()
    path = fresh(name)
    tf.saved_model.save(module, path, signatures={"serving_default": module.classify, "regress": module.regress})
    stable_fingerprint(path)
    model = V2Model(path)
    example_case(name, model, "tf2_examples_classify", "classify", "serving_default",
                 [{"x": 0.25}, {"x": 2.0}, {"x": -1.5}])
    example_case(name, model, "tf2_examples_regress", "regress", "regress", [{"x": 1.5}, {"x": -2.0}])


def multi_tag(name="multi_tag"):
    """Two MetaGraphs in one SavedModel, {"train"} first and {"serve"} second,
    each with a `serving_default` of its own: only the serve one answers
    y = 3x - 1. Resource variables, as tf.compat.v1 of TF 2.x writes them."""
    v1 = tf.compat.v1
    path = fresh(name)
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None], name="x")
        w = v1.Variable(3.0, name="w")
        b = v1.Variable(-1.0, name="b")
        y = tf.add(w * x, b, name="y")
        y_train = tf.add(y, 100.0, name="y_train")
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(path)
            builder.add_meta_graph_and_variables(session, ["train"], signature_def_map={
                "serving_default": signature({"x": tensor_info(x)}, {"y": tensor_info(y_train)}),
                "train_only": signature({"x": tensor_info(x)}, {"y": tensor_info(y_train)})})
            builder.add_meta_graph(["serve"], signature_def_map={
                "serving_default": signature({"x": tensor_info(x)}, {"y": tensor_info(y)})})
            builder.save()
    model = V1Model(path, tags=("serve",))
    predict_case(name, model, "multi_tag_serve_batch2", {"x": [1.0, 2.0]})
    predict_case(name, model, "multi_tag_serve_batch1", {"x": [0.5]})


def dtypes_zoo(name="dtypes_zoo"):
    """One signature taking int8, uint8, int16, int64, bool and string
    inputs, with outputs that each depend on one of them (uint8 doubling
    wraps around; string length counts UTF-8 bytes)."""
    class DtypesZoo(tf.Module):
        @tf.function(input_signature=[
            tf.TensorSpec([None], tf.int8, name="i8"),
            tf.TensorSpec([None], tf.uint8, name="u8"),
            tf.TensorSpec([None], tf.int16, name="i16"),
            tf.TensorSpec([None], tf.int64, name="i64"),
            tf.TensorSpec([None], tf.bool, name="flag"),
            tf.TensorSpec([None], tf.string, name="text"),
        ])
        def serve(self, i8, u8, i16, i64, flag, text):
            total = (tf.cast(i8, tf.float32) + tf.cast(u8, tf.float32) + tf.cast(i16, tf.float32)
                     + tf.cast(i64, tf.float32))
            return {
                "sum": total,
                "u8_doubled": u8 * tf.constant(2, tf.uint8),
                "i8_negated": -i8,
                "i16_halved": i16 // 2,
                "i64_plus_one": i64 + 1,
                "not_flag": tf.logical_not(flag),
                "text_length": tf.strings.length(text),
                "text_upper": tf.strings.upper(text),
            }

    module = DtypesZoo()
    path = fresh(name)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    stable_fingerprint(path)
    model = V2Model(path)
    predict_case(name, model, "dtypes_zoo_batch1",
                 {"i8": [-5], "u8": [200], "i16": [-300], "i64": [5000000000], "flag": [True], "text": ["abc"]})
    predict_case(name, model, "dtypes_zoo_batch2",
                 {"i8": [127, -128], "u8": [0, 255], "i16": [32767, 7], "i64": [-1, 41], "flag": [False, True],
                  "text": ["héllo", ""]})


BUILDERS = (tf1_shapeless, tf1_wrong_shape, half_plus_two, half_plus_three_tf1, estimator_dnn, vocab_table,
            keras2_mlp, keras3_export, module_multi_sig, tf2_examples, multi_tag, dtypes_zoo)


def build_one(name: str, cases_out: str) -> None:
    """Builds one model in this process and writes its cases to `cases_out`."""
    global tf, np
    import numpy
    import tensorflow

    tf, np = tensorflow, numpy
    tf.get_logger().setLevel("ERROR")  # tf.compat.v1 deprecation notices
    {b.__name__: b for b in BUILDERS}[name]()
    pathlib.Path(cases_out).write_text(json.dumps(CASES), encoding="utf-8")


def main() -> None:
    """Writes every model, or only those named on the command line, and
    rewrites their cases in cases.json (other models' cases are kept).

    Each model is built in a process of its own: TF function names and Keras
    layer names carry process-wide counters, so a model built after others
    would differ from the same model built alone."""
    tfvenv.ensure(__file__)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if sys.argv[1:2] == ["--one"]:
        build_one(sys.argv[2], sys.argv[3])
        return
    wanted = set(sys.argv[1:])
    unknown = wanted - {b.__name__ for b in BUILDERS}
    if unknown:
        sys.exit(f"unknown models: {', '.join(sorted(unknown))}")
    built, new_cases = set(), []
    with tempfile.TemporaryDirectory() as scratch:
        for build in BUILDERS:
            name = build.__name__
            if wanted and name not in wanted:
                continue
            cases_out = os.path.join(scratch, f"{name}.json")
            subprocess.run([sys.executable, __file__, "--one", name, cases_out], check=True)
            new_cases += json.loads(pathlib.Path(cases_out).read_text(encoding="utf-8"))
            built.add(name)
            print(f"wrote {name}", flush=True)
    kept = []
    if wanted and CASES_FILE.exists():
        kept = [c for c in json.loads(CASES_FILE.read_text(encoding="utf-8")) if c["model"] not in built]
    order = {b.__name__: i for i, b in enumerate(BUILDERS)}
    cases = sorted(kept + new_cases, key=lambda c: order.get(c["model"], len(order)))
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    CASES_FILE.write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {CASES_FILE.relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
    main()
