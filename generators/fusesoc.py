"""FuseSoC packages of the emitted units: one CAPI2 ``.core`` file per emitted engine.

Each core lists the engine's Verilog files (leaves first, as its generator wrote them), names
its top module, and carries the Verilator configuration files (``.vlt``) its generator wrote
with the justified lint waivers. Targets: ``default`` (the sources and top, for a parent
core or a synthesis flow) and ``lint`` (``verilator --lint-only -Wall`` through edalize)::

    fusesoc --cores-root build/trn2 run --target lint trngen:trn2:tensor

The top is the module of the emitted files that none of the others instantiates.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

VENDOR = "trngen"


def top_module(files: list[Path]) -> str:
    """The emitted module no other emitted file instantiates (files are named after their
    main module)."""
    texts = {p.stem: p.read_text() for p in files if p.suffix == ".v"}
    # a name is used where it stands alone, not inside a longer name or a hierarchical
    # one (``\\core.vector``): where it is a whole word of the characters those are made of
    words = {name: set(re.findall(r"[\w$.]+", text)) for name, text in texts.items()}
    used = {name for name in texts for other in texts if other != name and name in words[other]}
    tops = [name for name in texts if name not in used]
    if len(tops) != 1:
        raise ValueError(f"the emitted files must have one top module, not {tops!r}")
    return tops[0]


def core_text(chip: str, files: list[Path], header: str, version: str) -> tuple[str, str]:
    """``(file name, text)`` of the ``.core`` file of one emitted engine."""
    top = top_module(files)
    sources = [p.name for p in files if p.suffix == ".v"]
    waivers = [p.name for p in files if p.suffix == ".vlt"]
    filesets = {"rtl": {"files": sources, "file_type": "verilogSource"}}
    lint_sets = ["rtl"]
    if waivers:
        filesets["waivers"] = {"files": waivers, "file_type": "vlt"}
        lint_sets.append("waivers")
    core = {
        "name": f"{VENDOR}:{chip}:{top}:{version}",
        "description": f"{top}, emitted by trngen from the chip spec {chip}",
        "filesets": filesets,
        "targets": {
            "default": {"filesets": ["rtl"], "toplevel": top},
            "lint": {"default_tool": "verilator", "filesets": lint_sets, "toplevel": top,
                     "tools": {"verilator": {"mode": "lint-only",
                                             "verilator_options": ["-Wall"]}}},
        },
    }
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = yaml.safe_dump(core, sort_keys=False, width=100)
    return f"{top}.core", f"CAPI=2:\n{comment}{body}"
