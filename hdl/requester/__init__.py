"""The requester's side of RC reliability (docs/reliability.md): so far its timers.

:class:`TimerTable` keeps one timer per QP (the local ACK timer or an RNR wait) in one memory and scans
it; :mod:`rnic.model.timers` is its model.
"""

from .timers import TimerTable, cmd_layout, expired_layout

__all__ = ["TimerTable", "cmd_layout", "expired_layout"]
