"""Uses a module from code/lib; requirements.txt names a package that does not
exist, which must not matter since code/lib wins."""
import json

import scaling


def input_handler(data, context):
    values = json.loads(data.read())["values"]
    return json.dumps({"instances": scaling.scale(values)})


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return json.dumps({"scaled_by": scaling.FACTOR, **response.json()}), "application/json"
