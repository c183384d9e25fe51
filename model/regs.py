"""The AXI4-Lite register map of the descriptor engine, as data.

:data:`REGISTERS` is the single definition: the golden model's :class:`RegisterFile`, the RTL's
register block and the register table in ``docs/engine.md`` (:func:`markdown_table`) all come from
it. Registers are 32 bits wide at 4-byte aligned offsets. Reads of unmapped offsets return 0 and
writes to them are ignored (both answer OKAY).

Access: ``RO`` read only (writes ignored), ``RW`` read/write, ``W1C`` write 1 to clear,
``WO`` write only (reads return 0; a write is an action, e.g. a doorbell).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .config import DATAPATH_WIDTHS, RnicConfig
from .qpc import COUNTER_NAMES as QPC_COUNTER_NAMES

__all__ = ["Access", "Reg", "caps", "caps2", "DATAPATH_WIDTHS", "REGISTERS", "REG", "ENGINE_ID", "ENGINE_VERSION", "SGID_ENTRIES", "SGID_BASE",
           "SGID_STRIDE", "COUNTER_NAMES", "QPC_COUNTERS", "QPC_COUNTER_BASE", "RX_COUNTERS", "RX_COUNTER_BASE",
           "RX_STATELESS", "RX_DROPS", "RX_COUNTS", "ErrBit", "IntBit", "RegisterFile", "markdown_table"]

ENGINE_ID = 0x524E4943          # "RNIC"
ENGINE_VERSION = 0x0000_0001    # major << 16 | minor
SGID_ENTRIES = 16
SGID_BASE = 0x400
SGID_STRIDE = 0x20


class Access(enum.Enum):
    RO = "RO"
    RW = "RW"
    W1C = "W1C"
    WO = "WO"


class ErrBit(enum.IntEnum):
    """Bit positions in ERR_STATUS (and the cause code in ERR_INFO[7:0])."""
    DB_BAD_QPN = 0       # doorbell QPN >= QPC_SIZE
    DB_REJECTED = 1      # doorbell for a QP not in RTS/ERROR, or a producer index jump
    WQE_ERROR = 2        # a WQE completed with LOC_LEN_ERR or LOC_QP_OP_ERR
    BUS_QPC = 3          # AXI error reading a QP context
    BUS_WQE = 4          # AXI error on a WQE fetch
    BUS_PAYLOAD = 5      # AXI error on a payload read
    BUS_CQ = 6           # AXI error on a CQE write or a CQ context access
    CQ_OVERFLOW = 7      # a CQ filled up (CQ_OVERFLOW CQE written, CQ -> ERROR)
    CQE_DROPPED = 8      # a CQE could not be written (CQ in RESET/ERROR, CQN out of range)
    CQ_DB_BAD_CQN = 9    # CQ_DB_CI write with CQN >= CQ_SIZE


class IntBit(enum.IntEnum):
    """Bit positions in INT_STATUS and INT_ENABLE."""
    CQ = 0               # a moderated completion event
    ERR = 1              # ERR_STATUS gained a bit (not moderated)


_COUNTERS = (
    ("db_count", "DB_SQ_PI writes"),
    ("db_errors", "doorbells rejected: bad QPN, QP context bus error, QP not in RTS/ERROR, index jump"),
    ("wqe_count", "WQEs retired (sq_ci advanced), any status"),
    ("pkt_count", "packets emitted"),
    ("byte_count", "payload bytes emitted"),
    ("cqe_count", "CQEs written"),
    ("cqe_drops", "CQEs that could not be written"),
    ("wqe_errors", "WQEs retired with an error status other than WR_FLUSH_ERR"),
    ("flush_count", "WQEs retired with WR_FLUSH_ERR"),
    ("irq_count", "CQ interrupt events"),
    ("bus_errors", "AXI operations that got SLVERR/DECERR"),
)
COUNTER_NAMES = tuple(name for name, _ in _COUNTERS)
_QPC_COUNTER_TEXT = {
    "lookups": "QP context cache requests (engine lookups and updates)",
    "hits": "requests that found the context cached",
    "misses": "requests that fetched the context from host memory",
    "evictions": "valid lines replaced by a miss",
    "writebacks": "dirty lines written back (eviction, INVALIDATE, FLUSH)",
    "errors": "requests and commands answered BAD_QPN or BUS_ERROR",
    "merged": "requests for a QP being fetched, answered by that fetch (qpc.mshrs > 1)",
}
#: The QP context cache's own counters (``rnic.model.qpc.COUNTER_NAMES``, in that order), read-only
#: at 0x140..: ``(name, description)``.
QPC_COUNTERS = tuple((name, _QPC_COUNTER_TEXT[name]) for name in QPC_COUNTER_NAMES)
QPC_COUNTER_BASE = 0x140

#: The receive path's counters, read-only at 0x180..: frames accepted, one per stateless drop reason
#: (``rnic.model.receive.DropReason``), one per responder drop (``rnic.model.responder.RxDrop``),
#: the responder's event counts (``rnic.model.responder.COUNT_NAMES``), and the requester's, in that
#: order; the model's modules check that these names follow their enums.
RX_COUNTER_BASE = 0x180
RX_STATELESS = ("bad_fcs", "truncated", "not_roce", "bad_length", "bad_ip_checksum", "bad_tver", "bad_icrc",
                "bad_vcrc", "unknown_opcode", "not_ours", "cnp")
RX_DROPS = ("response", "bad_qpn", "qpc_bus_error", "qp_state", "bad_context", "wrong_service", "pkey", "qkey",
            "out_of_seq", "dup_unknown", "no_rq_wqe", "invalid")
RX_COUNTS = ("executed", "duplicates", "acks", "naks", "rnr_naks", "read_responses", "atomics", "recv_cqes",
             "bus_errors")
#: Then the requester's (CONTROL.RELIABLE): its event counts (``rnic.model.requester.REQ_COUNTS``) and one
#: per response it ignored (``rnic.model.requester.RespDrop``).
RX_REQ_COUNTS = ("acks", "read_responses", "atomic_acks", "naks_seq", "naks_inv", "naks_access", "naks_op",
                 "rnr_naks", "implied_naks", "retransmits", "timeouts", "rnr_retries", "completions")
RX_REQ_DROPS = ("qp_state", "not_rc", "stale", "ghost", "ahead", "retrying")
RX_COUNTERS = (("RX_ACCEPTED", "frames the front end handed to the responder (every stateless check passed)"),
               *((f"RX_{n.upper()}", f"frames dropped by the front end: {n.upper()} (DropReason)") for n in RX_STATELESS),
               *((f"RESP_DROP_{n.upper()}", f"frames the responder dropped: {n.upper()} (RxDrop)") for n in RX_DROPS),
               *((f"RESP_{n.upper()}", f"responder events: {n}") for n in RX_COUNTS),
               *((f"REQ_{n.upper()}", f"requester events: {n}") for n in RX_REQ_COUNTS),
               *((f"REQ_DROP_{n.upper()}", f"responses the requester ignored: {n.upper()} (RespDrop)")
                 for n in RX_REQ_DROPS))


@dataclass(frozen=True)
class Reg:
    """One 32-bit register: ``width`` low bits are implemented, the rest read as zero."""

    name: str
    offset: int
    width: int
    access: Access
    reset: int
    description: str

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1


def caps(max_qps: int) -> int:
    """CAPS of an engine whose scheduler holds QPNs ``0 .. max_qps - 1`` (a power of two)."""
    return SGID_ENTRIES | 32 << 8 | 12 << 16 | (max_qps.bit_length() - 1) << 24




def caps2(width: int, max_mtu: int) -> int:
    """CAPS2 of an engine with a ``width``-bit datapath (frames and host AXI) whose largest path MTU
    has the IB code ``max_mtu`` (:class:`rnic.model.qpc.PathMtu`: 1 = 256 B .. 5 = 4096 B)."""
    if width not in DATAPATH_WIDTHS:
        raise ValueError(f"width must be one of {', '.join(map(str, DATAPATH_WIDTHS))}, not {width!r}")
    if not 1 <= max_mtu <= 5:
        raise ValueError(f"max_mtu must be a path MTU code 1..5, not {max_mtu!r}")
    return ((width // 8).bit_length() - 1) | max_mtu << 4


#: CAPS and CAPS2 reset values are those of the default configuration (a standalone RegisterBlock()).
_DEFAULT = RnicConfig()


def _regs():
    rw, ro, w1c, wo = Access.RW, Access.RO, Access.W1C, Access.WO
    out = [
        Reg("ID", 0x000, 32, ro, ENGINE_ID, 'identification, "RNIC"'),
        Reg("VERSION", 0x004, 32, ro, ENGINE_VERSION, "major[31:16], minor[15:0]"),
        Reg("CAPS", 0x008, 32, ro, caps(_DEFAULT.max_qps),
            "SGID entries[7:0], inline bytes RC/UC[15:8], inline bytes UD[23:16], log2 of the QPNs the "
            "scheduler holds[31:24] (doorbells for higher QPNs are DB_BAD_QPN)"),
        Reg("SCRATCH", 0x00C, 32, rw, 0, "free for software"),
        Reg("CONTROL", 0x010, 2, rw, 0, "bit 0 ENABLE: the scheduler runs (doorbells are accepted either way); bit 1 "
            "RELIABLE: RC QPs follow the requester's rules (docs/reliability.md): no CQE when a WQE is sent, the "
            "window, FENCE, max_rd_atomic and RNR holds; responses go to the requester"),
        Reg("STATUS", 0x014, 2, ro, 1, "bit 0 IDLE (nothing scheduled or in flight), bit 1 IRQ (interrupt output)"),
        Reg("CAPS2", 0x018, 7, ro, caps2(_DEFAULT.width, _DEFAULT.mtu),
            "log2 of the datapath bytes per beat (frames and host AXI)[3:0], largest path MTU code[6:4] "
            "(1 = 256 B .. 5 = 4096 B; a QP context asking for more is a bad context)"),
        Reg("QPC_BASE_LO", 0x020, 32, rw, 0, "QP context table base [31:0] (128-byte aligned, bits 6:0 ignored)"),
        Reg("QPC_BASE_HI", 0x024, 32, rw, 0, "QP context table base [63:32]"),
        Reg("QPC_SIZE", 0x028, 25, rw, 0, "number of QP context records (QPNs 0 .. QPC_SIZE-1)"),
        Reg("CQ_BASE_LO", 0x030, 32, rw, 0, "CQ context table base [31:0] (32-byte aligned, bits 4:0 ignored)"),
        Reg("CQ_BASE_HI", 0x034, 32, rw, 0, "CQ context table base [63:32]"),
        Reg("CQ_SIZE", 0x038, 25, rw, 0, "number of CQ context records"),
        Reg("SCHED_QUOTA", 0x040, 16, rw, 16, "steps (packets or completion-only WQEs) per scheduler turn; 0 acts as 1"),
        Reg("AXI_MAX_BURST", 0x044, 9, rw, 256, "longest AXI burst in beats, 1..256; 0 or above 256 acts as 256"),
        Reg("AXI_BW_CAP", 0x048, 16, rw, 0, "at most this many AXI data beats per 1024 clocks; 0 = no cap"),
        Reg("PORT_LID", 0x04C, 16, rw, 0, "source LID of IB packets (LRH SLID)"),
        Reg("INT_MOD_COUNT", 0x050, 16, rw, 1, "CQ event after this many CQEs; 0 acts as 1"),
        Reg("INT_MOD_TIMER", 0x054, 32, rw, 0, "CQ event this many clocks after the first unreported CQE; 0 = off"),
        Reg("INT_STATUS", 0x058, 2, w1c, 0, "bit 0 CQ event, bit 1 error event"),
        Reg("INT_ENABLE", 0x05C, 2, rw, 0, "irq output = OR of (INT_STATUS & INT_ENABLE)"),
        Reg("DB_QPN", 0x060, 24, rw, 0, "QPN for the next DB_SQ_PI write"),
        Reg("DB_SQ_PI", 0x064, 16, wo, 0, "write: doorbell, new send-queue producer index of QP DB_QPN"),
        Reg("CQ_DB_CQN", 0x068, 24, rw, 0, "CQN for the next CQ_DB_CI write"),
        Reg("CQ_DB_CI", 0x06C, 16, wo, 0, "write: new consumer index of CQ CQ_DB_CQN (stored in its CQ context)"),
        Reg("QPC_CMD", 0x070, 2, wo, 0, "write: QP context cache command, 1 INVALIDATE QPC_CMD_QPN (write back, drop), "
            "2 FLUSH (write back and drop all); 0 and 3 do nothing"),
        Reg("QPC_CMD_QPN", 0x074, 24, rw, 0, "QPN for QPC_CMD INVALIDATE"),
        Reg("QPC_CMD_STATUS", 0x078, 3, ro, 0, "bit 0 BUSY (a QPC_CMD is running; writes to QPC_CMD wait), "
            "bits 2:1 result of the last command: 0 OK, 1 BAD_QPN, 2 BUS_ERROR"),
        Reg("ERR_STATUS", 0x080, 10, w1c, 0, "one bit per error class (ErrBit)"),
        Reg("ERR_QPN", 0x084, 24, ro, 0, "QPN (CQN for CQ_DB_BAD_CQN) of the first error since ERR_STATUS was 0"),
        Reg("ERR_INFO", 0x088, 16, ro, 0, "first error: ErrBit[7:0], CQE status[15:8] (0 if none)"),
        Reg("MR_BASE_LO", 0x090, 32, rw, 0, "memory region table base [31:0] (32-byte aligned, bits 4:0 ignored)"),
        Reg("MR_BASE_HI", 0x094, 32, rw, 0, "memory region table base [63:32]"),
        Reg("MR_SIZE", 0x098, 32, rw, 0, "number of MR records (an MR key's index is key >> 8)"),
        Reg("RES_BASE_LO", 0x0A0, 32, rw, 0, "responder resource slots base [31:0] (4 slots of 32 bytes per QP)"),
        Reg("RES_BASE_HI", 0x0A4, 32, rw, 0, "responder resource slots base [63:32]"),
        Reg("PORT_MAC_LO", 0x0A8, 32, rw, 0, "the port's MAC address [31:0]: Ethernet frames to another are NOT_OURS"),
        Reg("PORT_MAC_HI", 0x0AC, 16, rw, 0, "the port's MAC address [47:32]"),
        Reg("PORT_MODE", 0x0B0, 1, rw, 0, "bit 0 IB: frames in are native InfiniBand (LRH), else Ethernet"),
        Reg("PORT_GIDS", 0x0B4, 16, rw, 0, "bit i: SGID entry i is one of the port's addresses (DGID / destination IP)"),
        Reg("DB_RQ_PI", 0x0B8, 16, wo, 0, "write: receive-queue doorbell, new RQ producer index of QP DB_QPN"),
        Reg("REQ_TIMER", 0x0BC, 1, wo, 0, "write: QP DB_QPN's requester timer fires now: 0 its local ACK timeout, "
            "1 the end of its RNR wait (CONTROL.RELIABLE; ignored otherwise)"),
        Reg("REQ_BASE_LO", 0x0C0, 32, rw, 0, "requester records base [31:0] (32 bytes per QP, 32-byte aligned)"),
        Reg("REQ_BASE_HI", 0x0C4, 32, rw, 0, "requester records base [63:32]"),
        Reg("TIMER_TICK", 0x0C8, 16, rw, 0, "clocks per requester timer tick (about 1.024 us: the 4.096 us "
            "local ACK timeout unit is 4 ticks); 0 stops the timers (REQ_TIMER still fires one)"),
    ]
    for i, (name, text) in enumerate(_COUNTERS):
        out.append(Reg(name.upper(), 0x100 + 4 * i, 32, ro, 0, f"counter (wraps): {text}"))
    for i, (name, text) in enumerate(QPC_COUNTERS):
        out.append(Reg(f"QPC_{name.upper()}", QPC_COUNTER_BASE + 4 * i, 32, ro, 0,
                       f"QP context cache counter (wraps; not modelled by EngineModel, which reads 0): {text}"))
    for i, (name, text) in enumerate(RX_COUNTERS):
        out.append(Reg(name, RX_COUNTER_BASE + 4 * i, 32, ro, 0, f"counter (wraps): {text}"))
    for i in range(SGID_ENTRIES):
        base = SGID_BASE + SGID_STRIDE * i
        for w in range(4):
            out.append(Reg(f"SGID{i}_GID{w}", base + 4 * w, 32, rw, 0, f"source GID {i} bits [{32 * w + 31}:{32 * w}]"))
        out.append(Reg(f"SGID{i}_MAC_LO", base + 0x10, 32, rw, 0, f"source MAC {i} bits [31:0]"))
        out.append(Reg(f"SGID{i}_MAC_HI", base + 0x14, 16, rw, 0, f"source MAC {i} bits [47:32]"))
        out.append(Reg(f"SGID{i}_VLAN", base + 0x18, 32, rw, 0, f"entry {i}: VLAN ID[11:0], tag present[31]"))
    return tuple(out)


REGISTERS: tuple[Reg, ...] = _regs()
REG: dict[str, Reg] = {r.name: r for r in REGISTERS}
_BY_OFFSET = {r.offset: r for r in REGISTERS}
assert len(_BY_OFFSET) == len(REGISTERS) and all(r.offset % 4 == 0 for r in REGISTERS)


class RegisterFile:
    """Register storage with the access rules. ``on_write`` is called as ``on_write(reg, value)``
    after every write to a WO register (the engine's actions)."""

    def __init__(self, on_write=None):
        self.values = {r.name: r.reset for r in REGISTERS}
        self.on_write = on_write

    def __getitem__(self, name: str) -> int:
        return self.values[name]

    def __setitem__(self, name: str, value: int) -> None:
        """Hardware-side update (status, counters), bypassing the access rules."""
        self.values[name] = value & REG[name].mask

    def read(self, offset: int) -> int:
        reg = _BY_OFFSET.get(offset)
        if reg is None or reg.access is Access.WO:
            return 0
        return self.values[reg.name]

    def write(self, offset: int, value: int) -> None:
        reg = _BY_OFFSET.get(offset)
        if reg is None or reg.access is Access.RO:
            return
        value &= reg.mask
        if reg.access is Access.W1C:
            self.values[reg.name] &= ~value
        elif reg.access is Access.RW:
            self.values[reg.name] = value
        elif self.on_write is not None:
            self.on_write(reg, value)

    def u64(self, lo: str) -> int:
        return self.values[lo] | self.values[lo.replace("_LO", "_HI")] << 32


def markdown_table(regs=None) -> str:
    """The register table for docs/engine.md (the SGID table shown for entry 0 only)."""
    if regs is None:
        regs = [r for r in REGISTERS if not r.name.startswith("SGID") or r.name.startswith("SGID0_")]
    lines = ["| offset | name | bits | access | reset | description |", "|---|---|---|---|---|---|"]
    for r in regs:
        lines.append(f"| 0x{r.offset:03X} | `{r.name}` | {r.width} | {r.access.value} | 0x{r.reset:X} | {r.description} |")
    return "\n".join(lines)
