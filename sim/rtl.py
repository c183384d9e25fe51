"""Run workloads on the RTL from the command line: build (cached), simulate, collect results.

:func:`run_workloads` builds the ``Rnic`` top level with Verilator (once per configuration, in
``build/sim``), runs :mod:`rnic.sim.rtl_job` in the simulator and returns one :class:`RtlRun` per
workload: the RTL's frames and the comparison with the golden model.
"""

from __future__ import annotations

import collections
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..model.config import RnicConfig
from ..model.descriptor import LinkMode
from ..model.pcap import write_pcap_for_mode
from ..model.wqe import CqeStatus

__all__ = ["RtlRun", "rtl_key", "ensure_build", "run_workloads", "write_pcaps", "summary"]

_BUILDS = {}        # one build check per process (converting the design takes seconds)


@dataclass
class RtlRun:
    frames: list[bytes]
    aborted: int
    mismatches: list[str]
    clocks: int
    beats: int
    modes: list[int]
    model_frames: int
    cqe_status: list[int]
    regs: dict = field(default_factory=dict)
    width: int = 64
    memory: str = ""        # SHA-256 of the host-memory regions the engine may write, after the run
    dropped: tuple[int, int] | None = None      # (frames, bytes) once drop_frames() has freed them

    @property
    def frame_count(self) -> int:
        return self.dropped[0] if self.dropped else len(self.frames)

    @property
    def frame_bytes(self) -> int:
        return self.dropped[1] if self.dropped else sum(map(len, self.frames))

    def drop_frames(self) -> None:
        """Forget the frames' bytes, keeping their number and size (long soaks check and move on)."""
        self.dropped = (self.frame_count, self.frame_bytes)
        self.frames = []

    @property
    def efficiency(self) -> float:
        return self.beats / self.clocks if self.clocks else 0.0


def rtl_key(config: RnicConfig) -> str:
    """The build folder name of the ``Rnic`` of ``config`` (the default one is ``rnic-default``)."""
    return f"rnic-{config.key()}"


def ensure_build(config: RnicConfig = RnicConfig(), *, waves=False, fast: bool = True, status=print):
    """The Verilator build the runs of ``config`` use (a :class:`rnic.sim.toolchain.Build`): the fast
    top ``rnic_sim`` (:mod:`rnic.sim.sim_top`) or, with ``fast=False``, the bare ``rnic`` for the
    cocotbext-axi harness. Built or found cached once per process, then remembered."""
    from ..hdl.rnic import Rnic
    from .sim_top import SIM_TOP, build_sim_top, sim_key
    from .toolchain import build, build_dir_for, wave_format
    waves = wave_format(waves)
    key = sim_key(config) if fast else rtl_key(config)
    b = _BUILDS.get((key, waves))
    if b is None:
        fresh = not (build_dir_for(key, waves) / (SIM_TOP if fast else "rnic")).exists()
        status(f"building the RTL with Verilator ({'about a minute, once' if fresh else 'cached'}) ...")
        b = _BUILDS[key, waves] = (build_sim_top(config, waves) if fast
                                   else build(lambda: Rnic(config), "rnic", key, waves=waves))
    return b


def run_workloads(workloads, *, seed: int = 1, config: RnicConfig = RnicConfig(), fast: bool = True,
                  waves: Path | None = None, log: Path | None = None, status=print,
                  isolated: bool = False) -> list[RtlRun]:
    """``workloads``: a list of ``(Workload, options for TB.execute)``, run on the ``Rnic`` of
    ``config``: on the fast top, or with ``fast=False`` under cocotbext-axi bus models. The
    simulator's output goes to ``log``; ``status(text)`` gets progress lines.
    ``isolated``: run the simulator in a temporary folder with the build's binary linked in, not in
    the build folder, so several processes can simulate one build at once (cocotb writes its
    ``results.xml`` where the simulator runs)."""
    from .toolchain import Build, run_watched
    b = ensure_build(config, waves=waves or False, fast=fast, status=status)
    with tempfile.TemporaryDirectory() as tmp:
        if isolated and waves is None:
            (Path(tmp) / b.toplevel).symlink_to(b.build_dir / b.toplevel)
            b = Build(Path(tmp), b.toplevel, b.waves)
        job, result, progress = Path(tmp) / "job.pkl", Path(tmp) / "result.pkl", Path(tmp) / "progress"
        job.write_bytes(pickle.dumps({"seed": seed, "workloads": list(workloads), "fast": fast}))
        env = {"RNIC_JOB": str(job), "RNIC_RESULT": str(result), "RNIC_PROGRESS": str(progress),
               **config.env()}
        n = len(workloads)

        def show():
            if progress.exists():
                try:
                    i, clocks = progress.read_text().split()
                    status(f"\r  simulating workload {int(i) + 1}/{n}: {int(clocks):,} clocks", end="")
                except ValueError:
                    pass

        tests, fails, error = run_watched(b, "rnic.sim.rtl_job", poll=show, seed=seed, extra_env=env, log_file=log,
                                          quiet=True)
        status("")
        if error is not None or fails or not result.exists():
            where = f" (simulator log: {log})" if log else ""
            raise RuntimeError(f"the RTL simulation failed{where}: {error or 'see the log'}")
        out = [RtlRun(**r) for r in pickle.loads(result.read_bytes())]
    if waves is not None:
        for f in b.build_dir.glob(f"dump.{b.waves}"):
            waves.parent.mkdir(parents=True, exist_ok=True)
            f.replace(waves)
            break
    return out


def write_pcaps(run: RtlRun, out_dir: Path) -> dict[LinkMode, Path]:
    """One pcap per link mode, ``out_dir/<mode>.pcap``, RTL frames in wire order (the link mode of
    frame ``i`` is the model's packet ``i``'s)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_mode = collections.defaultdict(list)
    for frame, mode in zip(run.frames, run.modes):
        by_mode[LinkMode(mode)].append(frame)
    paths = {}
    for mode in LinkMode:
        if by_mode[mode]:
            paths[mode] = out_dir / f"{mode.slug}.pcap"
            write_pcap_for_mode(paths[mode], mode, by_mode[mode])
    return paths


def summary(runs: list[RtlRun]) -> str:
    """The report table: frames, bytes, clocks, efficiency, completions by status, mismatches."""
    frames = sum(r.frame_count for r in runs)
    nbytes = sum(r.frame_bytes for r in runs)
    clocks = sum(r.clocks for r in runs)
    beats = sum(r.beats for r in runs)
    status = collections.Counter(s for r in runs for s in r.cqe_status)
    mism = sum(len(r.mismatches) for r in runs)
    lines = [f"{'frames':<22}{frames}", f"{'aborted frames':<22}{sum(r.aborted for r in runs)}",
             f"{'bytes':<22}{nbytes}", f"{'clocks to idle':<22}{clocks}",
             f"{'efficiency':<22}{beats / clocks if clocks else 0:.3f}  (frame beats / clocks, {runs[0].width if runs else 64}-bit bus)"]
    for s, n in sorted(status.items()):
        lines.append(f"{'CQEs ' + CqeStatus(s).name:<22}{n}")
    lines.append(f"{'mismatches':<22}{mism}")
    return "\n".join(lines)
