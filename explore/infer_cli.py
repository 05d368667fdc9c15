"""``gen infer``'s front door: a system spec and a model resolved (a bundled workload, or a
Hugging Face ``config.json`` of a Llama, Mistral, OPT, BERT or RoBERTa model), the split
checked and the memory per rank held against HBM (:class:`~explore.infer.InferError` naming
what was expected and found, with the figures), then one design point (:func:`from_cli`) or
every combination of lists (:func:`grid`) evaluated by :mod:`explore.infer`."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from . import model
from .infer import (
    AS_GIVEN,
    PARTS,
    Compilation,
    Engine,
    InferError,
    InferResult,
    KernelRow,
    evaluate,
    memory,
)
from .infer_lowering import GEMM_DTYPES, split
from .kerneltimes import KernelTimes
from .workloads import Transformer, transformer_params

__all__ = ["AXES", "Point", "check", "design_point", "from_cli", "grid", "hf_config", "load_model",
           "resolve"]

#: The options a grid sweeps, in the order of its columns.
AXES = ("tp", "dp", "batch", "input", "output", "dtype", "lnc")

#: Hugging Face ``model_type`` -> (architecture defaults, key of each figure).
_HF = {
    "llama": ("decoder", {"ffn": "intermediate_size", "act": "hidden_act"}),
    "mistral": ("decoder", {"ffn": "intermediate_size", "act": "hidden_act"}),
    "opt": ("opt", {"ffn": "ffn_dim", "act": "activation_function"}),
    "bert": ("encoder", {"ffn": "intermediate_size", "act": "hidden_act"}),
    "roberta": ("encoder", {"ffn": "intermediate_size", "act": "hidden_act"}),
}
_ACTS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu", "relu": "relu"}


_KINDS = {int: "a positive integer", bool: "true or false", str: "a name"}


def _key(data: dict, file: Path, key: str, kind, default=None):
    """``data[key]`` of ``kind`` (``default`` when absent and given), or a one-line error."""
    if key not in data:
        if default is not None:
            return default
        raise InferError(f"{file}: {key}: expected {_KINDS[kind]}, found none")
    v = data[key]
    bad = {int: not isinstance(v, int) or isinstance(v, bool) or v < 1,
           bool: not isinstance(v, bool), str: not isinstance(v, str)}[kind]
    if bad:
        raise InferError(f"{file}: {key}: expected {_KINDS[kind]}, found {v!r}")
    return v


def hf_config(path: str | Path) -> Transformer:
    """The model of a Hugging Face ``config.json`` (layers, hidden size, heads, KV heads, FFN
    size, vocabulary, activation, tied embeddings, longest context)."""
    file = Path(path)
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InferError(f"{file}: expected a readable config.json, found "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    except json.JSONDecodeError as exc:
        raise InferError(f"{file}:{exc.lineno}:{exc.colno}: expected JSON, found "
                         f"{exc.msg}") from None
    if not isinstance(data, dict):
        raise InferError(f"{file}: expected a JSON object, found {type(data).__name__}")
    mtype = data.get("model_type")
    if mtype not in _HF:
        raise InferError(f"{file}: model_type: expected one of {', '.join(_HF)}, found "
                         f"{mtype!r}")
    arch, keys = _HF[mtype]
    heads = _key(data, file, "num_attention_heads", int)
    act = _key(data, file, keys["act"], str)
    if act not in _ACTS:
        raise InferError(f"{file}: {keys['act']}: expected one of {', '.join(_ACTS)}, found "
                         f"{act!r}")
    figures = dict(
        layers=_key(data, file, "num_hidden_layers", int),
        hidden=_key(data, file, "hidden_size", int), heads=heads,
        kv_heads=_key(data, file, "num_key_value_heads", int, heads),
        ffn=_key(data, file, keys["ffn"], int), vocab=_key(data, file, "vocab_size", int),
        max_context=_key(data, file, "max_position_embeddings", int),
        tied_embeddings=_key(data, file, "tie_word_embeddings", bool, arch != "decoder"),
        activation=_ACTS[act])
    if figures["hidden"] % heads:
        raise InferError(f"{file}: hidden_size: expected a multiple of num_attention_heads "
                         f"({heads}), found {figures['hidden']}")
    if heads % figures["kv_heads"]:
        raise InferError(f"{file}: num_key_value_heads: expected a divisor of "
                         f"num_attention_heads ({heads}), found {figures['kv_heads']}")
    gated = arch == "decoder"
    if gated and figures["activation"] != "silu":
        raise InferError(f"{file}: {keys['act']}: expected silu for a gated FFN, found {act!r}")
    name = data.get("_name_or_path") or file.parent.name or file.stem
    shape = dict(kind="transformer", name=str(name).rsplit("/", 1)[-1], title=f"{mtype} model",
                 source=str(file), gated_ffn=gated,
                 norm="rmsnorm" if gated else "layernorm",
                 positions="rope" if gated else "learned", causal=arch != "encoder",
                 seq=min(figures["max_context"], 8192), batch=1, params=1.0, **figures)
    t = Transformer.model_validate(shape)
    return t.model_copy(update={"params": transformer_params(t)})


def load_model(name: str) -> Transformer:
    """A bundled workload by name (or a workload file), or a ``config.json`` path."""
    from .workloads import load_spec  # noqa: PLC0415

    if name.endswith(".json"):
        return hf_config(name)
    t = load_spec(name)
    if not isinstance(t, Transformer):
        raise InferError(f"expected a transformer model, found the GEMM list {t.name!r}")
    return t


def resolve(system: str, lnc: int | None):
    """(base, core parameters, lnc, logical cores per instance) of an instance spec."""
    from hdl.params import ModelError, core_params  # noqa: PLC0415
    from specs import loader  # noqa: PLC0415

    doc = loader.load_document(system)
    if doc.kind != "system" or doc.spec.level != "instance":
        raise InferError(f"expected an instance system spec, found {doc.kind} {doc.name!r}")
    chip, _ = model.chip_of(doc)
    lnc = chip.lnc.default if lnc is None else lnc
    if lnc not in chip.lnc.options:
        raise InferError(f"expected --lnc one of {', '.join(map(str, chip.lnc.options))} on "
                         f"{chip.name}, found {lnc}")
    try:
        params = core_params(chip)
    except ModelError as exc:
        raise InferError(str(exc)) from None
    base = model.base_from_spec(system)
    base = replace(base, values={**base.values, "lnc": float(lnc)})
    ranks = int(chip.cores // lnc * base.values["chips"])
    return base, params, lnc, ranks


@dataclass
class Point:
    """One evaluated design point of ``gen infer``."""

    system: str
    model: Transformer
    tp: int
    dp: int
    batch: int
    input: int
    output: int
    dtype: str
    lnc: int
    ranks: int
    price_per_hour: float
    result: InferResult
    simulated: int
    #: with ``kernels``: each pass's kernels (``prefill``; a decoder's ``decode`` step too)
    kernels: dict[str, list[KernelRow]] | None = None
    compiled: Compilation = AS_GIVEN

    @property
    def per_dollar(self) -> float:
        """Output tokens (an encoder: inferences) per dollar at the instance's price."""
        r = self.result
        rate = r.tokens_per_second if self.model.causal else r.inferences_per_second
        return rate * 3600.0 / self.price_per_hour

    def row(self) -> dict:
        """The point as a flat mapping (a row of the grid, the JSON output)."""
        r = self.result
        out = {"system": self.system, "model": self.model.name, "tp": self.tp, "dp": self.dp,
               "batch": self.batch, "input": self.input, "output": self.output,
               "dtype": self.dtype, "lnc": self.lnc, "ttft_s": r.ttft, "tpot_s": r.tpot,
               "latency_s": r.latency, "tokens_per_second": r.tokens_per_second,
               "inferences_per_second": r.inferences_per_second,
               "price_per_hour": self.price_per_hour,
               "per_dollar": self.per_dollar}
        out.update({f"prefill_{p}_s": r.prefill[p] for p in PARTS})
        out.update({f"decode_{p}_s": r.decode[p] for p in PARTS})
        out.update({f"memory_{k}_bytes": v for k, v in r.memory.items()})
        out["memory_bytes"] = sum(r.memory.values())
        out["hbm_per_rank_bytes"] = r.hbm_per_rank
        c = self.compiled
        out.update(sequence_parallel=c.sequence_parallel,
                   context_buckets=",".join(map(str, c.context_buckets)),
                   decode_buckets=",".join(map(str, c.decode_buckets)))
        if self.kernels is not None:
            out["kernels"] = {phase: [asdict(k) for k in rows]
                              for phase, rows in self.kernels.items()}
        return out


def check(t: Transformer, ranks: int, *, tp: int, dp: int, batch: int, input_len: int,
          output_len: int, dtype: str, base: model.Base,
          compiled: Compilation = AS_GIVEN) -> None:
    """Refuse a point that cannot run: the split, the lengths (and their buckets), the
    format, the memory."""
    for name, v in (("--tp", tp), ("--dp", dp), ("--batch", batch), ("--input", input_len)):
        if v < 1:
            raise InferError(f"expected {name} of at least 1, found {v}")
    if output_len < (1 if t.causal else 0):
        raise InferError(f"expected --output of at least 1, found {output_len}")
    if tp * dp > ranks:
        raise InferError(f"expected TP x DP ({tp} x {dp}) of at most the {ranks} logical "
                         f"cores of {base.name}")
    if dtype not in GEMM_DTYPES:
        raise InferError(f"expected --dtype one of {', '.join(GEMM_DTYPES)}, found {dtype!r}")
    if math.isnan(base.rate(dtype)):
        raise InferError(f"expected --dtype in a format the tensor engine of {base.name} "
                         f"takes, found {dtype}")
    context = input_len + (output_len if t.causal else 0)
    if t.max_context and context > t.max_context:
        raise InferError(f"expected --input + --output of at most the {t.max_context}-token "
                         f"context of {t.name}, found {context}")
    if not t.causal and output_len:
        raise InferError(f"expected no --output for the encoder {t.name}, found {output_len}")
    prompt = compiled.prompt(input_len)
    if t.causal:
        context = compiled.context(context)
    mem = memory(t, split(t, tp), batch, context, batch * prompt, dtype)
    hbm = base.values["hbm_capacity"] * base.values["lnc"] / base.values["cores"]
    need = sum(mem.values())
    if need > hbm:
        figures = ", ".join(f"{k.replace('_', ' ')} {v / 2**30:.2f}" for k, v in mem.items())
        raise InferError(f"{t.name} at TP {tp}, batch {batch}, context {context} does not fit: "
                         f"{need / 2**30:.2f} GiB per rank ({figures} GiB) against the "
                         f"{hbm / 2**30:.2f} GiB of HBM of each rank of {base.name}")


def design_point(system, t, base, ranks, times, engines, *, tp, dp, batch, input_len,
                 output_len, dtype, lnc, kernels: bool = False,
                 compiled: Compilation = AS_GIVEN) -> Point:
    """One checked and evaluated point of ``t`` on an instance resolved by :func:`resolve`;
    ``engines`` keeps an :class:`~explore.infer.Engine` per (TP, format, compilation)
    across calls; with ``kernels`` its passes' kernels too."""
    check(t, ranks, tp=tp, dp=dp, batch=batch, input_len=input_len, output_len=output_len,
          dtype=dtype, base=base, compiled=compiled)
    key = (tp, dtype, compiled)
    engine = engines.get(key)
    if engine is None:
        engine = engines[key] = Engine(t, base, times, tp=tp, lnc=lnc, dtype=dtype,
                                       compiled=compiled)
    before = times.computed
    r = evaluate(engine, batch=batch, input_len=input_len, output_len=output_len, dp=dp)
    rows = None
    if kernels:
        rows = {"prefill": engine.prefill_kernels((input_len,) * batch)}
        if t.causal:
            rows["decode"] = engine.tpot_kernels(batch, input_len, output_len)
    return Point(system, t, tp, dp, batch, input_len, output_len, dtype, lnc, ranks,
                 base.price_per_hour, r, times.computed - before, rows, compiled)


def from_cli(system: str, model_name: str, *, tp: int, dp: int = 1, batch: int = 1,
             input_len: int = 128, output_len: int | None = None, dtype: str = "bf16",
             lnc: int | None = None, times: KernelTimes | None = None,
             kernels: bool = False, compiled: Compilation = AS_GIVEN) -> Point:
    """``gen infer`` at one point (``output_len`` ``None``: 128 for a decoder, none for an
    encoder); with ``kernels`` each pass's kernels too."""
    t = load_model(model_name)
    base, params, lnc, ranks = resolve(system, lnc)
    out = (128 if t.causal else 0) if output_len is None else output_len
    times = times or KernelTimes(params)
    return design_point(system, t, base, ranks, times, {}, tp=tp, dp=dp, batch=batch,
                        input_len=input_len, output_len=out, dtype=dtype, lnc=lnc,
                        kernels=kernels, compiled=compiled)


def grid(system: str, model_name: str, *, tp, dp=None, batch=None, input_len=None,
         output_len=None, dtype=None, lnc=None, times: KernelTimes | None = None,
         compiled: Compilation = AS_GIVEN):
    """Every combination of the given lists as a table (pandas DataFrame): one row per point,
    :meth:`Point.row`'s columns, and ``refused`` (the one-line reason, or empty); every point
    ``compiled`` alike."""
    import pandas as pd  # noqa: PLC0415

    t = load_model(model_name)
    lncs = lnc or [None]
    rows = []
    for one_lnc in lncs:
        base, params, got_lnc, ranks = resolve(system, one_lnc)
        times = times if times is not None and times.params == params else KernelTimes(params)
        engines: dict = {}
        combos = itertools.product(tp, dp or [1], batch or [1], input_len or [128],
                                   output_len or [128 if t.causal else 0], dtype or ["bf16"])
        for tp_, dp_, b, i, o, d in combos:
            try:
                p = design_point(system, t, base, ranks, times, engines, tp=tp_, dp=dp_,
                                 batch=b, input_len=i, output_len=o, dtype=d, lnc=got_lnc,
                                 compiled=compiled)
                rows.append({**p.row(), "refused": ""})
            except InferError as exc:
                rows.append({"system": system, "model": t.name, "tp": tp_, "dp": dp_,
                             "batch": b, "input": i, "output": o, "dtype": d, "lnc": got_lnc,
                             "refused": str(exc)})
    return t, pd.DataFrame(rows)
