"""Typed, frozen spec objects: chips and systems.

Every field carries a description (it becomes the JSON Schema shown in editors). Unknown keys
are rejected, values are not coerced between types, and quantities are strings with units,
checked for dimension (see ``units.py``). Nothing downstream of the loader touches raw dicts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pint
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from . import units
from .quantities import QUANTITIES

NAME_PATTERN = r"^[a-z0-9][a-z0-9.-]*$"

#: Input formats a tensor engine can list, each described in hdl/numerics/formats.py (the MX
#: block formats are in the array's RTL but not in the core's instruction set).
FORMATS = ("int8", "fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "cfp8", "bf16", "fp16", "tf32", "fp32",
           "mxfp8", "mxfp8_e5m2", "mxfp4")
ACTIVATIONS = ("identity", "relu", "exp", "gelu", "silu", "sigmoid", "tanh", "softplus", "erf",
               "reciprocal", "rsqrt", "sqrt", "log", "square", "abs", "mish", "gelu_tanh", "sin",
               "cos", "arctan", "gelu_sigmoid", "silu_dx", "gelu_sigmoid_dx", "gelu_dx",
               "erf_dx")
#: Activations whose argument is reduced (on the fp32 exponent, modulo pi/2 or to 1/x): their
#: polynomial's range is fixed by the reduction.
RANGE_REDUCED = ("exp", "reciprocal", "rsqrt", "sqrt", "log", "sin", "cos", "arctan")
LEVELS = ("core", "chip", "instance", "server", "cluster")
#: Output formats of the vector engine's cast: fp32 (no cast) or a narrower float format.


def _quantity(dimension: str):
    dim, what = units.DIMENSIONS[dimension]

    def parse(value):
        if isinstance(value, pint.Quantity):
            return value
        try:
            q = units.parse(value, dimension)
        except units.UnitParseError as exc:
            raise PydanticCustomError("quantity", str(exc)) from None
        if q.magnitude <= 0:
            raise PydanticCustomError("quantity", f"expected a positive {what[2:]}, "
                                                  f"found {value!r}")
        return q

    return Annotated[
        Any,
        BeforeValidator(parse),
        PlainSerializer(lambda q: units.show(q, digits=12), return_type=str),
        WithJsonSchema({"type": "string", "pattern": r"^\s*[0-9.eE+-]+\s*[A-Za-z/ ]+$",
                        "description": f"{what[0].upper()}{what[1:]}"}),
    ]


Bytes = _quantity("bytes")
Bandwidth = _quantity("bandwidth")
Frequency = _quantity("frequency")
Price = _quantity("price")
Time = _quantity("time")
PosInt = Annotated[int, Field(gt=0)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Format = Literal[FORMATS]  # type: ignore[valid-type]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True,
                              use_attribute_docstrings=True)


class Source(Strict):
    """A published document that figures are taken from."""

    title: str = Field(description="Title of the document or page.")
    where: str = Field(description="Where it was published (site, repository path or file).")
    kind: Literal["vendor", "article", "press"] = Field(
        description="vendor documentation, a third-party article, or a press statement.")


class Claim(Strict):
    """A published figure, recorded with its source; the system model checks it."""

    quantity: str = Field(description="Name of the figure (see `gen schema` for the list), "
                                      "e.g. 'compute.bf16' or 'memory.capacity'.")
    value: str | int | float = Field(description="The figure as published, with its unit "
                                                 "('667 TFLOPS', '96 GiB') or a plain number.")
    source: str = Field(description="Key of the source in specs/sources.yaml.")
    level: Literal[LEVELS] | None = Field(  # type: ignore[valid-type]
        None, description="Level the figure is about; default: the spec's own level.")
    note: str = Field("", description="Context: the wording of the source, caveats.")
    tolerance: float = Field(0.02, ge=0, le=1, description="Relative difference still "
                                                           "counted as agreement.")
    prefixes: Literal["as-written", "binary"] = Field(
        "as-written", description="'binary' reads the source's decimal prefixes (TB) as binary "
                                  "(TiB), for sources that write TB for TiB.")

    @field_validator("quantity")
    @classmethod
    def _known_quantity(cls, v: str) -> str:
        if v not in QUANTITIES:
            raise PydanticCustomError("choice", "expected a known quantity, found '{found}'",
                                      {"found": v, "choices": sorted(QUANTITIES)})
        return v

    @model_validator(mode="after")
    def _value_dimension(self):
        dimension = QUANTITIES[self.quantity].dimension
        if dimension in ("count", "ratio"):
            if isinstance(self.value, str):
                try:
                    float(self.value.replace(",", ""))
                except ValueError:
                    raise PydanticCustomError(
                        "claim", "expected a plain number for {q}, found '{v}'",
                        {"q": self.quantity, "v": self.value}) from None
            return self
        if not isinstance(self.value, str):
            raise PydanticCustomError(
                "claim", "expected {what} for {q}, found '{v}' (no unit)",
                {"what": units.DIMENSIONS[dimension][1], "q": self.quantity, "v": self.value})
        try:
            units.parse(self.value, dimension)
        except units.UnitParseError as exc:
            raise PydanticCustomError("claim", "{q}: {msg}",
                                      {"q": self.quantity, "msg": str(exc)}) from None
        return self

    def magnitude(self) -> pint.Quantity | float:
        """The claimed value as a quantity (binary prefixes applied where asked)."""
        dimension = QUANTITIES[self.quantity].dimension
        if dimension in ("count", "ratio"):
            return float(str(self.value).replace(",", ""))
        text = self.value
        if self.prefixes == "binary":
            for p in "KMGTPE":
                text = text.replace(f"{p}B", f"{p}iB").replace("kB", "KiB")
        return units.parse(text, dimension)


class Assumption(Strict):
    """A parameter that was never published, with the reasoning behind the value chosen."""

    key: str = Field(description="Key path of the assumed field, e.g. 'core.tensor.rows'.")
    note: str = Field(description="Why this value: what it was inferred from.")


class SparsitySpec(Strict):
    patterns: list[str] = Field(description="Structured-sparsity patterns (N:M), e.g. '2:4'.")
    speedup: float = Field(gt=0, description="Sparse over dense-BF16 throughput of the array.")

    @field_validator("patterns")
    @classmethod
    def _nm(cls, v: list[str]) -> list[str]:
        for p in v:
            n, _, m = p.partition(":")
            if not (n.isdigit() and m.isdigit() and 0 < int(n) < int(m)):
                raise PydanticCustomError("pattern", "expected N:M with 0 < N < M, found '{p}'",
                                          {"p": p})
        return v


class Cfp8Spec(Strict):
    """Configurable FP8: an e4m3 or e5m2 layout with a chosen exponent bias."""

    layout: Literal["e4m3", "e5m2"] = Field("e4m3", description="Exponent/mantissa layout.")
    bias: int = Field(7, ge=1, le=30, description="Exponent bias.")


class TensorSpec(Strict):
    """The tensor engine: a weight-stationary systolic array of processing elements."""

    rows: PosInt = Field(description="PE rows: the contraction (partition) dimension K.")
    cols: PosInt = Field(description="PE columns: the stationary free dimension M.")
    clock: Frequency = Field(description="Clock of the array.")
    formats: list[Format] = Field(min_length=1, description="Input formats the array accepts.")
    rates: dict[Format, PosFloat] = Field(
        default_factory=dict,
        description="Multiply-accumulates per PE per cycle by input format (1 when not listed;"
                    " 2 for double-rate FP8, 0.25 for FP32 at a quarter rate).")
    moving_max: PosInt = Field(512, description="Largest moving free size N of one matmul.")
    load_columns: PosInt = Field(
        4, description="Stationary columns a LoadStationary takes per cycle, where a "
                       "MultiplyMoving takes one moving column: the load runs up to 4x faster "
                       "than a multiply of the same free size (NKI architecture guide).")
    row_tiles: list[PosInt] = Field(default_factory=lambda: [1],
                                    description="Ways the array can be split into row tiles.")
    sparsity: SparsitySpec | None = Field(None, description="Structured sparsity support.")
    cfp8: Cfp8Spec | None = Field(None, description="Layout and exponent bias of cFP8 inputs "
                                                    "in the RTL (the bias is configurable).")

    @model_validator(mode="after")
    def _cfp8_listed(self):
        if self.cfp8 is not None and "cfp8" not in self.formats:
            raise PydanticCustomError("rates", "expected cfp8 settings only with cfp8 in the "
                                               "formats, found them without")
        return self

    @model_validator(mode="after")
    def _rates_listed(self):
        for fmt in self.rates:
            if fmt not in self.formats:
                raise PydanticCustomError("rates", "expected a rate only for a listed format, "
                                                   "found '{f}' (formats: {fs})",
                                          {"f": fmt, "fs": ", ".join(self.formats)})
        return self


class VectorSpec(Strict):
    """The vector engine: one lane per SBUF partition, elements streamed over time."""

    clock: Frequency = Field(description="Clock of the engine.")
    lanes: PosInt = Field(description="Lanes (partitions processed in parallel).")
    ops_per_lane_cycle: float = Field(1.0, gt=0, description="FP32 operations per lane per "
                                                             "cycle.")
    elements_per_cycle: float = Field(1.0, gt=0, description="Elements one lane streams per "
                                                             "cycle in an instruction.")
    transpose: PosInt = Field(
        32, description="Largest tile the engine transposes between partitions and free "
                        "elements, each side: nki.isa.nc_transpose on the Vector Engine takes "
                        "(32, 32) or smaller [ISA: nc_transpose].")
    functions: list[Literal[ACTIVATIONS]] = Field(  # type: ignore[valid-type]
        default_factory=list,
        description="Activation functions the engine evaluates itself, as the scalar engine "
                    "does (the same approximations; each must be one of core.scalar.functions): "
                    "NeuronCore-v4's exp [ISA: exponential].")


class ApproximationSpec(Strict):
    """How one activation function is approximated; unset fields keep the generator's
    default for that function."""

    range: list[float] | None = Field(
        None, min_length=2, max_length=2,
        description="Input range [lo, hi) fitted; not for exp, reciprocal, rsqrt, sqrt, log, "
                    "sin, cos and arctan, whose argument is reduced to a fixed range.")
    segments: PosInt | None = Field(
        None, description="Segments over the range (per octave of the reduced argument for "
                          "reciprocal, rsqrt, sqrt and log, a power of two).")
    degree: int | None = Field(None, ge=0, le=8, description="Degree of each polynomial.")
    max_rel_error: float | None = Field(
        None, gt=0, lt=1, description="Bound on this function's max relative error over the "
                                      "whole fp32 domain; unset: the engine's max_rel_error.")

    @field_validator("range")
    @classmethod
    def _ordered(cls, v):
        if v is not None and not v[0] < v[1]:
            raise PydanticCustomError("pattern", "expected [lo, hi] with lo < hi, found {v}",
                                      {"v": v})
        return v


class ScalarSpec(Strict):
    """The scalar (activation) engine: op(data * scale + bias), op a piecewise polynomial."""

    clock: Frequency = Field(description="Clock of the engine.")
    lanes: PosInt = Field(description="Lanes (partitions processed in parallel).")
    ops_per_lane_cycle: float = Field(1.0, gt=0, description="FP32 operations per lane per "
                                                             "cycle.")
    functions: list[Literal[ACTIVATIONS]] = Field(  # type: ignore[valid-type]
        min_length=1, description="Activation functions the engine evaluates.")
    max_rel_error: float = Field(
        2.0**-13, gt=0, lt=1,
        description="Bound on each function's max relative error |y - f| / |f| over the whole "
                    "fp32 domain, wherever the exact result f is a normal fp32 number (well "
                    "below bf16's half ulp, 2^-9, by default), unless approximations sets "
                    "another; the accuracy test and the datasheet hold the functions to it.")
    approximations: dict[Literal[ACTIVATIONS], ApproximationSpec] = Field(  # type: ignore
        default_factory=dict,
        description="Per-function range, segments and degree of the piecewise polynomials; "
                    "functions not listed use the generator's defaults.")

    @model_validator(mode="after")
    def _approximated_listed(self):
        for name, approx in self.approximations.items():
            if name not in self.functions:
                raise PydanticCustomError("rates", "expected approximations only for listed "
                                                   "functions, found '{f}'", {"f": name})
            if name in RANGE_REDUCED and approx.range is not None:
                raise PydanticCustomError(
                    "rates", "expected no range for {f} (its argument is reduced to a fixed "
                             "range), found {r}",
                    {"f": name, "r": approx.range})
        return self


class GpSimdSpec(Strict):
    """General-purpose SIMD cores beside the engines."""

    clock: Frequency = Field(description="Clock of the cores.")
    cores: PosInt = Field(description="Number of cores.")
    width: PosInt = Field(description="SIMD width of a core in bits.")
    local_memory: Bytes = Field(description="Local memory per core.")


class BufferSpec(Strict):
    """An on-core buffer organised in partitions (SBUF, PSUM)."""

    partitions: PosInt = Field(description="Number of partitions (rows).")
    partition_size: Bytes = Field(description="Bytes per partition.")
    banks: PosInt = Field(1, description="Banks per partition.")


class SharedPortSpec(Strict):
    """Engines that cannot access one memory at the same time."""

    engines: list[Literal["vector", "scalar", "gpsimd"]] = Field(
        min_length=2, description="The engines sharing the port.")
    memory: Literal["sbuf", "psum"] = Field(description="The memory the port reaches.")


class CoreCostSpec(Strict):
    """Fixed costs of the core's instructions, shared by the core simulator and the models.

    Cycles are of the clock of the engine that runs the instruction."""

    access_start: PosInt = Field(description="Cycles an engine spends starting an SBUF or "
                                             "PSUM access, paid once per instruction.")
    min_interval: PosInt = Field(description="Fewest cycles of the streaming part of a vector,"
                                             " scalar or GpSimd instruction.")
    dynamic_interval: PosInt | None = Field(
        None, description="Fewest cycles of the streaming part of a copy from a source at "
                          "an offset read at run time (TensorCopyDynamic).")
    stride_penalty: Bytes = Field(description="A minor-dimension stride wider than this "
                                              "halves an engine's access bandwidth.")
    semaphore_latency: Time = Field(description="From a semaphore increment to a waiting "
                                                "engine seeing it.")
    shared_ports: list[SharedPortSpec] = Field(
        default_factory=list, description="Engines whose accesses to a memory take turns.")
    op_cycles: dict[Literal["reciprocal", "rsqrt"],
                    Annotated[float, Field(ge=1, allow_inf_nan=False)]] = Field(
        default_factory=dict,
        description="Cycles an engine spends on each element of an operation its lanes do not "
                    "compute in one (the vector engine's reciprocal, GpSimd's rsqrt), in place "
                    "of one: the stream rule's work is multiplied by it.")


class CoreSpec(Strict):
    """One physical NeuronCore."""

    tensor: TensorSpec = Field(description="The tensor engine.")
    vector: VectorSpec = Field(description="The vector engine.")
    scalar: ScalarSpec = Field(description="The scalar (activation) engine.")
    gpsimd: GpSimdSpec | None = Field(None, description="The GpSimd engine (none on v1).")
    sbuf: BufferSpec = Field(description="State buffer (SBUF).")
    psum: BufferSpec = Field(description="Partial-sum buffer (PSUM).")
    costs: CoreCostSpec | None = Field(None, description="Fixed instruction costs (the core "
                                                         "simulator needs them).")
    semaphores: PosInt = Field(
        256, le=256, description="Hardware semaphores. Not published; an assumption: as many "
                                 "as SemSignal's 8-bit semaphore field names.")
    instructions: PosInt = Field(
        4096, description="Instruction words each engine's sequencer holds on chip, a ring "
                          "the host feeds as a longer stream runs. Not published; an "
                          "assumption: enough for the unrolled loops of one kernel tile "
                          "sequence, so that feeding it stays ahead of the engine.")

    @model_validator(mode="after")
    def _vector_functions_listed(self):
        for name in self.vector.functions:
            if name not in self.scalar.functions:
                raise PydanticCustomError(
                    "rates", "expected vector.functions among scalar.functions (one table of "
                             "approximations), found '{f}'", {"f": name})
        return self


class MemorySpec(Strict):
    """Device memory attached to the chip."""

    kind: Literal["hbm2e", "hbm3", "hbm3e", "ddr4"] = Field(description="Memory technology.")
    stacks: PosInt | None = Field(None, description="HBM stacks (none for DDR).")
    capacity: Bytes = Field(description="Capacity per chip.")
    bandwidth: Bandwidth = Field(description="Bandwidth per chip.")


class DmaSpec(Strict):
    engines: PosInt = Field(description="DMA engines per chip.")
    bandwidth: Bandwidth | None = Field(None, description="Aggregate DMA bandwidth per chip.")
    engine_bandwidth: Bandwidth | None = Field(None, description="Bandwidth of one DMA engine.")
    queues: PosInt | None = Field(None, description="DMA queues a NeuronCore's program can "
                                                    "issue to; in order within a queue.")
    latency: Time | None = Field(None, description="From a DMA's start (its semaphore) to its "
                                                   "first bytes moving.")
    packet_overhead: Bytes | None = Field(
        None, description="What an engine spends on each packet of a transfer (a contiguous "
                          "run of at most one partition's row) besides its bytes, as bytes at "
                          "the engine's bandwidth: a packet of b bytes takes the time of "
                          "max(b + packet_overhead, packet_minimum) bytes.")
    packet_minimum: Bytes | None = Field(
        None, description="The least time an engine spends on one packet, as bytes at its "
                          "bandwidth (the packet rate that bounds small transfers).")
    transpose: float | None = Field(
        None, gt=0, le=1,
        description="Where the engines transpose in hardware: a DMA transpose's throughput "
                    "against a copy's (a copy into SBUF whose partitions read consecutive "
                    "2- or 4-byte elements of its source, moved in blocks of 128 partitions "
                    "by 16 contiguous elements, each block whole). None: such a copy moves "
                    "element by element, a packet each.")


class LinkSpec(Strict):
    """NeuronLink chip-to-chip ports."""

    version: Literal["v1", "v2", "v3", "v4"] = Field(description="NeuronLink generation.")
    links: PosInt | None = Field(None, description="Ports per chip.")
    bandwidth: Bandwidth | None = Field(None, description="Aggregate bandwidth per chip.")
    width: PosInt = Field(256, description="RTL datapath width of a port, bits per cycle.")
    flit: PosInt = Field(256, description="Flit size in bits (a multiple of the width).")
    credits: PosInt = Field(16, description="Receive buffer depth in flits (credits).")
    max_packet: PosInt = Field(4096, description="Largest payload of one packet, bytes.")
    replay_depth: PosInt | None = Field(
        None, description="Transmit replay buffer depth in flits; default: as deep as the "
                          "receive buffer (credits).")
    ack_timeout: PosInt = Field(512, description="Link-clock cycles without acknowledgement "
                                                 "progress after which the transmitter "
                                                 "replays.")
    latency: PosInt = Field(16, description="Channel latency of a lane, link-clock cycles "
                                            "each way.")
    bit_error_rate: Annotated[float, Field(ge=0, lt=1)] = Field(
        0.0, description="Probability that a bit on a lane arrives flipped (the CRC catches "
                         "it and the packet is replayed); the default of the executed "
                         "collectives' fault model (gen run --bit-error-rate).")


class LncSpec(Strict):
    """Logical NeuronCore configuration: physical cores fused into one logical core."""

    options: list[Literal[1, 2]] = Field(description="Allowed LNC settings: 1 (each physical "
                                                     "core on its own) or 2 (two fused).")
    default: Literal[1, 2] = Field(description="The setting used unless one is chosen.")

    @model_validator(mode="after")
    def _default_listed(self):
        if self.default not in self.options:
            raise PydanticCustomError("lnc", "expected default to be one of the options {o}, "
                                             "found {d}", {"o": self.options, "d": self.default})
        return self


class RoundingSpec(Strict):
    modes: list[Literal["rne", "stochastic"]] = Field(
        description="Rounding modes of casts to narrower formats. Without 'stochastic' the "
                    "engines round to nearest even only: no random generators or stochastic "
                    "datapaths in their RTL, and the models refuse stochastic instructions.")
    rng: Literal["xorwow", "lfsr32"] = Field(
        "xorwow", description="Per-lane random generator of stochastic rounding (none where "
                              "the modes lack 'stochastic').")


class SimScale(Strict):
    """The scaled-down instance used in simulation (explicit, never silent)."""

    tensor_rows: PosInt = Field(8, description="Tensor array rows in simulation.")
    tensor_cols: PosInt = Field(8, description="Tensor array columns in simulation.")
    lanes: PosInt = Field(
        4, description="Vector and scalar lanes in simulation: of the units simulated alone, "
                       "and the activation lanes of the simulated core's scalar engine, which "
                       "serves its partitions in turn, this many at a time (each lane is a "
                       "whole floating-point pipeline with its function ROM; one per "
                       "partition would make the core's Verilator build several times "
                       "longer for no datapath not already covered by four).")
    link_width: PosInt = Field(64, description="Link datapath width in simulation, bits.")
    link_packet: PosInt = Field(8, description="Largest link packet in simulation, words.")
    link_credits: PosInt = Field(16, description="Link receive buffer in simulation, words.")
    link_replay_depth: PosInt | None = Field(
        None, description="Link replay buffer in simulation, words; default: as deep as the "
                          "receive buffer (link_credits), the rule of the full-scale link.")
    link_ack_timeout: PosInt = Field(256, description="Link acknowledgement timeout in "
                                                      "simulation, cycles.")
    tensor_moving_max: PosInt = Field(
        16, description="Largest moving free size N in simulation (at most the array's "
                        "moving_max): the PSUM bank depth of the simulated array.")
    partitions: PosInt = Field(
        16, description="SBUF and PSUM partitions of the simulated core (the full core's "
                        "128 cut down so that a cocotb run of the whole core stays short); "
                        "also the lanes of the core's vector engine.")
    sbuf_partition_bytes: PosInt = Field(
        4096, description="SBUF bytes per partition of the simulated core: room for the "
                          "working set of the library's kernels at simulation shapes (two "
                          "buffers of row tiles and their per-partition columns), read back "
                          "whole after every co-simulation run.")
    hbm_bytes: PosInt = Field(
        65536, description="Bytes of the external memory behind the simulated core's DMA "
                           "port (the testbench's AXI memory model).")
    instructions: PosInt = Field(
        256, description="Instruction words in each sequencer's ring of the simulated "
                         "core; a longer stream is fed by the host as it runs.")
    dma_queues: PosInt = Field(
        7, description="DMA queues of the simulated core: the seven (dma0 .. dma6) that the "
                       "GEMM kernels use (A on one queue, B spread over four, results "
                       "stored on two); the element-wise and normalisation kernels use "
                       "three.")
    semaphores: PosInt = Field(
        16, description="Hardware semaphores of the simulated core: more than the kernel "
                        "builder's one per stream.")


class AreaSpec(Strict):
    """Figures the area from synthesis (hdl/area.py) needs beyond the cells' own."""

    sram_bit: float = Field(
        gt=0, description="Area of one bit of on-chip SRAM (SBUF, PSUM, the units' buffers "
                          "and ROMs), its array's decoders, sense amplifiers and write drivers "
                          "included, in NAND2 equivalents (the unit of the gate weights of "
                          "hdl/area.py: the Nangate 45 nm NAND2_X1, 0.798 um^2).")


class ChipSpec(Strict):
    """One chip generation."""

    name: str = Field(pattern=NAME_PATTERN, description="Short name, e.g. 'trn2'.")
    title: str = Field(description="Product name, e.g. 'Trainium2'.")
    family: Literal["inferentia", "trainium"] = Field(description="Product family.")
    neuron_core: Literal["v1", "v2", "v3", "v4"] = Field(description="NeuronCore generation.")
    cores: PosInt = Field(description="Physical NeuronCores per chip.")
    core: CoreSpec = Field(description="One NeuronCore.")
    memory: MemorySpec = Field(description="Device memory.")
    dma: DmaSpec = Field(description="DMA engines.")
    cc_cores: PosInt | None = Field(None, description="Collective-communication cores.")
    neuronlink: LinkSpec = Field(description="Chip-to-chip interconnect.")
    lnc: LncSpec = Field(description="Logical NeuronCore settings.")
    rounding: RoundingSpec = Field(description="Rounding of casts.")
    sim: SimScale = Field(default_factory=SimScale, description="Simulation scale.")
    area: AreaSpec = Field(description="Area from synthesis: what the cells do not give.")
    claims: list[Claim] = Field(default_factory=list, description="Published figures.")
    assumptions: list[Assumption] = Field(default_factory=list,
                                          description="Unpublished parameters and why.")

    @property
    def kind(self) -> str:
        return "chip"


class TopologySpec(Strict):
    """How the members of a system are joined."""

    kind: Literal["none", "ring", "torus2d", "torus3d", "switch"] = Field(
        description="Graph of the chip-to-chip links.")
    dims: list[PosInt] = Field(default_factory=list, description="Torus dimensions.")

    @model_validator(mode="after")
    def _dims(self):
        want = {"torus2d": 2, "torus3d": 3, "ring": 1}.get(self.kind)
        if want is not None and len(self.dims) != want:
            raise PydanticCustomError("dims", "expected {w} dimensions for {k}, found {n}",
                                      {"w": want, "k": self.kind, "n": len(self.dims)})
        return self


class SystemSpec(Strict):
    """An instance, a server of instances, or a cluster."""

    name: str = Field(pattern=NAME_PATTERN, description="Short name, e.g. 'trn2.48xlarge'.")
    title: str = Field(description="Product name.")
    level: Literal["instance", "server", "cluster"] = Field(description="Level of the system.")
    member: str = Field(description="Spec this system is built of: a chip for an instance, "
                                    "an instance for a server, a server or instance for a "
                                    "cluster.")
    count: PosInt = Field(description="How many members.")
    topology: TopologySpec = Field(description="Links between the chips.")
    link_bandwidth: Bandwidth | None = Field(
        None, description="Chip-to-chip bandwidth per chip, when it differs from the chip's.")
    efa: Bandwidth | None = Field(None, description="EFA network bandwidth of the system.")
    efa_latency: Time | None = Field(
        None, description="Latency of one step of a collective over the system's EFA (its "
                          "alpha); required with efa on a system of chips, else its "
                          "members'.")
    link_latency: Time | None = Field(
        None, description="Latency of one hop of a collective over NeuronLink (its alpha); "
                          "required where links join more than one chip or member.")
    price: Price | None = Field(None, description="Hourly price, e.g. '44.7 USD/h' (which "
                                                  "rate: an assumption beside it says).")
    claims: list[Claim] = Field(default_factory=list, description="Published figures.")
    assumptions: list[Assumption] = Field(default_factory=list,
                                          description="Unpublished parameters and why.")

    @property
    def kind(self) -> str:
        return "system"
