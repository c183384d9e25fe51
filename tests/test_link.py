"""The lossy link (rnic.sim.link): a frame's fate depends on the seed and the frame, not on how flows
interleave; a held-back frame waits for its own flow; the same seed gives the same run; bad knobs are
refused. Seed: RNIC_SEED."""

import random

import pytest

from rnic.sim.link import Link, LinkKnobs
from rnic.sim.toolchain import seed_from_env

KNOBS = LinkKnobs(loss=0.2, dup=0.2, corrupt=0.2, reorder=3, hold=0.5)


def _frames(flow: int, n: int) -> list[bytes]:
    return [bytes([flow] * 8 + [i]) + bytes(range(30)) for i in range(n)]


def _run(link: Link, frames: list[bytes]) -> list[bytes]:
    out = []
    for f in frames:
        link.send(f)
        out += link.deliver()
    return out + link.deliver(everything=True)


def test_fates_do_not_depend_on_interleaving():
    """Two flows sent one after the other, or interleaved at random: each flow meets the same losses,
    duplicates, holds and bit flips, so it receives the same frames in the same order."""
    seed = seed_from_env()
    print(f"RNIC_SEED={seed}")
    rng = random.Random(seed)
    a, b = _frames(0, 40), _frames(1, 40)
    flows = {}

    def flow_of(frame):
        return flows[frame]

    for f in a + b:
        flows[f] = f[0]
    knobs = LinkKnobs(loss=0.2, dup=0.2, corrupt=0.2, reorder=3, hold=0.5)
    runs, events = [], []
    for frames in (a + b, _interleave(rng, a, b)):
        link, out = Link(knobs, seed, flow_of), {0: [], 1: []}
        for f in frames:
            link.send(f)
            for g in link.deliver():
                out[_origin(g)].append(g)
        for g in link.deliver(everything=True):
            out[_origin(g)].append(g)
        runs.append(out)
        events.append(dict(link.counts))
    assert runs[0] == runs[1] and events[0] == events[1]
    assert all(events[0].values()), events[0]                         # every knob did something


def _origin(frame):
    """The flow a delivered frame came from: the first eight bytes name it (one flipped bit cannot
    outvote them)."""
    return int(sum(x == 1 for x in frame[:8]) >= 4)


def _interleave(rng, a, b):
    out, i, j = [], 0, 0
    while i < len(a) or j < len(b):
        if j == len(b) or i < len(a) and rng.random() < 0.5:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out


def test_same_seed_same_run_and_a_held_frame_waits_for_its_flow():
    frames = _frames(0, 50)
    assert _run(Link(KNOBS, 3), frames) == _run(Link(KNOBS, 3), frames)
    link = Link(LinkKnobs(reorder=2, hold=1.0), 1, lambda f: f[0])
    link.send(_frames(0, 1)[0])
    for f in _frames(1, 5):                     # other flows' frames do not release it
        link.send(f)
    assert all(f[0] == 1 for f in link.deliver()) and link.busy
    assert link.deliver(everything=True) and not link.busy


@pytest.mark.parametrize("knobs", [dict(loss=-0.1), dict(dup=2), dict(reorder=-1), dict(drop_nth=frozenset({-3}))])
def test_bad_knobs(knobs):
    with pytest.raises(ValueError):
        LinkKnobs(**knobs)


def test_one_by_one_or_in_a_batch_the_same_arrivals():
    """Delivering after every frame or after all of them gives the same arrival order, across flows too
    (the model delivers in batches, the RTL harness frame by frame)."""
    seed = seed_from_env()
    print(f"RNIC_SEED={seed}")
    frames = _interleave(random.Random(seed), _frames(0, 30), _frames(1, 30))
    one = _run(Link(KNOBS, seed, lambda f: int(sum(x == 1 for x in f[:8]) >= 4)), frames)
    batch = Link(KNOBS, seed, lambda f: int(sum(x == 1 for x in f[:8]) >= 4))
    for f in frames:
        batch.send(f)
    assert one == batch.deliver() + batch.deliver(everything=True)
