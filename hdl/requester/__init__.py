"""The requester's side of RC reliability (docs/reliability.md): so far its timers and its first decisions.

:class:`TimerTable` keeps one timer per QP (the local ACK timer or an RNR wait) in one memory and scans
it; :mod:`rnic.model.timers` is its model. :class:`RespCheck` classifies a response and :class:`WalkStep`
decides one step of the acknowledgement walk, as :mod:`rnic.model.requester` does.
"""

from .check import RespCheck, WalkStep
from .timers import TimerTable, cmd_layout, expired_layout

__all__ = ["TimerTable", "cmd_layout", "expired_layout", "RespCheck", "WalkStep"]
