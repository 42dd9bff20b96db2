/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * bench-ipc: messages between processes. This header is the contract
 * between the harness (ipc.c) and the row files (row_*.c); the message
 * format and the consumer's check are bench-peers' (../peers/peers.h).
 *
 * A run of one row: the harness forks the consumer process, which sets the
 * row up, forks one process per producer (or, for the in-process
 * reference rows, starts one thread per producer), and consumes. Every
 * process of the run shares one anonymous page with the harness (struct
 * shared): the start signal, the stop flag, the producers' counts, the
 * consumer's tally and its result. The producers send until the harness
 * raises `stop` (or, in smoke mode, a fixed count), then their end marker.
 *
 * The idle-gap pings run every ping row at once, sampled in turn: the
 * consumer process sets up each row, with its producer, and runs each
 * row's consumer on a thread of its own; the producers take turns, one
 * ping of one row at a time (see `ping_owner`).
 */
#ifndef BENCH_IPC_H
#define BENCH_IPC_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "../peers/peers.h"

#define MAX_PRODUCERS 4

#define STR_(x) #x
#define STR(x) STR_(x)
/* Idle-gap ping samples per row and run at the most. */
#define MAX_PING 4096
/* Ping rows sampled in turn in one run at the most. */
#define MAX_PATHS 4

/* What the consumer does with each message. */
enum mode {
    MODE_FLOOD, /* throughput: the producers send as fast as they can */
    MODE_PING,  /* one producer per row, one 16-byte message after each idle gap */
};

/* The page every process of a run shares (MAP_SHARED | MAP_ANONYMOUS,
 * made by the harness before it forks). */
struct shared {
    /* Written once per run: read-mostly for the producers. */
    alignas(64) _Atomic uint32_t go;   /* futex: 1 once every process is set up */
    _Atomic uint32_t stop;             /* producers: send the end marker now */
    _Atomic uint32_t done;             /* futex: the consumer has everything */
    _Atomic int ready;                 /* processes (and threads) set up */
    /* Per producer: how many messages it sent before its end marker. */
    alignas(64) _Atomic uint64_t sent[MAX_PRODUCERS];
    /* Ping: the last sequence the consumer received, plus one (a futex
     * the producers wait on for their turn); the pings not sampled
     * (warm-up), those sampled, and the rows taking turns. */
    alignas(64) _Atomic uint32_t acked;
    int ping_warm, ping_n, npaths;
    /* The consumer's; the harness reads tally.seen while it runs. */
    alignas(64) struct tally tally;
    uint64_t next[MAX_PRODUCERS];
    /* The result, written by the consumer before it exits. */
    char error[512];
    char note[160];
    double ctxsw; /* context switches of the consumer and producers, all run */
    /* Ping, per row: its consumer's tally, and its one-way latency samples
     * (ns). */
    struct tally ptally[MAX_PATHS];
    uint64_t pnext[MAX_PATHS];
    int nlat[MAX_PATHS];
    double lat[MAX_PATHS][MAX_PING];
};

/* The consumer's side of a run. */
struct sink {
    enum mode mode;
    struct shared *sh;
    struct tally *t;
    int path;           /* ping: the row's index among those taking turns */
    uint64_t ping_next; /* ping: the sequence due next for this row */
};

/* A ping message (16 bytes): the sequence, then the CLOCK_MONOTONIC time
 * at which the producer sent it, in ns. Its end marker has SEQ_END. */
static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Which of `n` rows sends ping `i`: one of each in turn, the order
 * rotated per turn, so that none always goes first. */
static inline int ping_owner(uint64_t i, int n)
{
    return (int)((i % (uint64_t)n + i / (uint64_t)n) % (uint64_t)n);
}

int ping_msg(struct sink *k, const void *data, size_t len);

/* Checks one received message; returns 1 once the run is complete. Every
 * row's consumer calls it for each message, and stops when it returns 1. */
static inline int sink_msg(struct sink *k, const void *data, size_t len)
{
    if (__builtin_expect(k->mode == MODE_PING, 0))
        return ping_msg(k, data, len);
    return tally_msg(k->t, data, len);
}

/* sink_msg as a take_fn (../peers/drain.h). */
static inline int sink_take(void *k, const void *data, size_t len)
{
    return sink_msg(k, data, len);
}

/* One row: how one library (one way of using it) moves the messages
 * between processes. */
struct row {
    const char *label;
    /* Producers are threads of the consumer process (the in-process
     * reference), not processes. */
    int threads;
    /* Consumer process, before the producers exist: the state of the run
     * (channels, sockets), to be inherited by the producers. */
    void *(*setup)(const struct run_info *ri);
    /* Producer process (or thread) p: its sending handle. */
    void *(*producer_open)(void *st, int p);
    /* Producer: sends one message, waiting while the queue is full; exits
     * the process on any error. */
    void (*send)(void *tx, const void *msg, size_t len);
    /* Producer, once the consumer has everything. May be NULL. */
    void (*producer_close)(void *tx);
    /* Consumer process, once every producer was forked: lets go of what
     * only the producers need, then receives, calling sink_msg for each
     * message, until it returns 1. */
    void (*consume)(void *st, struct sink *k);
    /* Consumer process, after the producers finished: frees everything;
     * may write a note for the table. */
    void (*teardown)(void *st, char *note, size_t cap);
};

/* A library: its rows and its version. */
struct lib {
    const char *name;
    const char *(*version)(void);
    const struct row *const *rows;
    int nrows;
};

extern const struct lib lib_eventq, lib_sys;
/* The rows the ratios and targets are taken against. */
extern const struct row eq_shared_batch, eq_shared_et, eq_shared_recv, eq_local_batch,
    eq_local_recv;
extern const struct row sys_seqpacket, sys_pipe;
#ifdef PEERS_HAVE_ZMQ
extern const struct lib lib_zmq;
extern const struct row zmq_ipc;
#endif
#ifdef PEERS_HAVE_NNG
extern const struct lib lib_nng;
#endif

/* A name for a run's socket (abstract, or a path for nng): unique to this
 * harness process and counter. */
void endpoint_name(char *buf, size_t cap, const char *prefix);

#endif /* BENCH_IPC_H */
