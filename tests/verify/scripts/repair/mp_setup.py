"""Project settings imported by imported_policy.py: the dtype policy comes from a config file."""

import json
import os

from tensorflow import keras

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_config.json")


def configure():
    with open(CONFIG, encoding="utf-8") as handle:
        settings = json.load(handle)
    keras.mixed_precision.set_global_policy(settings["precision"])
