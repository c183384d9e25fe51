"""A lossy link, one direction: frames in, frames out after each one's fate (lost, duplicated, held back
behind later frames, a bit flipped). Fates come from the link's seed and the frame itself, so a run is
reproduced from its seed whatever else draws random numbers and however the QPs' frames interleave.
Delay and backpressure are clock matters: the RTL harness adds them; here a frame is either out or still
held."""

from __future__ import annotations

import collections
import hashlib
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

__all__ = ["LinkKnobs", "Link"]


@dataclass(frozen=True)
class LinkKnobs:
    loss: float = 0.0               # probability that a frame is lost
    drop_nth: frozenset[int] = frozenset()  # these frames (0 = the first this direction carries) are lost
    dup: float = 0.0                # probability that a frame arrives twice
    reorder: int = 0                # a frame held back arrives behind up to this many later ones
    hold: float = 0.25              # probability that a frame is held back (with ``reorder`` > 0)
    corrupt: float = 0.0            # probability that one bit of a frame flips (the receiver's ICRC drops it)
    cut: bool = False               # every frame is lost

    def __post_init__(self):
        for name in ("loss", "dup", "corrupt", "hold"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"link knob {name} is a probability (0 to 1), not {getattr(self, name)!r}")
        if not isinstance(self.reorder, int) or self.reorder < 0:
            raise ValueError(f"link knob reorder is a number of frames (0 or more), not {self.reorder!r}")
        if any(not isinstance(n, int) or n < 0 for n in self.drop_nth):
            raise ValueError(f"link knob drop_nth holds frame numbers (0 = the first), not {sorted(self.drop_nth)!r}")


@dataclass
class Link:
    """One direction. Each frame's fate is drawn from ``seed``, the frame's bytes and how many times the same
    bytes were sent before, not from its place among other frames: two QPs' frames may interleave in any
    order (as the RTL's and the model's do) and each QP still meets the same losses. A held-back frame
    waits for later frames of its own flow (``flow_of(frame)``, e.g. its destination QP; default one
    flow). ``drop_nth`` counts every frame the link carries."""

    knobs: LinkKnobs = LinkKnobs()
    seed: int = 0
    flow_of: Callable[[bytes], Hashable] | None = None
    sent: int = 0
    counts: dict = field(default_factory=lambda: {"lost": 0, "duplicated": 0, "reordered": 0, "corrupted": 0})

    def __post_init__(self):
        self._held: list[tuple[int, int, Hashable, bytes]] = []      # (due, order, flow, frame)
        self._ready: list[bytes] = []                                 # let out, not yet delivered
        self._order = 0
        self._seen: collections.Counter = collections.Counter()       # sends of the same bytes
        self._flow_sent: collections.Counter = collections.Counter()  # frames sent per flow

    def send(self, frame: bytes) -> None:
        k, n = self.knobs, self.sent
        self.sent += 1
        digest = hashlib.sha256(frame).hexdigest()
        rng = random.Random(f"{self.seed}:{digest}:{self._seen[digest]}")
        self._seen[digest] += 1
        flow = self.flow_of(frame) if self.flow_of else None
        index = self._flow_sent[flow]
        self._flow_sent[flow] += 1
        lost, dup, flip = rng.random() < k.loss, rng.random() < k.dup, rng.random() < k.corrupt
        delay = rng.randint(1, k.reorder) if k.reorder and rng.random() < k.hold else 0
        bit = rng.randrange(len(frame) * 8)
        if k.cut or lost or n in k.drop_nth:
            self.counts["lost"] += 1
            return
        if flip:
            self.counts["corrupted"] += 1
            frame = bytearray(frame)
            frame[bit // 8] ^= 1 << bit % 8
            frame = bytes(frame)
        if delay:
            self.counts["reordered"] += 1
        for copy in range(2 if dup else 1):
            self._held.append((index + delay, self._order, flow, frame))
            self._order += 1
        if dup:
            self.counts["duplicated"] += 1
        # what this frame's flow now lets out, in the order it falls due: the arrival order is then the
        # same whether the frames are delivered one by one or after a batch
        due = sorted((h for h in self._held if h[2] == flow and h[0] < self._flow_sent[flow]), key=lambda h: h[:2])
        self._held = [h for h in self._held if not (h[2] == flow and h[0] < self._flow_sent[flow])]
        self._ready += [h[3] for h in due]

    def deliver(self, everything: bool = False) -> list[bytes]:
        """The frames due by now (all of them with ``everything``: the link goes quiet), in arrival order."""
        out, self._ready = self._ready, []
        if everything:
            out += [h[3] for h in sorted(self._held, key=lambda h: h[:2])]
            self._held = []
        return out

    @property
    def busy(self) -> bool:
        return bool(self._held or self._ready)
