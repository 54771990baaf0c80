"""Domain knowledge for `comms`, as data: collective kinds and their bus-bandwidth factors,
element sizes, message-size buckets and link peaks.

Bus bandwidth follows nccl-tests' PERFORMANCE.md: ``algbw = bytes / time`` and
``busbw = algbw * factor(n)`` for a group of n ranks, so that busbw compares with the
hardware's link bandwidth whatever the collective. ``bytes`` is nccl-tests' message size: the
larger of the input and output (an all-gather's output, a reduce-scatter's input).
"""

from __future__ import annotations

from dataclasses import dataclass

# factor(n) for each kind, as (a, b): factor = a * (n - 1) / n, or b when a is None.
# all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce and
# point-to-point 1; a barrier moves no data (no bandwidth).
BUS_FACTORS: dict[str, tuple[float | None, float | None]] = {
    "all_reduce": (2.0, None),
    "all_gather": (1.0, None),
    "reduce_scatter": (1.0, None),
    "all_to_all": (1.0, None),
    "broadcast": (None, 1.0),
    "reduce": (None, 1.0),
    "send_recv": (None, 1.0),
    "gather": (1.0, None),
    "scatter": (1.0, None),
    "barrier": (None, None),
}


@dataclass(frozen=True)
class KindRule:
    pattern: str  # regex, case-insensitive, over a collective's name
    kind: str  # a key of BUS_FACTORS, or "" for calls that are not collectives


# First match wins. Names as Kineto writes them in "Collective name" (allreduce,
# _allgather_base, reduce_scatter_tensor_coalesced, all_to_allv, ...), as NCCL/RCCL kernel
# names spell them (ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclKernel_SendRecv_...) and as
# c10d ops do (c10d::alltoall_base_).
KIND_RULES: tuple[KindRule, ...] = (
    # A work handle's wait is not a collective: it moves nothing.
    KindRule(r"^wait$", ""),
    KindRule(r"all_?reduce", "all_reduce"),
    KindRule(r"all_?gather", "all_gather"),
    KindRule(r"reduce_?scatter", "reduce_scatter"),
    KindRule(r"all_?to_?all", "all_to_all"),
    KindRule(r"broadcast", "broadcast"),
    KindRule(r"barrier", "barrier"),
    KindRule(r"send|recv", "send_recv"),
    KindRule(r"(^|_)reduce($|_)", "reduce"),
    KindRule(r"(^|_)gather($|_)", "gather"),
    KindRule(r"(^|_)scatter($|_)", "scatter"),
)

# Bytes per element of each "dtype" Kineto writes (c10 scalar type names).
DTYPE_BYTES: dict[str, int] = {
    "Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
    "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
    "UInt16": 2, "UInt32": 4, "UInt64": 8,
}  # fmt: skip

# Where a call's message size comes from, in the order a tie is settled (the
# ``bytes_source`` column): the collective's own args (``In/Out msg nelems`` x ``dtype``), else
# the largest tensor among the recorded shapes (``Input Dims`` x ``Input type``) of the op that
# launched it (record_param_comms, or the c10d op where none sits between), of that op's
# parent (the c10d op: an all-gather's output, an all-to-all's larger side), and of the
# ``nccl:<collective>`` annotation inside it (the only place older traces give an all-reduce's
# size: its ops record a TensorList without shapes).
BYTES_SOURCES: tuple[str, ...] = (
    "msg_nelems",
    "launch_op_dims",
    "parent_op_dims",
    "nccl_annotation_dims",
)
# Where a call's group size comes from, first found first (the ``group_size_source`` column):
# the call's own ``Group size`` arg; for the kinds in GROUP_FROM_RATIO the ratio of its larger
# message to its smaller (``In/Out msg nelems``, else the recorded shapes of one op: an
# all-gather's output holds one input per rank); the rank's ``distributedInfo``: the one size of
# its process groups of more than one rank (``pg_config``), else its world size where no call
# shows a group of another size.
GROUP_SOURCES: tuple[str, ...] = ("args", "msg_ratio", "shape_ratio", "pg_config", "world_size")
GROUP_FROM_RATIO: tuple[str, ...] = ("all_gather", "reduce_scatter")
# The annotation NCCL's process group records inside a collective's op.
NCCL_ANNOTATION_PREFIX = "nccl:"

# ``Input type`` strings (as the roofline formulas' ELEMENT_TYPES name them) as the c10 scalar type
# names that ``dtype`` uses, so that one column speaks one language whatever the source.
INPUT_TYPE_DTYPES: dict[str, str] = {
    "float": "Float", "double": "Double", "c10::Half": "Half", "c10::BFloat16": "BFloat16",
    "long int": "Long", "long": "Long", "int": "Int", "short int": "Short", "short": "Short",
    "signed char": "Char", "unsigned char": "Byte", "bool": "Bool",
    "c10::complex<float>": "ComplexFloat", "c10::complex<double>": "ComplexDouble",
    "c10::Float8_e4m3fn": "Float8_e4m3fn", "c10::Float8_e5m2": "Float8_e5m2",
    "c10::Float8_e4m3fnuz": "Float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "Float8_e5m2fnuz",
}  # fmt: skip

# Message-size buckets: (label, lower bound in bytes); a message falls in the last bucket whose
# bound it reaches.
SIZE_BUCKETS: tuple[tuple[str, int], ...] = (
    ("< 64 KiB", 0),
    ("64 KiB - 1 MiB", 64 * 2**10),
    ("1 - 16 MiB", 2**20),
    ("16 - 256 MiB", 16 * 2**20),
    (">= 256 MiB", 256 * 2**20),
)


@dataclass(frozen=True)
class LinkPeak:
    gpu: str
    name_pattern: str  # regex over deviceProperties' name
    gbps: float  # GPU-to-GPU bandwidth in one direction, GB/s
    source: str


# The intra-node link's peak in one direction, what nccl-tests' busbw approaches within a node
# (across nodes the network is the limit, which a trace does not describe).
LINK_PEAKS: tuple[LinkPeak, ...] = (
    LinkPeak("H200 SXM", r"H200", 450.0, "NVLink 4: 900 GB/s bidirectional (H200 datasheet)"),
    LinkPeak("H100 SXM", r"H100 80GB HBM3|H100 SXM", 450.0,
             "NVLink 4: 900 GB/s bidirectional (H100 datasheet)"),
    LinkPeak("H800 SXM", r"H800", 200.0, "NVLink: 400 GB/s bidirectional (H800 datasheet)"),
    LinkPeak("A100 SXM", r"A100-SXM|A100-PG509|A100 80GB HBM2e|A100-SXM4", 300.0,
             "NVLink 3: 600 GB/s bidirectional (A100 datasheet)"),
    LinkPeak("B200", r"B200", 900.0, "NVLink 5: 1.8 TB/s bidirectional (B200 datasheet)"),
)  # fmt: skip
