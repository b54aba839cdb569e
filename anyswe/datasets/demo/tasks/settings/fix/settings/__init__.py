from settings.defaults import DEFAULTS


def load(values):
    return {key: values.get(key, default) for key, default in DEFAULTS.items()}
