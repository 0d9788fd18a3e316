"""A handler that fails in the ways handlers do: a status named in the
documented 'Error: <code>, <message>' form, an exception carrying a
status_code, a plain exception, and one too slow for the request deadline."""
import json
import time


class Unprocessable(Exception):
    status_code = 422


def handler(data, context):
    request = json.loads(data.read() or b"{}")
    kind = request.get("fail")
    if kind == "documented":
        raise ValueError('Error: 415, Unsupported content type "{}"'.format(context.request_content_type))
    if kind == "status":
        raise Unprocessable("field 'x' must hold numbers")
    if kind == "plain":
        raise RuntimeError("the handler broke")
    if kind == "slow":
        time.sleep(2.5)
    return json.dumps({"ok": True}), "application/json"
