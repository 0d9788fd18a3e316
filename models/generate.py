#!/usr/bin/env python3
"""Writes the example SavedModels under models/<name>/<version>/.

Run with any Python 3: the script re-executes itself inside a virtual
environment (created in the tfserve cache) that has the pinned TensorFlow.
Every model is deterministic and well under 1 MB; the outputs are committed.

    python3 models/generate.py            # every model
    python3 models/generate.py adder      # only the named ones
"""
import os
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))
import tfvenv  # noqa: E402


def fresh(name: str, version: int) -> str:
    path = HERE / name / str(version)
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def half_plus_three(tf):
    class HalfPlusThree(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            return {"y": 0.5 * x + 3.0}

    module = HalfPlusThree()
    tf.saved_model.save(module, fresh("half_plus_three", 1), signatures={"serving_default": module.serve})


def warmup_requests(tf):
    """half_plus_three ships TF Serving's warm-up file, written with TF Serving's
    own protos (tensorflow-serving-api, installed without its dependencies)."""
    import subprocess

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                    "tensorflow-serving-api==2.21.0"], check=True)
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    path = HERE / "half_plus_three" / "1" / "assets.extra" / "tf_serving_warmup_requests"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for batch in ([1.0], [1.0, 2.0, 3.0]):
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name="half_plus_three", signature_name="serving_default"),
                inputs={"x": tf.make_tensor_proto(batch, dtype=tf.float32)},
            )
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def adder(tf):
    """Two versions of one model that differ in their output, for version routing."""
    for version in (1, 2):
        class Adder(tf.Module):
            @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
            def serve(self, x, _v=float(version)):
                return {"y": x + _v}

        module = Adder()
        tf.saved_model.save(module, fresh("adder", version), signatures={"serving_default": module.serve})


def multi_io(tf):
    """Several named inputs and outputs of different dtypes, to exercise the codec."""
    class MultiIO(tf.Module):
        @tf.function(input_signature=[
            tf.TensorSpec([None, 3], tf.float32, name="features"),
            tf.TensorSpec([None], tf.int64, name="count"),
            tf.TensorSpec([None], tf.string, name="label"),
            tf.TensorSpec([None], tf.bool, name="flag"),
        ])
        def serve(self, features, count, label, flag):
            return {
                "total": tf.reduce_sum(features, axis=1),
                "scaled": tf.cast(features, tf.float64) * tf.cast(tf.expand_dims(count, 1), tf.float64),
                "count_plus_one": count + 1,
                "greeting": tf.strings.join(["hello ", label]),
                "label_bytes": label,
                "flag_not": tf.logical_not(flag),
            }

    module = MultiIO()
    tf.saved_model.save(module, fresh("multi_io", 1), signatures={"serving_default": module.serve})


def tf1_half_plus_two(tf):
    """A TF1-style model (graph + SavedModelBuilder) with predict, classify and regress signatures."""
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        serialized = v1.placeholder(tf.string, [None], name="tf_example")
        parsed = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([1], tf.float32)})
        a = v1.Variable(0.5, name="a")
        b = v1.Variable(2.0, name="b")
        x = v1.placeholder(tf.float32, [None], name="x")
        y = tf.add(a * x, b, name="y")
        y_from_examples = tf.add(a * parsed["x"], b, name="y_from_examples")  # [N, 1]
        scores = tf.concat([y_from_examples, 1.0 - y_from_examples], axis=1, name="scores")
        classes = tf.tile(tf.constant([["pos", "neg"]]), [tf.shape(serialized)[0], 1], name="classes")
        sig = v1.saved_model.signature_def_utils
        info = v1.saved_model.utils.build_tensor_info
        signatures = {
            "serving_default": sig.build_signature_def(
                {"x": info(x)}, {"y": info(y)}, v1.saved_model.signature_constants.PREDICT_METHOD_NAME),
            "classify_x_to_y": sig.build_signature_def(
                {"inputs": info(serialized)}, {"classes": info(classes), "scores": info(scores)},
                v1.saved_model.signature_constants.CLASSIFY_METHOD_NAME),
            "regress_x_to_y": sig.build_signature_def(
                {"inputs": info(serialized)}, {"outputs": info(y_from_examples)},
                v1.saved_model.signature_constants.REGRESS_METHOD_NAME),
        }
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(fresh("tf1_half_plus_two", 1))
            builder.add_meta_graph_and_variables(
                session, [v1.saved_model.tag_constants.SERVING], signature_def_map=signatures)
            builder.save()


def image_classifier(tf):
    """Takes a batch of encoded JPEG/PNG bytes, decodes and resizes in-graph, classifies into 10 classes."""
    rng = tf.random.Generator.from_seed(7)
    weights = tf.constant(rng.normal([28 * 28, 10], stddev=0.05).numpy())
    bias = tf.constant(rng.normal([10], stddev=0.05).numpy())

    class ImageClassifier(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve(self, image_bytes):
            def decode(data):
                image = tf.io.decode_image(data, channels=1, expand_animations=False)
                image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, [28, 28])
                return tf.reshape(image, [28 * 28])

            pixels = tf.map_fn(decode, image_bytes, fn_output_signature=tf.TensorSpec([28 * 28], tf.float32))
            probabilities = tf.nn.softmax(tf.matmul(pixels, weights) + bias)
            return {"classes": tf.argmax(probabilities, axis=1), "probabilities": probabilities}

    module = ImageClassifier()
    tf.saved_model.save(module, fresh("image_classifier", 1), signatures={"serving_default": module.serve})


def b64_image_classifier(tf):
    """The Simple TensorFlow Serving kind of image model: URL-safe base64 text in,
    `tf.io.decode_base64` in-graph, then the same classifier as image_classifier."""
    rng = tf.random.Generator.from_seed(7)
    weights = tf.constant(rng.normal([28 * 28, 10], stddev=0.05).numpy())
    bias = tf.constant(rng.normal([10], stddev=0.05).numpy())

    class Base64ImageClassifier(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
        def serve(self, images):
            def decode(text):
                image = tf.io.decode_image(tf.io.decode_base64(text), channels=1, expand_animations=False)
                image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, [28, 28])
                return tf.reshape(image, [28 * 28])

            pixels = tf.map_fn(decode, images, fn_output_signature=tf.TensorSpec([28 * 28], tf.float32))
            probabilities = tf.nn.softmax(tf.matmul(pixels, weights) + bias)
            return {"classes": tf.argmax(probabilities, axis=1), "probabilities": probabilities}

    module = Base64ImageClassifier()
    tf.saved_model.save(module, fresh("b64_image_classifier", 1), signatures={"serving_default": module.serve})


def mnist_cnn(tf):
    """A small Keras CNN over float32 [-1, 28, 28, 1] images, exported the way the C API can load."""
    import keras

    keras.utils.set_random_seed(11)
    inputs = keras.Input(shape=(28, 28, 1), name="image")
    hidden = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
    hidden = keras.layers.MaxPooling2D(4)(hidden)
    outputs = keras.layers.Dense(10, activation="softmax")(keras.layers.Flatten()(hidden))
    model = keras.Model(inputs, outputs)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda image: {"probabilities": model(image)},
        input_signature=[tf.TensorSpec([None, 28, 28, 1], tf.float32, name="image")],
    )
    archive.write_out(fresh("mnist_cnn", 1))


def lossy_in_bfloat16(tf):
    """A regression whose answer is a small difference of large sums: FP32 keeps
    it, bfloat16's 8 significant bits lose it, so `mixed_precision: auto` must
    refuse bfloat16 for it however fast it runs."""
    class LossyInBfloat16(tf.Module):
        def __init__(self):
            super().__init__()
            self.weights = tf.Variable([[1.0], [-1.0]])

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.matmul(x + 1000.0, self.weights)}

    module = LossyInBfloat16()
    tf.saved_model.save(module, fresh("lossy_in_bfloat16", 1), signatures={"serving_default": module.serve})


def half_precision(tf):
    """A float16 input (TF Serving's REST API answers 501 for it; tfserve reads numbers)."""
    class HalfPrecision(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float16, name="x")])
        def serve(self, x):
            return {"y": tf.cast(x, tf.float32) * 2.0}

    module = HalfPrecision()
    tf.saved_model.save(module, fresh("half_precision", 1), signatures={"serving_default": module.serve})


def first_token(tf):
    """A variable-length input, for padding requests of different lengths into one batch."""
    class FirstToken(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="tokens")])
        def serve(self, tokens):
            rows = tf.shape(tokens)[0]
            return {"first": tokens[:, 0], "width": tf.fill([rows], tf.shape(tokens)[1])}

    module = FirstToken()
    tf.saved_model.save(module, fresh("first_token", 1), signatures={"serving_default": module.serve})


def custom_op_model(tf):
    """A model calling the custom op of tests/custom_op/scale_add.cc (y = 3x + 1).
    It lives under tests/, not models/, since it loads only with --custom_op_paths."""
    import subprocess
    import tempfile

    source = HERE.parent / "tests" / "custom_op" / "scale_add.cc"
    with tempfile.TemporaryDirectory() as build:
        library = pathlib.Path(build) / "scale_add.so"
        subprocess.run(["c++", "-shared", "-fPIC", "-O2", str(source), f"-I{tf.sysconfig.get_include()}",
                        f"-L{tf.sysconfig.get_lib()}", "-l:libtensorflow_framework.so.2", "-o", str(library)],
                       check=True)
        ops = tf.load_op_library(str(library))

        class ScaleAdd(tf.Module):
            @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
            def serve(self, x):
                return {"y": ops.tfserve_scale_add(x)}

        module = ScaleAdd()
        path = HERE.parent / "tests" / "custom_op" / "scale_add_model" / "1"
        if path.exists():
            shutil.rmtree(path)
        tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def test_fixtures(tf):
    """Images for the tests, and the outputs TensorFlow itself gives for them,
    so that tfserve's answers are checked against an independent run."""
    import json

    data = HERE.parent / "tests" / "data"
    data.mkdir(parents=True, exist_ok=True)
    gradient = tf.cast(tf.reshape(tf.range(28 * 28) % 256, [28, 28, 1]), tf.uint8)
    png = tf.io.encode_png(gradient).numpy()
    jpeg = tf.io.encode_jpeg(gradient, quality=95).numpy()
    (data / "gradient.png").write_bytes(png)
    (data / "gradient.jpg").write_bytes(jpeg)
    classifier = tf.saved_model.load(str(HERE / "image_classifier" / "1")).signatures["serving_default"]
    cnn = tf.saved_model.load(str(HERE / "mnist_cnn" / "1")).signatures["serving_default"]
    image = tf.reshape(tf.cast(tf.range(28 * 28), tf.float32) / (28 * 28), [1, 28, 28, 1])
    expected = {
        "image_classifier": {
            name: {k: v.numpy().tolist() for k, v in classifier(image_bytes=tf.constant([raw])).items()}
            for name, raw in (("png", png), ("jpg", jpeg))
        },
        "mnist_cnn": {"input": image.numpy().tolist(), "probabilities": cnn(image=image)["probabilities"].numpy().tolist()},
        # The PNG decoded and scaled to [0, 1], as tfserve feeds an uploaded image to a float input.
        "mnist_cnn_png": cnn(image=tf.cast(tf.io.decode_png(png)[tf.newaxis], tf.float32) / 255.0)[
            "probabilities"].numpy().tolist(),
    }
    (data / "expected.json").write_text(json.dumps(expected))


BUILDERS = (half_plus_three, warmup_requests, adder, multi_io, tf1_half_plus_two, image_classifier, b64_image_classifier,
            mnist_cnn, lossy_in_bfloat16, half_precision,
            first_token, custom_op_model, test_fixtures)


def main() -> None:
    """Writes every model, or only those named on the command line."""
    tfvenv.ensure(__file__)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    wanted = set(sys.argv[1:])
    for build in BUILDERS:
        if wanted and build.__name__ not in wanted:
            continue
        build(tf)
        print(f"wrote {build.__name__}")


if __name__ == "__main__":
    main()
