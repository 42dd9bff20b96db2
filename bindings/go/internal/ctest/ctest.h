/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* C side of the cross-language tests: producer threads and a loop consumer
 * that speak the tests' message format. Test-only; not part of the API. */
#ifndef EVENTQ_CTEST_H
#define EVENTQ_CTEST_H

#include <stddef.h>
#include <stdint.h>
#include <eventq.h>

/* Longest message eqt_make writes. */
#define EQT_MAX_MSG 80

/* A message: producer id (u32 LE), sequence number (u64 LE), a payload of
 * (seq*13 + producer*7) % 53 bytes derived from both, and the FNV-1a hash
 * of all of that (u32 LE). Returns its length. */
size_t eqt_make(uint8_t *buf, uint32_t producer, uint64_t seq);

/* 0 if buf[0..len] is a whole, intact message (its length and checksum
 * agree with its producer and sequence number, written to the out
 * parameters); -1 otherwise. */
int eqt_check(const uint8_t *buf, size_t len, uint32_t *producer, uint64_t *seq);

struct eqt_producers;

/* Starts nprod threads; thread i sends count messages of producer
 * id_base + i, in order, with blocking sends (batch > 1: send_batch calls
 * of up to batch messages), each thread on its own clone of chan. Takes
 * ownership of chan (freed here). NULL on failure. */
struct eqt_producers *eqt_producers_start(eventq_chan *chan, int nprod, uint32_t id_base,
                                          uint64_t count, int batch);

/* Joins the threads; writes the messages sent in total; returns 0 or the
 * first error a send returned. Frees p. */
int eqt_producers_wait(struct eqt_producers *p, uint64_t *sent);

struct eqt_consumer;

/* Starts a thread running a new loop with a channel source on chan that
 * checks every message (producers id_base .. id_base+nprod-1, each in
 * strict sequence from 0) and stops the loop at end of stream. Takes
 * ownership of chan. NULL on failure. */
struct eqt_consumer *eqt_consumer_start(eventq_chan *chan, uint32_t nprod, uint32_t id_base);

struct eqt_result {
	uint64_t received;     /* callbacks with a message */
	uint64_t bad;          /* messages that failed eqt_check or had an unknown producer */
	uint64_t out_of_order; /* messages whose seq was not the producer's next */
	uint64_t eof;          /* end-of-stream callbacks (must be 1) */
	int rc;                /* eventq_loop_run's return */
};

/* Joins the consumer thread; writes the result and each producer's next
 * expected seq (= messages received in order) to next[0..nprod]. Frees c. */
void eqt_consumer_wait(struct eqt_consumer *c, struct eqt_result *res, uint64_t *next);

#endif

/* Benchmark floor of the C ABI: one producer thread and one consumer thread
 * move n copies of msg[0..len] through a new channel of the given capacity
 * with blocking calls (batch > 1: send_batch/recv_batch of up to batch
 * messages). Returns the nanoseconds from starting the consumer thread to
 * joining it, or a negative errno. */
int64_t eqt_bench_1p1c(const uint8_t *msg, size_t len, uint64_t n, int batch, size_t capacity);
