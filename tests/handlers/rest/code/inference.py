"""The container README's handler: full control, calling the model through
context.rest_uri with requests. It also echoes the Context it was given."""
import json

import requests


def handler(data, context):
    processed_input = _process_input(data, context)
    response = requests.post(context.rest_uri, data=processed_input)
    return _process_output(response, context)


def _process_input(data, context):
    if context.request_content_type == 'application/json':
        d = data.read().decode('utf-8')
        return d if len(d) else ''
    if context.request_content_type == 'text/csv':
        return json.dumps({
            'instances': [float(x) for x in data.read().decode('utf-8').split(',')]
        })
    raise ValueError('{{"error": "unsupported content type {}"}}'.format(
        context.request_content_type or "unknown"))


def _process_output(data, context):
    if data.status_code != 200:
        raise ValueError(data.content.decode('utf-8'))
    answer = json.loads(data.content)
    answer["context"] = {field: getattr(context, field) for field in context._fields if field != "channel"}
    return json.dumps(answer), "application/json"
