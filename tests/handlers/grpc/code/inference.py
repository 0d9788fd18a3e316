"""Full control over gRPC, as the container's README allows: the handler calls
TF Serving's Predict through `context.channel`, the grpcio channel opened on
`context.grpc_uri`. It needs no TensorFlow: the PredictRequest is protobuf
written by hand (field numbers from tensorflow_serving/apis/predict.proto)."""
import json
import struct

import grpc  # noqa: F401  (imported, so the context carries a channel)


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, payload):
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _predict_request(model, values):
    dim = _varint(1 << 3) + _varint(len(values))                   # Dim.size = 1
    tensor = (_varint(1 << 3) + _varint(1)                          # dtype = DT_FLOAT
              + _field(2, _field(2, dim))                           # tensor_shape.dim
              + _field(5, struct.pack("<%df" % len(values), *values)))  # float_val, packed
    entry = _field(1, b"x") + _field(2, tensor)                     # inputs["x"]
    return _field(1, _field(1, model.encode())) + _field(2, entry)  # model_spec.name, inputs


def _fields(data):
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, i = _read_varint(data, i)
            yield number, data[i:i + length]
            i += length
        elif wire == 0:
            value, i = _read_varint(data, i)
            yield number, value
        else:
            raise ValueError("unexpected wire type %d" % wire)


def _read_varint(data, i):
    shift = result = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, i


def _outputs(response):
    """PredictResponse.outputs (field 1) as {key: float_val}."""
    outputs = {}
    for number, entry in _fields(response):
        if number != 1:
            continue
        parts = dict(_fields(entry))
        values = [v for n, v in _fields(parts[2]) if n == 5]
        outputs[parts[1].decode()] = list(struct.unpack("<%df" % (len(values[0]) // 4), values[0]))
    return outputs


def handler(data, context):
    values = json.loads(data.read().decode("utf-8"))["instances"]
    predict = context.channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
    answer = _outputs(predict(_predict_request(context.model_name, values), timeout=10))
    body = {"predictions": answer["y"], "grpc_port": context.grpc_port, "grpc_uri": context.grpc_uri}
    return json.dumps(body), "application/json"
