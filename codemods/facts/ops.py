"""The one table of TensorFlow and Keras ops: what each does to dtypes and value ranges.

One ``OpSpec`` per canonical op, named by its path after the namespace (``tensorflow.``,
``tensorflow.math.``, ``tensorflow.nn.`` keeps ``nn.``, ``keras.ops.``, ``keras.ops.numpy.``,
``keras.ops.nn.``, ``keras.random.`` → ``random.``, ``keras.backend.``): ``tf.math.reduce_sum``,
``tf.reduce_sum``, ``keras.ops.sum`` and ``ops.sum`` (``from keras import ops``) all find their
spec, by the full path first and then by its last component. An op of those namespaces that is
not listed follows its inputs' dtype (``Result.PRESERVES``) and has no semantic class.

The dtype inference, the range facts and the float16 rules read this table, and the rules'
prefilter triggers are generated from it (``FLOAT32_TRIGGERS``), so they cannot disagree.
Adding an op is one line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum, auto


class Result(Enum):
    """The dtype of the op's result."""

    PRESERVES = auto()  # its tensor arguments' (joined); float32 for Python numbers (tf.sqrt(2.0))
    FLOAT32 = auto()  # float32 unless given a dtype (Keras 3 ops use floatx(): float32 under every policy)
    VALUE = auto()  # a value argument's dtype when it is a tensor, else float32/int by the literal
    RANGE = auto()  # int unless given a dtype or float bounds
    LIKE = auto()  # its first argument's, unless given a dtype
    CAST = auto()  # its dtype argument (second positional or ``dtype=``)
    INT = auto()
    BOOL = auto()
    COMPLEX = auto()
    REAL = auto()  # float32 from complex inputs


class Range(Enum):
    """What is known of the result's values by the op alone."""

    ANY = auto()
    NONNEGATIVE = auto()  # ≥ 0: square, abs, exp, norms, softplus
    NONPOSITIVE = auto()  # ≤ 0: log_softmax, log_sigmoid
    UNIT = auto()  # in [0, 1]: probabilities (softmax, sigmoid, one_hot)
    FOLLOWS = auto()  # the sign of its first argument (sums, means, maxima, cumsum, cast, reshape)


class Kind(Enum):
    """Semantic classes the float16 rules ask about."""

    SQUARE = auto()  # x²: square (and pow/power with exponent 2, x ** 2, x * x at the call site)
    LONG_SUM = auto()  # sums every element of an axis in the input's dtype (float16 on TF's CPU kernels)
    CUMULATIVE = auto()  # a running sum (cumsum): as long as its axis
    # It adds as many terms as the data gives it, not a width the model fixes: a sequence's length (cumsum), a node's
    # in-degree (a GNN's segment sum over its in-edges: ~4300 at a citation graph's hubs in wave 13, inf in float16).
    DATA_LENGTH = auto()
    MEAN = auto()
    # tf.reduce_mean sums its axis in the input's dtype before it divides (TF 2.21 CPU: the float16 mean of 4096
    # squares of 10.0 is inf), so a mean of squares overflows as a sum of squares does; keras.ops.mean sums in
    # float32 and casts back ("tf.reduce_mean does not handle low precision overflow", keras/src/backend/tensorflow).
    LONG_MEAN = auto()
    MAX = auto()  # maxima (x - max(x) ≤ 0)
    EXP = auto()  # exp family: overflows in float16 from x ≈ 11.1
    POW = auto()  # pow(x, k)
    LOG = auto()  # log family: -inf at 0, so a float16 probability that rounds to 0 is -inf
    LOG1P = auto()
    SOFTPLUS = auto()  # log(1 + e^x) ≥ 0
    LOG_PROBABILITY = auto()  # log_softmax/log_sigmoid: ≤ 0, stable
    PROBABILITY = auto()  # softmax/sigmoid
    DIVISION = auto()
    NORM = auto()  # a square root of a sum of squares (back in range)
    DEVIATION = auto()  # standard deviation (back in range)
    VARIANCE = auto()  # a mean of squared deviations
    SQUARED_SUM = auto()  # l2_loss: sum(x²) / 2, past 65504 for large activations
    SHRINKS = auto()  # brings a float32 sum of squares back into float16's range (sqrt, rsqrt, log)
    MATMUL = auto()  # a contraction (matmul, einsum, tensordot)
    CLIP = auto()  # clip_by_value/clip: bounded by its arguments
    FLOOR = auto()  # maximum(x, eps): an epsilon meets x
    CEILING = auto()  # minimum(x, c): at most c
    ADD = auto()  # add/subtract: an epsilon or a mask meets x
    ARITHMETIC = auto()  # elementwise binary arithmetic (a mask constant meets the other argument)
    SELECT = auto()  # where/select: the dtype of the two branches
    STOP_GRADIENT = auto()
    NEGATIVE = auto()
    L2_NORMALIZE = auto()  # divides by sqrt(max(sum(x²), epsilon)), epsilon 1e-12 by default
    # band_part(x, num_lower, num_upper): keeps a band around the diagonal; with num_lower = -1 every row
    # keeps its first column, so a causal mask of ones leaves no row fully masked.
    BAND = auto()
    # A product of every element of an axis (reduce_prod, prod) or a running one (cumprod): probabilities multiplied
    # in float16 fall below its smallest subnormal (≈ 6e-8, 0.5 ** 25) and round to 0 (TF 2.21 CPU, Keras 3.15.1: the
    # float16 cumprod of 120 halves is 0.0 and its log -inf; 7.5e-37 in float32).
    PRODUCT = auto()
    RECIPROCAL = auto()  # 1 / x (tf.math.reciprocal, keras.ops.reciprocal): a gradient times it is divided by x
    NATURAL_LOG = auto()  # log and log1p (base e; log2/log10 are not): log(1 + exp(x)) is softplus
    EXPM1 = auto()  # exp(x) - 1: in the exp family, but log(1 + expm1(x)) is no softplus
    LOGSUMEXP = auto()  # log(sum(exp(x))) ≥ max(x): x - logsumexp(x) ≤ 0
    ONES = auto()  # every element is one (True as a bool tensor): ones, ones_like
    # Its values lie in [-1, 1] whatever its input (tanh, sin, cos, erf): float16 holds its result even where its
    # input is past 65504, so ``mpfix repair``'s float32 islands can end there.
    BOUNDED = auto()


# Ops whose result float16 cannot hold when their input is large: a float32 value computed with
# them from a float16 one was upcast on purpose (an RMSNorm variance, a softmax denominator).
RANGE_SENSITIVE = (Kind.SQUARE, Kind.LONG_SUM, Kind.MEAN, Kind.VARIANCE, Kind.DEVIATION, Kind.NORM, Kind.SQUARED_SUM,
                   Kind.EXP, Kind.POW, Kind.SOFTPLUS, Kind.MATMUL)


class Order(Enum):
    """How the op's result is ordered: the differences ``m[k:] - m[:-k]`` of an ascending ``m`` are ≥ 0 (NeRF's gaps
    between sample depths, ``dists = t[1:] - t[:-1]`` of a ``linspace``, in ``exp(-sigma * dists)``)."""

    NONE = auto()
    BOUNDS = auto()  # linspace(start, stop, num): 1-D, ascending when start ≤ stop
    STEP = auto()  # range(start, limit, delta): 1-D, ascending when delta > 0 (1 by default)
    SORTED = auto()  # sort(x, axis=-1, direction="ASCENDING"): ascending along its axis
    # An elementwise non-decreasing function of its first argument (cast rounds monotonically; exp, log, sqrt, relu,
    # sigmoid, tanh, softplus): an ascending input stays ascending.
    KEEPS = auto()


class Elements(Enum):
    """The dtype of ``a, b = op(x)``'s elements."""

    UNKNOWN = auto()
    SAME = auto()  # split, unstack, moments: the input's
    VALUES_THEN_INT = auto()  # top_k: values, then int indices


@dataclass(frozen=True)
class OpSpec:
    name: str
    result: Result = Result.PRESERVES
    range: Range = Range.ANY
    kinds: frozenset[Kind] = frozenset()
    # The result's dtype follows every tensor argument (so a float32 result makes them float32).
    elementwise: bool = True
    keeps_bool: bool = False  # a bool tensor in gives a bool tensor out
    elements: Elements = Elements.UNKNOWN
    dtype_args: tuple[int, ...] = (0, 1, 2)  # the positional arguments the result's dtype follows
    label: str = ""  # how messages name it ("standard deviation")
    dtype_position: int | None = None  # the positional index of its ``dtype`` argument (tf.zeros(shape, dtype))
    # TensorFlow raises unless its tensor operands share one dtype (no promotion): a float16 operand
    # next to a float32 one is a mix (MP206), like ``x16 * y32``. keras.ops promote instead.
    same_dtype: bool = False
    index_args: tuple[int, ...] = ()  # positional arguments read as integer indices (gather's ids)
    # Its first argument is a list of tensors (``tf.concat([a, b], -1)``): the result's dtype is the
    # elements' (joined), and with ``same_dtype`` every element must share one dtype.
    tensor_list: bool = False
    # The result holds its first argument's value (``tf.constant(2.0)``, ``tf.Variable(20.0)``,
    # ``tf.cast(v, dtype)``): a number folded through it is still that number.
    keeps_value: bool = False
    stable_log: str = ""  # the op that computes its log stably (softmax -> log_softmax, sigmoid -> log_sigmoid)
    order: Order = Order.NONE
    # TensorFlow registers no float16 kernel for it: a float16 input fails (MP208), eagerly (NotFoundError) or when the
    # graph runs (InvalidArgumentError "No OpKernel was registered ... T=DT_HALF").
    float16_kernel: bool = True

    @property
    def short(self) -> str:
        return self.name.split(".")[-1]

    @property
    def creates_float32(self) -> bool:
        return self.result in (Result.FLOAT32, Result.VALUE, Result.RANGE)

    @property
    def is_cast(self) -> bool:
        return self.result is Result.CAST

    def has(self, *kinds: Kind) -> bool:
        return any(k in self.kinds for k in kinds)


def _spec(name: str, result: Result = Result.PRESERVES, range: Range = Range.ANY, *kinds: Kind, **more) -> OpSpec:
    return OpSpec(name, result, range, frozenset(kinds), **more)


R, G, K, O = Result, Range, Kind, Order
_NOT_ELEMENTWISE = {"elementwise": False}
_BOOLS = {"keeps_bool": True}
_UNARY = {"dtype_args": (0,)}  # the other arguments are shapes, axes or options, not tensors of the result
_KEEPS = {"keeps_value": True}

_TABLE: tuple[OpSpec, ...] = (
    # Creators: float32 unless given a dtype.
    _spec("ones", R.FLOAT32, G.ANY, K.ONES, dtype_position=1),
    *(_spec(n, R.FLOAT32, dtype_position=1) for n in ("zeros", "empty")),
    *(_spec(n, R.FLOAT32, dtype_position=3) for n in ("random.normal", "random.uniform", "random.truncated_normal")),
    _spec("full", R.FLOAT32, dtype_position=2),
    *(_spec(n, R.FLOAT32) for n in (
        "eye", "identity_matrix", "logspace", "random.stateless_normal", "random.stateless_uniform",
        "random.gamma", "random.beta", "tri", "hanning", "hamming", "blackman", "bartlett",
        "kaiser")),
    _spec("linspace", R.FLOAT32, order=O.BOUNDS),
    _spec("one_hot", R.FLOAT32, G.UNIT, dtype_position=5, index_args=(0,), **_NOT_ELEMENTWISE),
    _spec("fill", R.VALUE, **_NOT_ELEMENTWISE),
    *(_spec(n, R.VALUE, dtype_position=1, **_NOT_ELEMENTWISE, **_KEEPS) for n in ("constant", "convert_to_tensor",
                                                                                  "array", "asarray")),
    # tf.Variable(initial_value, ..., dtype=...): the initial value's dtype and value (C6: srelu's beta).
    _spec("Variable", R.VALUE, **_NOT_ELEMENTWISE, **_KEEPS),
    # ≥ 0 from a start ≥ 0 (dtype_ranges)
    # tf.range has no float16 kernel in a graph (TF 2.21 CPU: `tf.range(0, 4, dtype=tf.float16)` works eagerly, raises
    # ValueError "Unsupported dtype ... Range[Tidx=DT_HALF]" in a tf.function or a Keras layer's traced call).
    _spec("range", R.RANGE, dtype_position=3, float16_kernel=False, order=O.STEP, **_NOT_ELEMENTWISE),
    _spec("arange", R.RANGE, dtype_position=3, order=O.STEP, **_NOT_ELEMENTWISE),
    *(_spec(n, R.INT, G.NONNEGATIVE, **_NOT_ELEMENTWISE) for n in (
        "shape", "size", "rank", "argmax", "argmin", "argsort", "one_hot_indices", "count_nonzero", "searchsorted",
        "where_indices", "nonzero", "digitize", "bincount", "ndim", "top_k_indices")),
    _spec("unique", R.INT, **_NOT_ELEMENTWISE),
    # tf.compat.v1.assign(variable, value) returns the variable: float32 under a mixed policy, like `v.assign(x)`.
    *(_spec(n, R.FLOAT32, **_NOT_ELEMENTWISE) for n in ("assign", "assign_add", "assign_sub")),
    # Comparisons: TensorFlow's raise on a float16 and a float32 tensor as its arithmetic does (TF 2.21 CPU: tf.equal,
    # tf.math.less, tf.greater_equal and the operators >=, <, ==, != each raised, eagerly and traced).
    *(_spec(n, R.BOOL, same_dtype=True, dtype_args=(0, 1), **_NOT_ELEMENTWISE, **_BOOLS) for n in (
        "equal", "not_equal", "greater", "less", "greater_equal", "less_equal")),
    *(_spec(n, R.BOOL, **_NOT_ELEMENTWISE, **_BOOLS) for n in (
        "isnan", "isinf", "isfinite",
        "is_nan", "is_inf", "is_finite", "sequence_mask", "in_top_k", "isclose", "all", "any", "reduce_all",
        "reduce_any", "logical_xor")),
    *(_spec(n, R.BOOL, **_BOOLS) for n in ("logical_and", "logical_or", "logical_not")),
    _spec("identity", R.LIKE, G.FOLLOWS, order=O.KEEPS, **_BOOLS, **_KEEPS),
    _spec("zeros_like", R.LIKE, G.FOLLOWS, dtype_position=1, **_BOOLS),
    _spec("ones_like", R.LIKE, G.UNIT, K.ONES, dtype_position=1, **_BOOLS),  # ones whatever the sign of its input
    *(_spec(n, R.PRESERVES, G.FOLLOWS, K.BAND, elementwise=False, dtype_args=(0,), **_BOOLS)
      for n in ("linalg.band_part", "matrix_band_part")),
    _spec("stop_gradient", R.LIKE, G.FOLLOWS, K.STOP_GRADIENT, order=O.KEEPS, **_BOOLS),
    *(_spec(n, R.LIKE) for n in ("full_like", "fill_like", "random.normal_like")),
    # keras.random.dropout(x, rate), keras.random.shuffle(x): x's dtype (C26), not a float32 creator.
    *(_spec(n, R.LIKE) for n in ("random.dropout", "random.shuffle", "nn.dropout")),
    *(_spec(n, R.CAST, G.FOLLOWS, order=O.KEEPS, **_NOT_ELEMENTWISE, **_KEEPS) for n in ("cast", "dtypes.cast")),
    # saturate_cast clips to the target's range; convert_image_dtype rescales: neither keeps the value.
    *(_spec(n, R.CAST, G.FOLLOWS, **_NOT_ELEMENTWISE) for n in ("saturate_cast", "image.convert_image_dtype")),
    # The real-input FFTs have no float16 kernel (TF 2.21 CPU, eager and traced: ValueError "RFFT requires tf.float32
    # or tf.float64 inputs"; keras.ops.stft TypeError "Expected `float32` or `float64`"), nor the DCTs built on them
    # (TypeError "The `real` and `imag` components have incorrect types: float16"): a log-mel layer left float16 under
    # the mixed policy fails when the model is built. tf.signal.frame, hann_window and linear_to_mel_weight_matrix
    # accept float16.
    *(_spec(n, R.COMPLEX, float16_kernel=False, label=n) for n in (
        "signal.rfft", "signal.stft", "rfft", "stft", "signal.rfft2d", "signal.rfft3d", "rfft2")),
    *(_spec(n, R.COMPLEX) for n in ("complex", "signal.fft", "fft", "signal.fft2d", "fft2")),
    *(_spec(n, R.PRESERVES, elementwise=False, float16_kernel=False, label=n) for n in (
        "signal.dct", "signal.idct", "signal.mfccs_from_log_mel_spectrograms")),
    *(_spec(n, R.REAL) for n in ("real", "imag", "abs_complex", "angle", "signal.irfft", "irfft", "istft",
                                 "signal.inverse_stft")),
    # Shape ops: the input's dtype and values.
    *(_spec(n, R.PRESERVES, G.FOLLOWS, **_BOOLS, **_UNARY) for n in ("reshape", "transpose", "expand_dims", "squeeze",
                                                                      "tile", "broadcast_to")),
    *(_spec(n, R.PRESERVES, G.FOLLOWS, same_dtype=True, tensor_list=True, **_BOOLS)
      for n in ("concat", "stack", "concatenate", "parallel_stack")),
    _spec("gather", R.PRESERVES, G.FOLLOWS, dtype_args=(0,), elementwise=False, keeps_bool=True, index_args=(1,)),
    *(_spec(n, R.PRESERVES, G.FOLLOWS, dtype_args=(0,), elementwise=False, index_args=(1,))
      for n in ("nn.embedding_lookup", "take", "take_along_axis")),
    *(_spec(n, elementwise=False) for n in ("nest.map_structure", "nest.map_structure_up_to")),
    _spec("gather_nd", R.PRESERVES, G.FOLLOWS, dtype_args=(0,), elementwise=False, index_args=(1,)),
    *(_spec(n, R.PRESERVES, G.ANY, K.SELECT, dtype_args=(1, 2), elementwise=False, same_dtype=True, **_BOOLS)
      for n in ("where", "where_v2", "select")),
    *(_spec(n, elements=Elements.SAME) for n in ("split", "unstack", "meshgrid", "broadcast_arrays")),
    *(_spec(n, elements=Elements.SAME) for n in ("moments", "normalize_moments", "nn.moments")),
    _spec("sort", R.PRESERVES, G.FOLLOWS, order=O.SORTED, **_UNARY),
    _spec("top_k", elements=Elements.VALUES_THEN_INT),
    _spec("nn.top_k", elements=Elements.VALUES_THEN_INT),
    # Squares, sums and norms.
    _spec("square", R.PRESERVES, G.NONNEGATIVE, K.SQUARE),
    *(_spec(n, R.PRESERVES, G.FOLLOWS, K.LONG_SUM, **_UNARY) for n in ("reduce_sum", "sum")),
    _spec("cumsum", R.PRESERVES, G.FOLLOWS, K.LONG_SUM, K.CUMULATIVE, K.DATA_LENGTH, **_UNARY),
    # A sum of every row with one segment id (a GNN's sum aggregation over a node's in-edges): as long as a hub's degree.
    *(_spec(n, R.PRESERVES, G.FOLLOWS, K.LONG_SUM, K.DATA_LENGTH, label=f"segment sum ({n})", index_args=(1,),
            **_UNARY) for n in ("unsorted_segment_sum", "segment_sum")),
    *(_spec(n, R.PRESERVES, G.ANY, K.PRODUCT, label="product", **_UNARY) for n in ("reduce_prod", "prod")),
    _spec("cumprod", R.PRESERVES, G.ANY, K.PRODUCT, K.CUMULATIVE, label="running product (cumprod)", **_UNARY),
    _spec("reduce_mean", R.PRESERVES, G.FOLLOWS, K.MEAN, K.LONG_MEAN, **_UNARY),
    _spec("mean", R.PRESERVES, G.FOLLOWS, K.MEAN, **_UNARY),
    *(_spec(n, R.PRESERVES, G.FOLLOWS, K.MAX, **_UNARY) for n in ("reduce_max", "max", "amax")),
    *(_spec(n, R.PRESERVES, G.FOLLOWS, **_UNARY) for n in ("reduce_min", "min", "amin")),
    *(_spec(n, R.PRESERVES, G.NONNEGATIVE, K.NORM, label="norm") for n in ("norm", "linalg.norm",
                                                                           "reduce_euclidean_norm")),
    *(_spec(n, R.PRESERVES, G.NONNEGATIVE, K.DEVIATION, label="standard deviation") for n in ("reduce_std", "std")),
    *(_spec(n, R.PRESERVES, G.NONNEGATIVE, K.VARIANCE, label="variance") for n in ("reduce_variance", "var")),
    _spec("nn.l2_loss", R.PRESERVES, G.NONNEGATIVE, K.SQUARED_SUM, label="l2_loss"),
    *(_spec(n, R.PRESERVES, G.NONNEGATIVE, K.L2_NORMALIZE) for n in ("l2_normalize", "nn.l2_normalize",
                                                                     "linalg.l2_normalize")),
    # Exponentials and logarithms.
    _spec("exp", R.PRESERVES, G.NONNEGATIVE, K.EXP, order=O.KEEPS),
    _spec("expm1", R.PRESERVES, G.ANY, K.EXP, K.EXPM1, order=O.KEEPS),
    # tf.pow raises on a float16 base and a float32 exponent as `**` does (TF 2.21 CPU); keras.ops.power promotes.
    *(_spec(n, R.PRESERVES, G.ANY, K.POW, same_dtype=True) for n in ("pow", "power")),
    _spec("log", R.PRESERVES, G.ANY, K.LOG, K.NATURAL_LOG, K.SHRINKS, order=O.KEEPS),
    _spec("log1p", R.PRESERVES, G.ANY, K.LOG, K.NATURAL_LOG, K.LOG1P, K.SHRINKS, order=O.KEEPS),
    *(_spec(n, R.PRESERVES, G.ANY, K.LOG) for n in ("log2", "log10")),
    *(_spec(n, R.PRESERVES, G.NONNEGATIVE, K.SOFTPLUS, order=O.KEEPS) for n in ("softplus", "nn.softplus")),
    *(_spec(n, R.PRESERVES, G.NONPOSITIVE, K.LOG_PROBABILITY) for n in (
        "log_softmax", "log_sigmoid", "log_softmax_v2", "nn.log_softmax")),
    *(_spec(n, R.PRESERVES, G.ANY, K.LOGSUMEXP) for n in ("reduce_logsumexp", "logsumexp")),
    *(_spec(n, R.PRESERVES, G.UNIT, K.PROBABILITY, stable_log="log_sigmoid", order=O.KEEPS)
      for n in ("sigmoid", "nn.sigmoid")),
    *(_spec(n, R.PRESERVES, G.UNIT, K.PROBABILITY, stable_log="log_softmax") for n in ("softmax", "nn.softmax")),
    _spec("sqrt", R.PRESERVES, G.NONNEGATIVE, K.SHRINKS, order=O.KEEPS),
    _spec("rsqrt", R.PRESERVES, G.NONNEGATIVE, K.SHRINKS),
    *(_spec(n, R.PRESERVES, G.NONNEGATIVE, order=O.KEEPS) for n in ("relu", "relu6", "nn.relu")),
    *(_spec(n, R.PRESERVES, G.NONNEGATIVE) for n in ("abs", "cosh")),
    *(_spec(n, R.PRESERVES, G.ANY, K.BOUNDED, order=O.KEEPS) for n in ("tanh", "erf")),
    *(_spec(n, R.PRESERVES, G.ANY, K.BOUNDED) for n in ("sin", "cos")),
    # Arithmetic.
    *(_spec(n, R.PRESERVES, G.ANY, K.DIVISION, K.ARITHMETIC, same_dtype=True) for n in (
        "divide", "truediv", "div_no_nan", "realdiv", "divide_no_nan")),
    *(_spec(n, R.PRESERVES, G.ANY, K.ADD, K.ARITHMETIC, same_dtype=True) for n in ("add", "subtract")),
    _spec("add_n", R.PRESERVES, G.ANY, K.ADD, K.ARITHMETIC, same_dtype=True, tensor_list=True),
    _spec("multiply", R.PRESERVES, G.ANY, K.ARITHMETIC, same_dtype=True),
    _spec("negative", R.PRESERVES, G.ANY, K.NEGATIVE),
    # (a - b)²: a square (TF 2.21 raises on float16 next to float32, as for any binary op of TensorFlow).
    _spec("squared_difference", R.PRESERVES, G.NONNEGATIVE, K.SQUARE, same_dtype=True),
    _spec("reciprocal", R.PRESERVES, G.ANY, K.RECIPROCAL),
    _spec("maximum", R.PRESERVES, G.ANY, K.FLOOR, same_dtype=True),
    _spec("minimum", R.PRESERVES, G.ANY, K.CEILING, same_dtype=True),
    *(_spec(n, R.PRESERVES, G.ANY, K.CLIP) for n in ("clip_by_value", "clip")),
    *(_spec(n, R.PRESERVES, G.ANY, K.MATMUL, same_dtype=True) for n in ("matmul", "linalg.matmul", "tensordot",
                                                                        "dot")),
    _spec("einsum", R.PRESERVES, G.ANY, K.MATMUL, dtype_args=(1, 2, 3), same_dtype=True),
    # Linear algebra with no float16 kernel (TF 2.21 CPU, a float16 (4, 4) matrix, eager and in a tf.function: each
    # raised NotFoundError / InvalidArgumentError; qr and inv have one). The namespace's own ops only: keras.ops wrap them.
    *(_spec(n, R.PRESERVES, elementwise=False, float16_kernel=False, label=n) for n in (
        "linalg.eigh", "linalg.eigvalsh", "linalg.cholesky", "linalg.svd", "linalg.det", "linalg.slogdet",
        "linalg.logdet", "linalg.solve", "linalg.triangular_solve", "linalg.lstsq", "linalg.expm", "linalg.pinv",
        "linalg.cholesky_solve")),
    # Convolutions (input, kernel) and paddings (input, sizes): the input's dtype.
    *(_spec(n, R.PRESERVES, dtype_args=(0, 1)) for n in ("conv1d", "conv2d", "conv3d", "depthwise_conv2d",
                                                       "separable_conv2d", "conv2d_transpose")),
    *(_spec(n, R.PRESERVES, G.FOLLOWS, **_UNARY) for n in ("spatial_2d_padding", "spatial_3d_padding",
                                                           "temporal_padding", "pad")),
)

# Calls that run one of two callables and return its result (the positions/keywords of the callables):
# `tf.cond(pred, true_fn, false_fn)`, `keras.ops.cond`, tf_keras' `control_flow_util.smart_cond` (tf_keras
# resolves as keras.src), TensorFlow's `__internal__.smart_cond.smart_cond`.
BRANCHES: dict[str, tuple[tuple[int, str], ...]] = {
    name: ((1, "true_fn"), (2, "false_fn")) for name in (
        "tensorflow.cond", "tensorflow.__internal__.smart_cond.smart_cond", "keras.ops.cond", "keras.src.ops.cond",
        "keras.src.utils.control_flow_util.smart_cond", "keras.src.utils.tf_utils.smart_cond")
}

# Loops that call a body function with their loop variables, positionally, first with the initial values:
# `tf.while_loop(cond, body, loop_vars)` (TF 2.21: body(*loop_vars)), `keras.ops.while_loop(cond, body, loop_vars)`.
# The positions/keywords of (body, loop_vars).
LOOPS: dict[str, tuple[tuple[int, str], tuple[int, str]]] = {
    name: ((1, "body"), (2, "loop_vars")) for name in (
        "tensorflow.while_loop", "tensorflow.compat.v1.while_loop", "keras.ops.while_loop", "keras.src.ops.while_loop")
}

# tf.data.Dataset methods that trace the function they are given into a graph (TF 2.21: map, flat_map, interleave,
# filter run it as a tf.function would, on the elements' tensors): the position and keyword of that function.
# Such a function is a float16 region when it casts to float16 itself (`tf.cast(x, tf.float16)` then `+ 1e-8`).
DATASET_FUNCTIONS: dict[str, tuple[int, str]] = {
    "map": (0, "map_func"), "flat_map": (0, "map_func"), "interleave": (0, "map_func"), "filter": (0, "predicate"),
}
# The namespace whose calls build a tf.data pipeline (`tf.data.Dataset.from_tensor_slices`, `tf.data.TFRecordDataset`).
DATASET_NAMESPACE = "tensorflow.data."

# Calls that apply a function to every leaf of a structure, by the position of that function:
# `tf.nest.map_structure(fn, x)`, `tf.nest.map_structure_up_to(shallow, fn, x)`, Keras 3's `tree.*` twins.
MAP_STRUCTURE: dict[str, int] = {
    **{f"{ns}.map_structure": 0 for ns in ("tensorflow.nest", "keras.tree", "keras.src.tree")},
    **{f"{ns}.map_structure_up_to": 1 for ns in ("tensorflow.nest", "keras.tree", "keras.src.tree")},
}

TABLE: dict[str, OpSpec] = {}
_BY_SHORT: dict[str, OpSpec] = {}
for _op in _TABLE:
    TABLE.setdefault(_op.name, _op)
    _BY_SHORT.setdefault(_op.short, _op)
del _op

# The TensorFlow graph op types of the ops above, by the names the table lists them under: what a traced graph,
# ``tf.debugging.enable_check_numerics`` and a run-time error name an op (``mpfix verify``/``repair`` find its
# expression on a source line by them). TF 2.21 runs ``matmul``/``dot`` of batches as BatchMatMulV2 and may lower an
# ``einsum`` to a matmul.
GRAPH_OPS: dict[str, tuple[str, ...]] = {
    "Exp": ("exp",), "Expm1": ("expm1",), "Log": ("log",), "Log1p": ("log1p",), "Pow": ("pow",),
    "Square": ("square",), "Sqrt": ("sqrt",), "Rsqrt": ("rsqrt",), "Reciprocal": ("reciprocal",),
    "Sum": ("reduce_sum", "sum"), "Mean": ("reduce_mean", "mean"), "Prod": ("reduce_prod", "prod"),
    "L2Loss": ("l2_loss",), "Cumsum": ("cumsum",), "UnsortedSegmentSum": ("unsorted_segment_sum",),
    "SegmentSum": ("segment_sum",), "SquaredDifference": ("squared_difference",),
    "MatMul": ("matmul", "dot", "einsum"), "BatchMatMulV2": ("matmul", "dot", "einsum"), "Einsum": ("einsum",),
    "Softmax": ("softmax",), "LogSoftmax": ("log_softmax",),
    "Mul": ("multiply",), "AddV2": ("add",), "Add": ("add",), "Sub": ("subtract",), "RealDiv": ("divide", "truediv"),
    "Maximum": ("maximum",), "Minimum": ("minimum",), "ConcatV2": ("concat",), "Pack": ("stack",), "Cast": ("cast",),
}
# Python's operators, by the graph ops they build.
OPERATOR_OPS: dict[str, tuple[str, ...]] = {
    "+": ("AddV2", "Add"), "-": ("Sub",), "*": ("Mul",), "/": ("RealDiv",), "**": ("Pow",),
    "@": ("MatMul", "BatchMatMulV2"),
}


def graph_specs(graph_op: str) -> list[OpSpec]:
    """The table's specs of the ops a graph op type computes (``BatchMatMulV2``: matmul, dot, einsum)."""
    return [spec for name in GRAPH_OPS.get(graph_op, ()) if (spec := by_short_name(name)) is not None]


class Namespace(Enum):
    """Whose op a resolved callee is: one op name can compute differently in each library."""

    TENSORFLOW = auto()  # tensorflow.*, tensorflow.compat.v1.*
    KERAS_OPS = auto()  # Keras 3: keras.ops.*, keras.src.ops.*, keras.random.*
    KERAS_BACKEND = auto()  # tf_keras' backend module (Keras 3's keras.backend has no math): thin TF wrappers


# Keras 3's backend packages (`keras.src.backend.numpy.add`, `backend.nn.softmax`; keras.src folds to keras) are the
# ops keras.ops call, with keras.ops' promotion; tf_keras' backend is one module of functions (`backend.dot`).
_KERAS3_BACKEND_PACKAGES = ("numpy", "nn", "math", "linalg", "core", "image", "random", "tensorflow", "jax", "torch",
                            "common", "openvino")
_NAMESPACE_PREFIXES = (("tensorflow.", Namespace.TENSORFLOW), ("keras.ops.", Namespace.KERAS_OPS),
                       ("keras.src.ops.", Namespace.KERAS_OPS), ("keras.random.", Namespace.KERAS_OPS),
                       *((f"{ns}backend.{package}.", Namespace.KERAS_OPS) for ns in ("keras.", "keras.src.")
                         for package in _KERAS3_BACKEND_PACKAGES),
                       ("keras.backend.", Namespace.KERAS_BACKEND), ("keras.src.backend.", Namespace.KERAS_BACKEND))


class Mixing(Enum):
    """What a namespace's ops do with a float16 and a float32 tensor operand."""

    REFUSES = auto()  # raises (no promotion): a float16 operand next to a float32 one is a mix, like ``x16 * y32``
    PROMOTES = auto()  # computes in the promoted dtype (float32)


# Run on TF 2.21 CPU, Keras 3.15.1 and tf_keras 2.21 with a float16 and a float32 (2, 2) tensor: tf.add/concat/matmul
# raise InvalidArgumentError; keras.ops add/subtract/matmul/concatenate/where/maximum (and keras.src.backend.numpy.add)
# return float32; tf_keras backend.concatenate/dot/maximum/minimum/stack (tf.concat, tf.matmul, ...) raise.
MIXING: dict[Namespace, Mixing] = {Namespace.TENSORFLOW: Mixing.REFUSES, Namespace.KERAS_OPS: Mixing.PROMOTES,
                                   Namespace.KERAS_BACKEND: Mixing.REFUSES}

# Where one namespace's op computes unlike the op of the same name the table lists (sources of Keras 3.15.1 and
# tf_keras 2.21; TF 2.21 CPU on 4096 float16 values of deviation 10): that namespace's spec.
# - Keras 3 `keras.ops.var` casts float16 to float32, takes `tf.math.reduce_variance` and casts back (100.0); tf_keras'
#   `backend.var` is `reduce_variance` in float16 (inf): the listed `var`. (`keras.ops.std` is `reduce_std` as it is.)
# - tf_keras' `backend.mean` is `tf.reduce_mean`, which sums in float16 (a mean of squares: inf); Keras 3's
#   `keras.ops.mean` sums in float32 (100.0): the listed `mean`.
BY_NAMESPACE: dict[tuple[Namespace, str], OpSpec] = {
    (Namespace.KERAS_OPS, "var"): _spec("var", R.PRESERVES, G.NONNEGATIVE, **_UNARY),
    (Namespace.KERAS_OPS, "numpy.var"): _spec("var", R.PRESERVES, G.NONNEGATIVE, **_UNARY),
    (Namespace.KERAS_BACKEND, "mean"): _spec("mean", R.PRESERVES, G.FOLLOWS, K.MEAN, K.LONG_MEAN, **_UNARY),
}


def namespace(resolved: str | None) -> Namespace | None:
    """The library a resolved callee belongs to (``keras.ops.var`` → ``KERAS_OPS``); None outside them."""
    for prefix, space in _NAMESPACE_PREFIXES:
        if resolved and resolved.startswith(prefix):
            return space
    return None


def refuses_mixed(resolved: str | None) -> bool:
    """The resolved callee's namespace raises on a float16 operand next to a float32 one (``MIXING``): with a
    ``same_dtype`` spec, its operands must share one dtype; with an elementwise spec, a float32 result proves its
    tensor operands float32."""
    space = namespace(resolved)
    return space is not None and MIXING[space] is Mixing.REFUSES


NAMESPACES = ("tensorflow.math.", "tensorflow.", "keras.ops.numpy.", "keras.ops.nn.", "keras.ops.", "keras.random.",
              "keras.backend.", "keras.src.ops.")
_KERAS_RANDOM = "keras.random."


def op_name(resolved: str | None) -> str | None:
    """``tensorflow.math.reduce_sum`` → ``reduce_sum``; ``keras.random.normal`` → ``random.normal``; else None."""
    if not resolved:
        return None
    if resolved.startswith("tensorflow.compat.v1.") or resolved.startswith("tensorflow.compat.v2."):
        resolved = "tensorflow." + resolved[len("tensorflow.compat.v1."):]
    if resolved.startswith(_KERAS_RANDOM):
        return "random." + resolved[len(_KERAS_RANDOM):]
    for prefix in NAMESPACES:
        if resolved.startswith(prefix):
            return resolved[len(prefix):]
    for prefix in _KNOWN_ONLY:
        if resolved.startswith(prefix):
            # tf_keras' backend functions (`backend.relu`, `backend.mean`; tf_keras resolves as keras.src), Keras 3's
            # backend module and `keras.activations`: only the ops this table lists (the backend module also
            # holds dtype utilities).
            op = resolved[len(prefix):]
            return op if op in TABLE or op in SPELLING_OPS else None
    return None


_KNOWN_ONLY = ("keras.src.backend.", "keras.src.activations.", "keras.activations.")
# Keyword names of ops' tensor operands -> their position (tf.matmul(a=, b=), tf.math.add(x=, y=), ops.add(x1=, x2=)).
TENSOR_KEYWORDS = {"a": 0, "b": 1, "x": 0, "y": 1, "x1": 0, "x2": 1, "input": 0, "tensor": 0, "inputs": 0,
                   "query": 0, "key": 1, "value": 2}  # ops.dot_product_attention(query=, key=, value=)
# Functions of dtype *names*, not tensors: `result_type(inputs.dtype, "float32")` is the promoted dtype.
SPELLING_OPS = frozenset({"result_type"})


_DEFAULTS: dict[str, OpSpec] = {}


def spec_of(op: str) -> OpSpec:
    """The spec of an op path (``nn.softplus``, ``reduce_sum``); a ``PRESERVES`` default when unlisted."""
    found = TABLE.get(op) or TABLE.get(op.rsplit(".", 1)[-1])
    if found is None:
        found = _DEFAULTS.get(op)
        if found is None:
            found = _DEFAULTS[op] = OpSpec(op)
    return found


def lookup(resolved: str | None) -> OpSpec | None:
    """The spec of a resolved callee (``tensorflow.math.softplus``); None when it is no TF/Keras op. A namespace's
    own spec (``BY_NAMESPACE``) comes before the op of the same name."""
    op = op_name(resolved)
    if op is None:
        return None
    return BY_NAMESPACE.get((namespace(resolved), op)) or spec_of(op)  # type: ignore[arg-type]


def known(resolved: str | None) -> OpSpec | None:
    """Like ``lookup``, but None for ops the table does not list."""
    op = op_name(resolved)
    if op is None:
        return None
    return BY_NAMESPACE.get((namespace(resolved), op)) or TABLE.get(op) or \
        TABLE.get(op.rsplit(".", 1)[-1])  # type: ignore[arg-type]


def by_short_name(name: str) -> OpSpec | None:
    """The listed spec of an op spelled without its namespace (``l2_loss`` for ``tf.nn.l2_loss``); None when none
    is listed. For code that has only a call's last name, as ``mpfix repair`` does."""
    return _BY_SHORT.get(name)


def named(*kinds: Kind) -> frozenset[str]:
    """Short names of the ops of any of ``kinds`` (for triggers and docs)."""
    return frozenset(spec.short for spec in TABLE.values() if spec.has(*kinds))


# keras.ops that hand a float16 tensor to such a TensorFlow op as it is (Keras 3.15.1, TF backend, ran: keras.ops.stft
# TypeError "Expected `float32` or `float64`", keras.ops.rfft ValueError "RFFT requires tf.float32"). Other keras.ops
# wrappers of ops without a float16 kernel are not listed: not probed.
KERAS_OPS_WITHOUT_FLOAT16 = frozenset({"stft", "rfft", "math.stft", "math.rfft"})


def float16_fails_in(resolved: str | None) -> bool:
    """A float16 input reaches the op's missing kernel through this spelling: TensorFlow's own ops, and the
    keras.ops listed in ``KERAS_OPS_WITHOUT_FLOAT16``."""
    space = namespace(resolved)
    return space is Namespace.TENSORFLOW or (space is Namespace.KERAS_OPS and
                                             op_name(resolved) in KERAS_OPS_WITHOUT_FLOAT16)


def without_float16_kernel() -> frozenset[str]:
    """Short names of the ops TensorFlow has no float16 kernel for (``eigh``, ``svd``: MP208's triggers)."""
    return frozenset(spec.short for spec in TABLE.values() if not spec.float16_kernel)


def _trigger_words() -> list[str]:
    names = {spec.short for spec in TABLE.values()
             if spec.result in (Result.FLOAT32, Result.VALUE, Result.RANGE, Result.CAST)}
    return sorted(names, key=lambda n: (-len(n), n))


# The prefilter of rules about float32 values: a float32 spelling, or a call of any creator or cast.
FLOAT32_TRIGGERS = ("float32", "float64", "floatx", re.compile(
    r"\.(?:" + "|".join(re.escape(w) for w in _trigger_words()) + r")\s*\("))


# Python-side math on numbers (`BBOX_XFORM_CLIP = np.log(1000. / 16.)`): folded to a number where a rule needs a
# constant's value (`_float16_scope.folded`). One argument each.
PYTHON_MATH = {
    "math.log": math.log, "numpy.log": math.log, "math.log2": math.log2, "numpy.log2": math.log2,
    "math.log10": math.log10, "numpy.log10": math.log10, "math.sqrt": math.sqrt, "numpy.sqrt": math.sqrt,
    "math.exp": math.exp, "numpy.exp": math.exp,
}
