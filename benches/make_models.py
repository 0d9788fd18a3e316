#!/usr/bin/env python3
"""Writes the benchmark's larger models into the tfserve cache (never into git):
an MLP (784 → 512 → 512 → 10), a ResNet-50 (random weights), an image head
with ResNet-50's input and output (224×224×3 in, 1000 probabilities out) but
almost no compute (average pooling and one dense layer), which isolates what the
server itself spends on an image request, and a transformer encoder of BERT-base's
shape (12 layers, 768 wide, 12 heads, 3072 in the feed-forward, 128 tokens in,
random weights, two class scores from the first token out); all exported the
way the C API loads Keras models.

    python3 benches/make_models.py   # prints the directory holding them
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
import tfvenv  # noqa: E402


def export(tf, keras, model, name, input_shape, out, dtype="float32"):
    path = out / name / "1"
    if (path / "saved_model.pb").exists():
        return
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda x: {"probabilities": model(x)},
        input_signature=[tf.TensorSpec([None, *input_shape], getattr(tf, dtype), name="x")],
    )
    archive.write_out(str(path))


def bert_base(keras, layers=12, width=768, heads=12, feed_forward=3072, tokens=128, vocabulary=30522):
    ids = keras.Input(shape=(tokens,), dtype="int32")
    hidden = keras.layers.Embedding(vocabulary, width)(ids)
    for _ in range(layers):
        attended = keras.layers.MultiHeadAttention(heads, width // heads)(hidden, hidden)
        hidden = keras.layers.LayerNormalization()(hidden + attended)
        inner = keras.layers.Dense(feed_forward, activation="gelu")(hidden)
        hidden = keras.layers.LayerNormalization()(hidden + keras.layers.Dense(width)(inner))
    first = keras.layers.Lambda(lambda h: h[:, 0, :])(hidden)
    return keras.Model(ids, keras.layers.Dense(2, activation="softmax")(first))


def main():
    tfvenv.ensure(__file__)
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    out = tfvenv.cache_root() / "bench-models"
    keras.utils.set_random_seed(3)
    inputs = keras.Input(shape=(784,))
    hidden = keras.layers.Dense(512, activation="relu")(inputs)
    hidden = keras.layers.Dense(512, activation="relu")(hidden)
    mlp = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(hidden))
    export(tf, keras, mlp, "mlp", [784], out)
    resnet = keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3), classes=1000)
    export(tf, keras, resnet, "resnet50", [224, 224, 3], out)
    pixels = keras.Input(shape=(224, 224, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(pixels)
    head = keras.Model(pixels, keras.layers.Dense(1000, activation="softmax")(pooled))
    export(tf, keras, head, "image_head", [224, 224, 3], out)
    if not (out / "bert_base" / "1" / "saved_model.pb").exists():
        export(tf, keras, bert_base(keras), "bert_base", [128], out, dtype="int32")
    print(out)


if __name__ == "__main__":
    main()
