"""The requester's side of RC reliability (docs/reliability.md): its timers, its first decisions and the
completer that executes them.

:class:`TimerTable` keeps one timer per QP (the local ACK timer or an RNR wait) in one memory and scans
it; :mod:`rnic.model.timers` is its model. :class:`RespCheck` classifies a response and :class:`WalkStep`
decides one step of the acknowledgement walk, as :mod:`rnic.model.requester` does. :class:`Completer`
runs one job at a time (a response, a timeout, the end of an RNR wait) as the model's ``Requester``.
"""

from .check import RespCheck, WalkStep
from .completer import Completer
from .layouts import JobKind
from .timers import TimerTable, cmd_layout, expired_layout

__all__ = ["Completer", "JobKind", "TimerTable", "cmd_layout", "expired_layout", "RespCheck", "WalkStep"]
