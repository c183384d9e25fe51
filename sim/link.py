"""A lossy link, one direction: frames in, frames out after each one's fate (lost, duplicated, held back
behind later frames, a bit flipped). Fates come from the link's own seeded generator in frame order, so a
run is reproduced from its seed whatever else draws random numbers. Delay and backpressure are clock
matters: the RTL harness adds them; here a frame is either out or still held."""

from __future__ import annotations

import random
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
    knobs: LinkKnobs = LinkKnobs()
    seed: int = 0
    sent: int = 0
    counts: dict = field(default_factory=lambda: {"lost": 0, "duplicated": 0, "reordered": 0, "corrupted": 0})

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self._held: list[tuple[int, int, bytes]] = []      # (due, order, frame)
        self._order = 0

    def send(self, frame: bytes) -> None:
        k, rng, n = self.knobs, self.rng, self.sent
        self.sent += 1
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
            self._held.append((n + delay, self._order, frame))
            self._order += 1
        if dup:
            self.counts["duplicated"] += 1

    def deliver(self, everything: bool = False) -> list[bytes]:
        """The frames due by now (all of them with ``everything``: the link goes quiet), in arrival order."""
        self._held.sort()
        cut = len(self._held) if everything else sum(1 for due, _, _ in self._held if due < self.sent)
        out, self._held = self._held[:cut], self._held[cut:]
        return [f for _, _, f in out]

    @property
    def busy(self) -> bool:
        return bool(self._held)
