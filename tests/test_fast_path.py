"""The fast simulation path against the cocotbext-axi path: the same workloads, run both ways, must
give identical frames, aborted frames, CQE statuses, registers and host memory (each run is also
compared with the golden model on its own). Only the timing may differ: the bus models' random
stalls are drawn from different generators.
"""

import random

from rnic.model.config import RnicConfig
from rnic.model.engine import ERROR_ALIGN
from rnic.model.regs import QPC_COUNTERS
from rnic.sim.rtl import run_workloads
from rnic.sim.scenario import BUFFERS, random_workload
from rnic.sim.toolchain import seed_from_env

TIMING_DEPENDENT = {f"QPC_{name.upper()}" for name, _ in QPC_COUNTERS}      # request order depends on timing


def _workloads(seed: int):
    rng = random.Random(seed)
    plain = random_workload(rng, nqps=4, wqes=4, max_len=4096)
    faulty = random_workload(rng, nqps=3, wqes=3, max_len=2048)
    faulty.mem.add_read_error(BUFFERS, BUFFERS + 2 * ERROR_ALIGN, 2)
    faulty.mem.add_write_error(0x10_0000, 0x10_0000 + ERROR_ALIGN, 3)      # the first CQ ring's first CQEs
    opts = {"latency": (1, 30), "pause": 0.1, "sink_pause": 0.2}
    return [(plain, opts), (faulty, opts)]


def test_both_paths_agree():
    seed = seed_from_env(1)
    print(f"seed {seed} (rerun with RNIC_SEED={seed})")
    work = _workloads(seed)
    slow = run_workloads(work, seed=seed, config=RnicConfig(), fast=False)
    fast = run_workloads(work, seed=seed, config=RnicConfig(), fast=True)
    for i, (a, b) in enumerate(zip(slow, fast)):
        assert not a.mismatches and not b.mismatches, (a.mismatches, b.mismatches)
        assert len(a.frames) > 0
        assert a.frames == b.frames, f"workload {i}: frames differ"
        assert (a.aborted, a.cqe_status) == (b.aborted, b.cqe_status), f"workload {i}"
        assert a.memory == b.memory, f"workload {i}: host memory differs"
        regs = [n for n in a.regs if n not in TIMING_DEPENDENT]
        assert {n: a.regs[n] for n in regs} == {n: b.regs[n] for n in regs}, f"workload {i}: registers differ"
    assert fast[1].aborted or any(s != 0 for s in fast[1].cqe_status), "the bus errors were not hit"
