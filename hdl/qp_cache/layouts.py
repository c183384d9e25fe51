"""The QP context cache's enums and payload layouts, built from the model's tables
(:mod:`rnic.model.qpc`), and the burst lengths of its AXI transfers."""

import types

from amaranth import unsigned
from amaranth.lib import data, enum
from amaranth.utils import ceil_log2

from ...model import qpc as _model
from ...model.qpc import (ARG_WIDTH, CACHED_BITS, CACHED_BYTES, COUNTER_NAMES, COUNTER_WIDTH, MUTABLE_BYTES,
                          QPC_FIELDS, QPN_WIDTH, RECORD_BITS, RECORD_BYTES)

__all__ = ["hw_enum", "Op", "CtrlOp", "Status", "QpState", "record_layout", "cached_layout", "request_layout",
           "response_layout", "ctrl_layout", "ack_layout", "counters_layout",
           "BEATS", "FILL_BEATS", "WB_BEATS", "REC_SHIFT"]

#: the package the enums are exported from (and documented in)
_PUBLIC_MODULE = __name__.rpartition(".")[0]


def hw_enum(model_enum, shape=None):
    """The Amaranth enum of the model's :class:`enum.IntEnum` ``model_enum``: the same name, members and
    values, so the RTL and the golden model cannot drift apart. ``shape`` defaults to the fewest bits
    that hold the largest value."""
    shape = max(model_enum).bit_length() if shape is None else shape

    def body(ns):
        ns["__module__"] = _PUBLIC_MODULE
        ns["__doc__"] = model_enum.__doc__
        for member in model_enum:
            ns[member.name] = member.value
    return types.new_class(model_enum.__name__, (enum.Enum,), {"shape": shape}, body)


Op = hw_enum(_model.Op)
CtrlOp = hw_enum(_model.CtrlOp)
Status = hw_enum(_model.Status)
#: as wide as the record's ``state`` field
QpState = hw_enum(_model.QpState, shape=next(width for name, _, width in QPC_FIELDS if name == "state"))


def _fields_layout(bits):
    return data.FlexibleLayout(bits, {
        name: data.Field(QpState if name == "state" else unsigned(width), offset)
        for name, offset, width in QPC_FIELDS
    })


#: The 1024-bit record with named fields at the offsets of :data:`rnic.model.qpc.QPC_FIELDS`.
record_layout = _fields_layout(RECORD_BITS)
#: The record's first :data:`~rnic.model.qpc.CACHED_BYTES` bytes, the same fields: what the cache holds.
cached_layout = _fields_layout(CACHED_BITS)


def request_layout(cfg):
    """Engine request: ``op`` (:class:`Op`), ``qpn``, requester ``tag``, ``arg`` (the new value)."""
    return data.StructLayout({"op": Op, "qpn": QPN_WIDTH, "tag": cfg.tag_width, "arg": ARG_WIDTH})


def response_layout(cfg):
    """Response: ``status``, the request's ``tag`` and ``qpn``, and the record's cached bytes after
    the update (``record`` is meaningful only when ``status`` is OK)."""
    return data.StructLayout({"status": Status, "tag": cfg.tag_width, "qpn": QPN_WIDTH,
                              "record": cached_layout})


ctrl_layout = data.StructLayout({"op": CtrlOp, "qpn": QPN_WIDTH, "record": record_layout})
ack_layout = data.StructLayout({"status": Status})
counters_layout = data.StructLayout({name: COUNTER_WIDTH for name in COUNTER_NAMES})

BEATS = RECORD_BYTES // 8           # 64-bit AXI data: 16 beats per record (MODIFY)
FILL_BEATS = CACHED_BYTES // 8      # 10 beats per fetch
WB_BEATS = MUTABLE_BYTES // 8       # 2 beats of write-back
REC_SHIFT = ceil_log2(RECORD_BYTES)
