/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * loop: the seed's threads A and B done right, with the libeventq loop.
 *
 * In the seed, thread A writes each request's result into an eventfd and
 * thread B epoll-waits on it and dispatches each result to its handler.
 * An eventfd is a counter, so under bursts B sees fewer events than A wrote
 * and dispatches sums no request produced (see seed_demo.c).
 *
 * Here several producer threads (the A side) send each result as a message
 * on one channel: (producer, handler, sequence, value). The loop thread (the
 * B side) has a channel source whose callback runs once per message and
 * hands the result to its handler. Beside it in the same loop:
 *   - a periodic timer prints progress;
 *   - a SIGINT/SIGTERM signal source stops early (signals are blocked in
 *     every thread first, so only the loop's signalfd sees them);
 *   - the last producer to finish closes the channel; the callback then runs
 *     once more with data == NULL (end of stream) and stops the loop.
 * At the end a table shows, per handler, results sent and handled.
 *
 * Exit status 0 only if every handler handled exactly what was sent to it,
 * each producer's results arrived in order, and the run was not interrupted.
 *
 * Build: cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread \
 *            $(pkg-config --cflags eventq) loop.c \
 *            $(pkg-config --libs eventq) -o loop
 */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <eventq.h>

#define PRODUCERS 4
#ifndef RESULTS_PER_PRODUCER
#define RESULTS_PER_PRODUCER 25000
#endif
#define HANDLERS 4
#define PROGRESS_NS (50 * 1000 * 1000)  /* a progress line every 50 ms */

/* One result, as sent: the handler it is for, who made it, in which order. */
struct result {
	uint32_t producer;
	uint32_t handler;
	uint32_t seq;       /* per producer: 0, 1, 2, ... */
	uint32_t value;
};

static void check(int rc, const char *what)  /* libeventq returns -errno */
{
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", what, eventq_strerror(rc));
		exit(1);
	}
}

/* ---- the A side: producers ------------------------------------------------ */

static atomic_ulong sent[HANDLERS];      /* results accepted by the channel */
static atomic_int producers_left = PRODUCERS;

struct producer {
	pthread_t thread;
	struct eventq_chan *tx;         /* this thread's own handle */
	uint32_t id;
};

static void *producer_main(void *arg)
{
	struct producer *p = arg;
	for (uint32_t seq = 0; seq < RESULTS_PER_PRODUCER; seq++) {
		struct result r = {
			.producer = p->id,
			.handler = (p->id * 7u + seq * 13u + (seq >> 3)) % HANDLERS,
			.seq = seq,
			.value = seq * 2654435761u ^ p->id,
		};
		/* a copy goes into the queue; wait while it is full */
		int rc = eventq_chan_send(p->tx, &r, sizeof r, EVENTQ_FOREVER);
		if (rc == -EPIPE)
			break;          /* closed early: the loop was interrupted */
		check(rc, "send");
		atomic_fetch_add(&sent[r.handler], 1);
	}
	/* the last producer out closes the channel: end of stream for B */
	if (atomic_fetch_sub(&producers_left, 1) == 1)
		check(eventq_chan_close(p->tx), "close");
	eventq_chan_free(p->tx);
	return NULL;
}

/* ---- the B side: handlers and the loop's callbacks ------------------------ */

struct state {
	struct eventq_loop *lp;
	unsigned long handled[HANDLERS];
	uint64_t sum[HANDLERS];
	int64_t last_seq[PRODUCERS];    /* per producer, -1 before the first */
	unsigned long out_of_order;
	unsigned long malformed;
	unsigned long total;
	int end_of_stream;
	int interrupted;
};

/* Four handlers, one per kind of result; each does its own small job. */
static void handle_store(struct state *s, const struct result *r)
{
	s->sum[0] += r->value;
}

static void handle_audit(struct state *s, const struct result *r)
{
	s->sum[1] ^= (uint64_t)r->value << (r->seq % 32);
}

static void handle_notify(struct state *s, const struct result *r)
{
	if (r->value > s->sum[2])
		s->sum[2] = r->value;
}

static void handle_metrics(struct state *s, const struct result *r)
{
	s->sum[3] += r->value & 0xff;
}

static void (*const handlers[HANDLERS])(struct state *, const struct result *) = {
	handle_store, handle_audit, handle_notify, handle_metrics,
};
static const char *const handler_names[HANDLERS] = {
	"store", "audit", "notify", "metrics",
};

/* The channel source: once per message, then once with data == NULL. */
static int on_result(struct eventq_source *src, const void *data, size_t len, void *userdata)
{
	struct state *s = userdata;
	struct result r;
	(void)src;

	if (data == NULL) {             /* closed and drained */
		s->end_of_stream = 1;
		return eventq_loop_stop(s->lp);
	}
	if (len != sizeof r) {
		s->malformed++;
		return 0;
	}
	memcpy(&r, data, sizeof r);     /* data is valid during this call only */
	if (r.producer >= PRODUCERS || r.handler >= HANDLERS) {
		s->malformed++;
		return 0;
	}
	if ((int64_t)r.seq <= s->last_seq[r.producer])
		s->out_of_order++;
	s->last_seq[r.producer] = r.seq;
	handlers[r.handler](s, &r);
	s->handled[r.handler]++;
	s->total++;
	return 0;
}

static int on_progress(struct eventq_source *src, uint64_t expirations, void *userdata)
{
	const struct state *s = userdata;
	(void)src;
	(void)expirations;
	printf("progress: %lu of %d results handled\n", s->total,
	       PRODUCERS * RESULTS_PER_PRODUCER);
	return 0;
}

static int on_signal(struct eventq_source *src, int signo, void *userdata)
{
	struct state *s = userdata;
	(void)src;
	printf("%s: stopping early\n", signo == SIGINT ? "SIGINT" : "SIGTERM");
	s->interrupted = 1;
	return eventq_loop_stop(s->lp);
}

int main(void)
{
	static struct state s;
	struct eventq_chan *chan;
	struct eventq_source *results, *progress;
	struct producer producers[PRODUCERS];
	sigset_t stop_signals;
	int ok = 1;

	/* Block SIGINT and SIGTERM before any thread starts, so every thread
	 * inherits the mask and only the loop's signalfd receives them. */
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGINT);
	sigaddset(&stop_signals, SIGTERM);
	check(-pthread_sigmask(SIG_BLOCK, &stop_signals, NULL), "pthread_sigmask");

	check(eventq_loop_new(&s.lp), "loop_new");
	for (int i = 0; i < PRODUCERS; i++)
		s.last_seq[i] = -1;

	check(eventq_chan_new(NULL, &chan), "chan_new");      /* 1024 messages */
	check(eventq_loop_add_chan(s.lp, chan, on_result, &s, NULL, &results), "add_chan");
	check(eventq_loop_add_timer(s.lp, PROGRESS_NS, PROGRESS_NS, on_progress, &s, NULL,
	                            &progress), "add_timer");
	check(eventq_loop_add_signal(s.lp, SIGINT, on_signal, &s, NULL, NULL), "add_signal");
	check(eventq_loop_add_signal(s.lp, SIGTERM, on_signal, &s, NULL, NULL), "add_signal");

	for (int i = 0; i < PRODUCERS; i++) {
		producers[i].id = (uint32_t)i;
		producers[i].tx = eventq_chan_clone(chan);
		if (!producers[i].tx ||
		    pthread_create(&producers[i].thread, NULL, producer_main, &producers[i])) {
			fprintf(stderr, "cannot start producer %d\n", i);
			return 1;
		}
	}

	/* B: run until end of stream (or a stop signal) */
	check(eventq_loop_run(s.lp), "loop_run");

	/* After an early stop producers may wait on a full channel: closing it
	 * makes their sends fail with -EPIPE, so they finish. */
	check(eventq_chan_close(chan), "close");
	for (int i = 0; i < PRODUCERS; i++)
		pthread_join(producers[i].thread, NULL);
	check(eventq_source_error(results), "results source");

	printf("\n%-10s %10s %10s\n", "handler", "sent", "handled");
	unsigned long total_sent = 0;
	for (int h = 0; h < HANDLERS; h++) {
		unsigned long n = atomic_load(&sent[h]);
		total_sent += n;
		printf("%-10s %10lu %10lu%s\n", handler_names[h], n, s.handled[h],
		       n == s.handled[h] ? "" : "   MISMATCH");
		if (n != s.handled[h])
			ok = 0;
	}
	printf("%-10s %10lu %10lu\n", "total", total_sent, s.total);
	if (s.interrupted) {
		struct eventq_chan_stats st;
		check(eventq_chan_get_stats(chan, &st, sizeof st), "stats");
		printf("interrupted: %llu results were still queued\n",
		       (unsigned long long)st.pending);
	}
	printf("per-producer order: %s; malformed: %lu; end of stream: %s\n",
	       s.out_of_order ? "BROKEN" : "held", s.malformed,
	       s.end_of_stream ? "seen" : "not seen");
	if (s.out_of_order || s.malformed || !s.end_of_stream || s.interrupted ||
	    total_sent != (unsigned long)PRODUCERS * RESULTS_PER_PRODUCER)
		ok = 0;

	eventq_source_free(progress);
	eventq_source_free(results);
	eventq_loop_free(s.lp);         /* the signal sources go with it */
	eventq_chan_free(chan);
	printf("%s\n", ok ? "ok: every result handled once, in order"
	                  : "FAILED: counts or order differ");
	return ok ? 0 : 1;
}
