// The bus models of the fast simulation top (sim/sim_top.py): host memory as an AXI4 slave, the
// frame sink and the frame source (AXI4-Stream), the register master (AXI4-Lite) and reset. The generated SystemVerilog
// top calls rnic_sim_tick() once per rising edge with the DUT's outputs as they were before the edge
// and registers what it returns: every model output changes just after an edge, as a flip-flop's
// would. Python reaches the state through the extern "C" functions at the end (ctypes), between
// clock edges, never by stepping the clock.
//
// Random choices (memory latency, per-channel stalls, sink backpressure) come from one seeded
// splitmix64 generator, so a run is repeatable from its seed.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "Vtop__Dpi.h"

namespace {

struct Rng {
    uint64_t s = 1;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    bool chance(double p) { return p > 0 && double(next() >> 11) * 0x1.0p-53 < p; }
    uint32_t between(uint32_t lo, uint32_t hi) { return hi > lo ? lo + uint32_t(next() % (hi - lo + 1)) : lo; }
};

struct ErrorRange {
    uint64_t lo, hi;
    int resp;
};

struct Burst {
    uint64_t addr, due;
    int beats, size, fixed, id, done, resp;
};

struct Frame {
    std::vector<uint8_t> data;
    int user;
};

struct RxFrame {
    std::vector<uint8_t> data;
    uint64_t gap;       // clocks from the end of the frame before (or from its push) to its first beat
};

enum OpKind { OP_WRITE, OP_READ, OP_POLL };

struct Op {
    OpKind kind;
    uint32_t addr, data, mask, want, period;
    bool done;
    uint32_t result;
    int resp;
    uint64_t clock;     // the clock it completed
};

// What watch(1) records; the order of HostBus._TRACES in sim_top.py.
enum Trace { BEATS, GAPS, AR_CLOCKS, AR_BEATS, R_BEATS, R_STALLS, AR_ADDRS, AR_IDS, STARTS, ENDS, NTRACES };

struct Sim {
    int lanes = 8;
    std::vector<uint8_t> mem;
    uint64_t clock = 0;
    Rng rng;
    double pause = 0, sink_pause = 0;
    uint32_t lat_lo = 0, lat_hi = 0, fixed_latency = 0;
    std::vector<ErrorRange> read_errors, write_errors;
    std::deque<Burst> reads, writes;
    std::deque<std::pair<int, int>> responses;          // (bid, bresp) of complete write bursts

    bool rst = true, hold_reset = true;
    uint32_t reset_left = 0;
    bool arready = false, rvalid = false, rlast = false, awready = false, wready = false, bvalid = false;
    bool tready = false;
    int rid = 0, rresp = 0, bid = 0, bresp = 0;
    std::vector<uint8_t> rdata;
    bool irq = false;
    uint32_t notify = 0;

    std::vector<uint8_t> partial;
    std::vector<Frame> frames;

    std::deque<RxFrame> rx;                              // frames to send on s_axis, in order
    size_t rx_off = 0;                                   // the next beat's first byte in rx.front()
    uint64_t rx_wake = 0, rx_sent = 0;                   // the front frame starts at rx_wake; frames sent
    bool s_tvalid = false, s_tlast = false;
    uint64_t s_tkeep = 0;
    std::vector<uint8_t> s_tdata;

    std::vector<Op> ops;
    size_t op_next = 0;                                  // the op on the bus (== ops.size(): none)
    bool l_aw = false, l_w = false, l_b = false, l_ar = false, l_r = false, l_started = false;
    uint64_t l_wake = 0;                                 // a poll's next read, not before this clock

    bool watch = false, mid_frame = false;
    std::vector<uint64_t> trace[NTRACES];
};

Sim S;

bool hits(const std::vector<ErrorRange>& errors, uint64_t addr, uint64_t n, int* resp) {
    for (const auto& e : errors)
        if (addr < e.hi && e.lo < addr + n) {
            *resp = e.resp;
            return true;
        }
    return false;
}

uint64_t beat_word(const Burst& b) {
    uint64_t step = uint64_t(1) << b.size;
    uint64_t addr = (b.addr / step) * step + (b.fixed ? 0 : uint64_t(b.done) * step);
    return (addr / S.lanes) * S.lanes;
}

void load_read_beat() {
    Burst& b = S.reads.front();
    uint64_t word = beat_word(b);
    int resp = 0;
    if (word + S.lanes > S.mem.size())
        resp = 3;
    else
        hits(S.read_errors, word, S.lanes, &resp);
    if (resp)
        std::fill(S.rdata.begin(), S.rdata.end(), 0);
    else
        std::memcpy(S.rdata.data(), &S.mem[word], S.lanes);
    S.rvalid = true;
    S.rid = b.id;
    S.rresp = resp;
    S.rlast = b.done == b.beats - 1;
}

void take_write_beat(const svBitVecVal* wdata, uint64_t wstrb) {
    Burst& b = S.writes.front();
    uint64_t word = beat_word(b);
    int resp = 0;
    if (wstrb) {
        if (word + S.lanes > S.mem.size())
            resp = 3;
        else
            hits(S.write_errors, word, S.lanes, &resp);
    }
    if (resp)
        b.resp = resp;
    else
        for (int i = 0; i < S.lanes; i++)
            if (wstrb >> i & 1)
                S.mem[word + i] = uint8_t(wdata[i / 4] >> (8 * (i % 4)));
    if (++b.done == b.beats) {
        S.responses.emplace_back(b.id, b.resp);
        S.writes.pop_front();
    }
}

void take_stream_beat(const svBitVecVal* tdata, uint64_t tkeep, bool tlast, bool tuser) {
    if (!S.mid_frame && S.watch)
        S.trace[STARTS].push_back(S.clock);
    S.mid_frame = true;
    for (int i = 0; i < S.lanes; i++)
        if (tkeep >> i & 1)
            S.partial.push_back(uint8_t(tdata[i / 4] >> (8 * (i % 4))));
    if (tlast) {
        if (S.watch)
            S.trace[ENDS].push_back(S.clock);
        S.frames.push_back({std::move(S.partial), tuser});
        S.partial.clear();
        S.mid_frame = false;
    }
}

void finish_op(uint32_t result, int resp) {
    Op& op = S.ops[S.op_next];
    op.done = true;
    op.result = result;
    op.resp = resp;
    op.clock = S.clock;
    S.op_next++;
    S.l_started = false;
    S.notify ^= 1;
}

void start_op() {
    if (S.op_next >= S.ops.size() || S.l_started || S.clock < S.l_wake)
        return;
    const Op& op = S.ops[S.op_next];
    S.l_started = true;
    if (op.kind == OP_WRITE)
        S.l_aw = S.l_w = true;
    else
        S.l_ar = true;
}

void load_rx_beat() {
    const std::vector<uint8_t>& d = S.rx.front().data;
    size_t n = std::min(size_t(S.lanes), d.size() - S.rx_off);
    std::fill(S.s_tdata.begin(), S.s_tdata.end(), 0);
    std::memcpy(S.s_tdata.data(), d.data() + S.rx_off, n);
    S.s_tkeep = n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
    S.s_tlast = S.rx_off + n >= d.size();
    S.s_tvalid = true;
}

void clear_channels() {
    S.reads.clear();
    S.writes.clear();
    S.responses.clear();
    S.arready = S.rvalid = S.awready = S.wready = S.bvalid = S.tready = false;
    S.l_aw = S.l_w = S.l_b = S.l_ar = S.l_r = S.l_started = false;
    S.partial.clear();
    S.mid_frame = false;
    S.s_tvalid = false;
    S.rx_off = 0;
}

}  // namespace

// ---- called by the SystemVerilog top ------------------------------------------------------------

void rnic_sim_init(int width) {
    S.lanes = width / 8;
    S.rdata.assign(S.lanes, 0);
    S.s_tdata.assign(S.lanes, 0);
    if (S.mem.empty())
        S.mem.assign(1 << 25, 0);
}

void rnic_sim_tick(
        svBit arvalid, long long araddr, int arlen, int arsize, int arburst, int arid, svBit rready,
        svBit awvalid, long long awaddr, int awlen, int awsize, int awburst, int awid,
        svBit wvalid, const svBitVecVal* wdata, long long wstrb, svBit wlast, svBit bready,
        svBit tvalid, const svBitVecVal* tdata, long long tkeep, svBit tlast, svBit tuser,
        svBit l_awready, svBit l_wready, svBit l_bvalid, int l_bresp,
        svBit l_arready, svBit l_rvalid, int l_rdata, int l_rresp, svBit irq, svBit s_tready,
        svBit* o_rst, svBit* o_arready, svBit* o_rvalid, svBitVecVal* o_rdata, int* o_rid, int* o_rresp,
        svBit* o_rlast, svBit* o_awready, svBit* o_wready, svBit* o_bvalid, int* o_bid, int* o_bresp,
        svBit* o_tready, svBit* o_l_awvalid, int* o_l_awaddr, svBit* o_l_wvalid, int* o_l_wdata,
        svBit* o_l_bready, svBit* o_l_arvalid, int* o_l_araddr, svBit* o_l_rready, svBit* o_notify,
        svBit* o_s_tvalid, svBitVecVal* o_s_tdata, long long* o_s_tkeep, svBit* o_s_tlast, svBit* o_s_tuser) {
    S.clock++;
    S.irq = irq;
    if (S.watch && !S.rst) {
        if (tvalid && S.tready)
            S.trace[BEATS].push_back(S.clock);
        else if (S.tready && !tvalid && S.mid_frame)
            S.trace[GAPS].push_back(S.clock);
        if (arvalid && S.arready) {
            S.trace[AR_CLOCKS].push_back(S.clock);
            S.trace[AR_BEATS].push_back(uint64_t(arlen) + 1);
            S.trace[AR_ADDRS].push_back(uint64_t(araddr));
            S.trace[AR_IDS].push_back(uint64_t(arid));
        }
        if (S.rvalid)
            S.trace[rready ? R_BEATS : R_STALLS].push_back(S.clock);
    }
    if (S.rst) {
        clear_channels();
    } else {
        if (arvalid && S.arready) {
            uint32_t wait = S.fixed_latency + S.rng.between(S.lat_lo, S.lat_hi);
            S.reads.push_back({uint64_t(araddr), S.clock + wait, arlen + 1, arsize, arburst == 0, arid, 0, 0});
        }
        if (S.rvalid && rready) {
            S.rvalid = false;
            if (++S.reads.front().done == S.reads.front().beats)
                S.reads.pop_front();
        }
        if (awvalid && S.awready)
            S.writes.push_back({uint64_t(awaddr), 0, awlen + 1, awsize, awburst == 0, awid, 0, 0});
        if (wvalid && S.wready)
            take_write_beat(wdata, uint64_t(wstrb));
        if (S.bvalid && bready) {
            S.bvalid = false;
            S.responses.pop_front();
        }
        if (tvalid && S.tready)
            take_stream_beat(tdata, uint64_t(tkeep), tlast, tuser);
        if (S.s_tvalid && s_tready) {
            S.s_tvalid = false;
            S.rx_off += S.lanes;
            if (S.s_tlast) {
                S.rx.pop_front();
                S.rx_off = 0;
                S.rx_sent++;
                if (!S.rx.empty())
                    S.rx_wake = S.clock + S.rx.front().gap;
            }
        }

        if (S.l_started) {
            Op& op = S.ops[S.op_next];
            if (S.l_aw && l_awready)
                S.l_aw = false;
            if (S.l_w && l_wready)
                S.l_w = false;
            if (S.l_b && l_bvalid) {
                S.l_b = false;
                finish_op(0, l_bresp);
            } else if (S.l_ar && l_arready) {
                S.l_ar = false;
            } else if (S.l_r && l_rvalid) {
                S.l_r = false;
                uint32_t value = uint32_t(l_rdata);
                if (op.kind == OP_POLL && (value & op.mask) != op.want) {
                    S.l_started = false;
                    S.l_wake = S.clock + op.period;
                } else {
                    finish_op(value, l_rresp);
                }
            }
            if (S.l_started && op.kind == OP_WRITE && !S.l_aw && !S.l_w)
                S.l_b = true;
            if (S.l_started && op.kind != OP_WRITE && !S.l_ar)
                S.l_r = true;
        }
        start_op();

        S.arready = S.reads.size() < 64 && !S.rng.chance(S.pause);
        if (!S.rvalid && !S.reads.empty() && S.reads.front().due <= S.clock && !S.rng.chance(S.pause))
            load_read_beat();
        S.awready = S.writes.size() < 64 && !S.rng.chance(S.pause);
        S.wready = !S.writes.empty() && !S.rng.chance(S.pause);
        if (!S.bvalid && !S.responses.empty() && !S.rng.chance(S.pause)) {
            S.bvalid = true;
            S.bid = S.responses.front().first;
            S.bresp = S.responses.front().second;
        }
        S.tready = !S.rng.chance(S.sink_pause);
        if (!S.s_tvalid && !S.rx.empty() && S.clock >= S.rx_wake)
            load_rx_beat();
    }
    if (S.reset_left) {
        S.rst = true;
        S.reset_left--;
    } else {
        S.rst = S.hold_reset;
    }

    *o_rst = S.rst;
    *o_arready = S.arready;
    *o_rvalid = S.rvalid;
    for (int i = 0; i < S.lanes; i += 4) {
        uint32_t v = 0;
        for (int k = 0; k < 4 && i + k < S.lanes; k++)
            v |= uint32_t(S.rdata[i + k]) << (8 * k);
        o_rdata[i / 4] = v;
    }
    *o_rid = S.rid;
    *o_rresp = S.rresp;
    *o_rlast = S.rlast;
    *o_awready = S.awready;
    *o_wready = S.wready;
    *o_bvalid = S.bvalid;
    *o_bid = S.bid;
    *o_bresp = S.bresp;
    *o_tready = S.tready;
    const Op* op = S.l_started ? &S.ops[S.op_next] : nullptr;
    *o_l_awvalid = S.l_aw;
    *o_l_awaddr = op ? int(op->addr) : 0;
    *o_l_wvalid = S.l_w;
    *o_l_wdata = op ? int(op->data) : 0;
    *o_l_bready = S.l_b;
    *o_l_arvalid = S.l_ar;
    *o_l_araddr = op ? int(op->addr) : 0;
    *o_l_rready = S.l_r;
    *o_notify = S.notify;
    *o_s_tvalid = S.s_tvalid;
    for (int i = 0; i < S.lanes; i += 4) {
        uint32_t v = 0;
        for (int k = 0; k < 4 && i + k < S.lanes; k++)
            v |= uint32_t(S.s_tdata[i + k]) << (8 * k);
        o_s_tdata[i / 4] = v;
    }
    *o_s_tkeep = (long long)S.s_tkeep;
    *o_s_tlast = S.s_tlast;
    *o_s_tuser = 0;
}

// ---- called from Python (ctypes) between clock edges --------------------------------------------

extern "C" {

void rnic_sim_setup(uint64_t mem_size, uint64_t seed) {
    S.mem.assign(mem_size, 0);
    S.rng.s = seed;
}

void rnic_sim_seed(uint64_t seed) { S.rng.s = seed; }

void rnic_sim_mem_clear() { std::fill(S.mem.begin(), S.mem.end(), 0); }

int rnic_sim_mem_write(uint64_t addr, const uint8_t* data, uint64_t n) {
    if (addr + n > S.mem.size())
        return -1;
    std::memcpy(&S.mem[addr], data, n);
    return 0;
}

int rnic_sim_mem_read(uint64_t addr, uint8_t* out, uint64_t n) {
    if (addr + n > S.mem.size())
        return -1;
    std::memcpy(out, &S.mem[addr], n);
    return 0;
}

void rnic_sim_timing(uint32_t lat_lo, uint32_t lat_hi, uint32_t fixed, double pause, double sink_pause) {
    S.lat_lo = lat_lo;
    S.lat_hi = lat_hi;
    S.fixed_latency = fixed;
    S.pause = pause;
    S.sink_pause = sink_pause;
}

void rnic_sim_clear_errors() {
    S.read_errors.clear();
    S.write_errors.clear();
}

void rnic_sim_add_error(int write, uint64_t lo, uint64_t hi, int resp) {
    (write ? S.write_errors : S.read_errors).push_back({lo, hi, resp});
}

// Hold reset for `clocks` edges, then release it; drops every bus transaction in flight, captured
// frames and queued register operations.
void rnic_sim_reset(uint32_t clocks) {
    S.reset_left = clocks;
    S.hold_reset = false;
    S.frames.clear();
    S.ops.clear();
    S.op_next = 0;
    S.l_started = false;
    S.rx.clear();
    S.rx_off = 0;
    S.rx_sent = 0;
}

uint64_t rnic_sim_clock() { return S.clock; }
int rnic_sim_irq() { return S.irq; }

static uint64_t push_op(OpKind kind, uint32_t addr, uint32_t data, uint32_t mask, uint32_t want, uint32_t period) {
    S.ops.push_back({kind, addr, data, mask, want, period, false, 0, 0, 0});
    return S.ops.size() - 1;
}

uint64_t rnic_sim_reg_write(uint32_t addr, uint32_t data) { return push_op(OP_WRITE, addr, data, 0, 0, 0); }
uint64_t rnic_sim_reg_read(uint32_t addr) { return push_op(OP_READ, addr, 0, 0, 0, 0); }

// Read `addr` every `period` clocks until (value & mask) == want.
uint64_t rnic_sim_reg_poll(uint32_t addr, uint32_t mask, uint32_t want, uint32_t period) {
    return push_op(OP_POLL, addr, 0, mask, want, period);
}

int rnic_sim_op_done(uint64_t op) { return op < S.ops.size() && S.ops[op].done; }
uint32_t rnic_sim_op_result(uint64_t op) { return S.ops[op].result; }
int rnic_sim_op_resp(uint64_t op) { return S.ops[op].resp; }
uint64_t rnic_sim_op_clock(uint64_t op) { return S.ops[op].clock; }
uint32_t rnic_sim_reg_offset(uint64_t op) { return S.ops[op].addr; }

uint64_t rnic_sim_frame_count() { return S.frames.size(); }
uint64_t rnic_sim_frame_len(uint64_t i) { return S.frames[i].data.size(); }
int rnic_sim_frame_user(uint64_t i) { return S.frames[i].user; }
void rnic_sim_frame_copy(uint64_t i, uint8_t* out) {
    std::memcpy(out, S.frames[i].data.data(), S.frames[i].data.size());
}

// Queue a frame for s_axis: its first beat `gap` clocks after the frame before it ends (or after now).
void rnic_sim_rx_push(const uint8_t* data, uint64_t n, uint64_t gap) {
    if (S.rx.empty())
        S.rx_wake = S.clock + gap;
    S.rx.push_back({std::vector<uint8_t>(data, data + n), gap});
}

uint64_t rnic_sim_rx_sent() { return S.rx_sent; }
uint64_t rnic_sim_rx_left() { return S.rx.size(); }

void rnic_sim_watch(int on) {
    S.watch = on;
    for (auto& t : S.trace)
        t.clear();
}

uint64_t rnic_sim_trace_len(int which) { return S.trace[which].size(); }
void rnic_sim_trace_copy(int which, uint64_t* out) {
    std::memcpy(out, S.trace[which].data(), S.trace[which].size() * sizeof(uint64_t));
}

}  // extern "C"
