"""mpfix: find, fix and verify TensorFlow/Keras mixed-precision bugs."""

__version__ = "0.1.0"
