"""A local module shipped in code/lib."""
FACTOR = 10.0


def scale(values):
    return [v * FACTOR for v in values]
