"""Facts about one file that the rules query, and the knowledge (ops, Keras layers) they rest on.

``dtype_facts``: what dtype an expression holds and why (``DtypeFacts``, the float16 rules'
only view of the dtype inference). ``ops`` and ``keras_layers``: one table each of what
TensorFlow/Keras ops and layers do to dtypes and ranges. ``heuristics``: the name-based guesses
that remain, each with the case that motivated it.
"""
