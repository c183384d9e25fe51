"""cocotb entry point of the CLI's RTL runs (not a test suite).

The host side (:func:`rnic.sim.rtl.run_workloads`) pickles a job to ``$RNIC_JOB``: a seed and a list
of ``(workload, options)``, and ``fast``: the DUT is the fast top ``rnic_sim``
(:class:`rnic.sim.fast_harness.FastTB`) rather than ``rnic`` (:class:`rnic.sim.harness.TB`). Each
workload runs from reset through :meth:`rnic.sim.harness.EngineHarness.execute`; the results are
pickled to ``$RNIC_RESULT``.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import cocotb

from .harness import TB


def _progress(path: Path | None, done_before: int, index: int):
    last = [-1]

    def show(clocks):
        k = (done_before + clocks) // 1000
        if path is not None and k != last[0]:
            last[0] = k
            path.write_text(f"{index} {done_before + clocks}")
    return show


@cocotb.test()
async def run_job(dut):
    job = pickle.loads(Path(os.environ["RNIC_JOB"]).read_bytes())
    if job.get("fast", False):
        from .fast_harness import FastTB
        tb = FastTB(dut, job["seed"])
    else:
        tb = TB(dut, job["seed"])
    progress = Path(os.environ["RNIC_PROGRESS"]) if os.environ.get("RNIC_PROGRESS") else None
    out, total = [], 0
    for i, (w, opts) in enumerate(job["workloads"]):
        r = await tb.execute(w, progress=_progress(progress, total, i), **opts)
        total += r.clocks
        out.append({
            "frames": r.frames, "aborted": r.aborted, "mismatches": r.mismatches, "clocks": r.clocks,
            "beats": r.beats, "regs": r.regs, "width": tb.width, "memory": r.memory,
            "modes": [int(p.desc.mode) for p in r.model.packets],
            "model_frames": len(r.model.packets),
            "cqe_status": [int(c.cqe.status) for c in r.model.cqes],
        })
    Path(os.environ["RNIC_RESULT"]).write_bytes(pickle.dumps(out))
