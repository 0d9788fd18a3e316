"""Uses a small pure-Python package installed from code/requirements.txt."""
import json

import inflection


def input_handler(data, context):
    return data.read()


def output_handler(response, context):
    answer = response.json()
    return json.dumps({inflection.camelize("model_output", False): answer["predictions"]}), "application/json"
