"""What reads tfserve's capture sinks in production, run against them:

    consumers.py sink EVENTS_FILE [DELAY_SECONDS]
        a CloudEvents receiver (the `cloudevents` SDK's HTTP binding) on an
        ephemeral port, printed first; each event it parses becomes one JSON
        line in EVENTS_FILE, answered after DELAY_SECONDS.
    consumers.py read JSONL_DIR TFRECORD_PREFIX EVENTS_FILE
        reads the JSON Lines with pandas (as Model Monitor's jobs do), checks
        every field against SageMaker's Data Capture format, reads the TFRecord
        files with tf.data and tensorflow-serving-api's PredictionLog, and the
        events file; prints a JSON summary as its last line.
"""
import base64
import glob
import http.server
import json
import os
import re
import sys
import threading
import time


def sink(events_file, delay):
    from cloudevents.http import from_http

    lock = threading.Lock()

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            event = from_http(dict(self.headers.items()), body)
            record = {
                "specversion": event["specversion"],
                "id": event["id"],
                "type": event["type"],
                "source": event["source"],
                "time": event.get("time"),
                "datacontenttype": event.get("datacontenttype"),
                "inferenceservicename": event.get("inferenceservicename"),
                "component": event.get("component"),
                "namespace": event.get("namespace"),
                "endpoint": event.get("endpoint"),
                "metadata": event.get("metadata"),
                "ce_headers": sorted(k.lower() for k in self.headers.keys() if k.lower().startswith("ce-")),
                "data": base64.b64encode(body).decode(),
            }
            time.sleep(delay)
            with lock, open(events_file, "a") as out:
                out.write(json.dumps(record) + "\n")
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(server.server_address[1], flush=True)
    server.serve_forever()


RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
HOUR_PATH = re.compile(r"/\d{4}/\d\d/\d\d/\d\d/\d\d-\d\d-\d{3}-[0-9a-f]+-\d+\.jsonl$")


def read_jsonl(directory):
    import pandas

    files = sorted(glob.glob(os.path.join(directory, "**", "*.jsonl"), recursive=True))
    assert files, f"no .jsonl files under {directory}"
    for path in files:
        assert HOUR_PATH.search(path), f"not Data Capture's layout: {path}"
    frame = pandas.concat([pandas.read_json(path, lines=True) for path in files], ignore_index=True)
    assert list(frame.columns) == ["captureData", "eventMetadata", "eventVersion"], list(frame.columns)
    records = []
    for _, row in frame.iterrows():
        assert str(row["eventVersion"]) == "0", row["eventVersion"]
        metadata = row["eventMetadata"]
        assert set(metadata) - {"inferenceId", "customAttributes"} == {"eventId", "inferenceTime"}, metadata
        assert RFC3339.match(metadata["inferenceTime"]), metadata
        sides = {}
        for key, mode in (("endpointInput", "INPUT"), ("endpointOutput", "OUTPUT")):
            side = row["captureData"][key]
            assert set(side) == {"observedContentType", "mode", "data", "encoding"}, side
            assert side["mode"] == mode, side
            assert side["encoding"] in ("JSON", "CSV", "BASE64"), side
            data = side["data"]
            if side["encoding"] == "JSON":
                json.loads(data)
            if side["encoding"] == "BASE64":
                data = base64.b64decode(data).decode("latin-1")
            sides[key] = {"type": side["observedContentType"], "encoding": side["encoding"], "data": data}
        records.append(
            {
                "id": metadata["eventId"],
                "inferenceId": metadata.get("inferenceId"),
                "customAttributes": metadata.get("customAttributes"),
                **sides,
            }
        )
    return {"files": [os.path.relpath(p, directory) for p in files], "records": records}


def read_tfrecords(prefix):
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    files = sorted(glob.glob(prefix + "-*.tfrecord"))
    assert files, f"no {prefix}-*.tfrecord files"
    logs = []
    for raw in tf.data.TFRecordDataset(files):
        log = prediction_log_pb2.PredictionLog.FromString(raw.numpy())
        kind = log.WhichOneof("log_type")
        read = {
            "kind": kind,
            "model": log.log_metadata.model_spec.name,
            "version": log.log_metadata.model_spec.version.value,
            "sampling_rate": log.log_metadata.sampling_config.sampling_rate,
            "signature": log.log_metadata.model_spec.signature_name,
        }
        if kind == "predict_log":
            request, response = log.predict_log.request, log.predict_log.response
            read["x"] = tf.make_ndarray(request.inputs["x"]).flatten().tolist()
            read["y"] = tf.make_ndarray(response.outputs["y"]).flatten().tolist()
        elif kind in ("classify_log", "regress_log"):
            call = getattr(log, kind)
            read["x"] = [e.features.feature["x"].float_list.value[0] for e in call.request.input.example_list.examples]
            if kind == "classify_log":
                read["y"] = [c.classes[0].score for c in call.response.result.classifications]
            else:
                read["y"] = [r.value for r in call.response.result.regressions]
        elif kind == "multi_inference_log":
            call = log.multi_inference_log
            read["x"] = [e.features.feature["x"].float_list.value[0] for e in call.request.input.example_list.examples]
            read["tasks"] = [t.model_spec.signature_name for t in call.request.tasks]
            read["results"] = [r.WhichOneof("result") for r in call.response.results]
        else:
            raise AssertionError(f"unexpected log kind {kind}")
        logs.append(read)
    return {"files": files, "logs": logs}


def read_events(events_file):
    with open(events_file) as lines:
        events = [json.loads(line) for line in lines]
    for event in events:
        event["data"] = base64.b64decode(event["data"]).decode("latin-1")
    return events


def main():
    if sys.argv[1] == "sink":
        sink(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
        return
    if sys.argv[1] == "logs":
        print(json.dumps(read_tfrecords(sys.argv[2])))
        return
    if sys.argv[1] == "jsonl":
        print(json.dumps(read_jsonl(sys.argv[2])))
        return
    if sys.argv[1] == "events":
        print(json.dumps(read_events(sys.argv[2])))
        return
    jsonl_dir, prefix, events_file = sys.argv[2:5]
    summary = {
        "jsonl": read_jsonl(jsonl_dir),
        "tfrecord": read_tfrecords(prefix),
        "events": read_events(events_file),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
