"""A handler that fails the way real ones do, on request: the body `crash`
kills its process, `hang` never returns, `leak` keeps 64 MiB more alive on
every call; any other body is a float run through the model."""
import json
import os
import time

import requests

_held = []


def handler(data, context):
    body = data.read().decode("utf-8")
    if body == "crash":
        os._exit(3)
    if body == "hang":
        time.sleep(3600)
    if body == "leak":
        block = bytearray(64 << 20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page so it is resident
        _held.append(block)
        return json.dumps({"held_mib": 64 * len(_held)}), "application/json"
    answer = requests.post(context.rest_uri, json={"instances": [float(body)]})
    return answer.content, "application/json"
