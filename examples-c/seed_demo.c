/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * seed_demo: the seed article's bug, reproduced, and the same traffic through
 * libeventq.
 *
 * The seed (a groundwork note for kubelet's OOM handling) has thread A write
 * each request's result into an eventfd and thread B epoll-wait on it, read
 * one u64 per wake-up and dispatch it. An eventfd is a counter: writes that
 * land before B reads are summed into one value, and epoll says "ready", not
 * "how many". Under bursts B sees fewer events than A wrote and dispatches
 * sums that no request produced.
 *
 * The seed's three use cases, each run twice:
 *   1. one client, one request per interval (1 ms, 300 requests)
 *   2. one client, a burst of 200,000 requests back to back
 *   3. 8 clients at once, each a burst of 50,000 requests
 * through
 *   eventfd   exactly as the seed's threads A and B did;
 *   libeventq A sends each result as a message on a channel; B epoll-waits on
 *             the channel's receive fd and drains it with non-blocking
 *             receives until -EAGAIN.
 *
 * Each client's requests are handled by its own producer thread playing the
 * seed's thread A (with 8 clients there are 8 producers writing the one fd,
 * which is what the seed's A does when it serves many clients). Every result
 * is a distinct non-zero u64 encoding (client, sequence, check bits). B
 * classifies each value it reads:
 *   intact  a valid encoding from that client, later in its sequence than the
 *           last intact one (so: exactly once, in per-client order);
 *   merged  any other value: a sum of several results, a repeat, a reordering,
 *           or a message of the wrong length;
 *   lost    results sent but never delivered intact (sent - intact).
 * A sum of two or more results fails the 20 check bits (or decodes to a
 * client that does not exist) except with odds of about one in a million.
 *
 * With a bare eventfd, B cannot tell "A is done" from the data fd itself: A
 * signals a second eventfd after its last write; B then does one last read so
 * the loss count is honest and B never hangs. The channel needs no such
 * marker: the last producer closes it and B's receive reports end of stream
 * (-EPIPE) once everything queued is delivered.
 *
 * Exit status 0 only if libeventq delivered every result intact, none merged
 * or lost, in all three use cases. The bare eventfd's losses are expected.
 *
 * Build: cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread \
 *            $(pkg-config --cflags eventq) seed_demo.c \
 *            $(pkg-config --libs eventq) -o seed_demo
 */

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <eventq.h>

#define MAX_CLIENTS 15          /* client id + 1 must fit in 4 bits */
#define MAX_SEQ (1u << 18)      /* sequence numbers fit in 18 bits */

/* ---- results: a distinct, self-checking u64 per (client, sequence) ------ */

/*
 * bits 38..41: client + 1 (never 0, so the value is never 0)
 * bits 20..37: sequence
 * bits  0..19: check bits, a hash of (client, sequence)
 * Every value is below 2^42, so even 2^21 results summed in the eventfd's
 * counter stay below 2^63 and A's writes never meet the counter's ceiling.
 */
static uint32_t check_bits(unsigned client, uint32_t seq)
{
	uint64_t x = ((uint64_t)client << 32 | seq) + 0x9e3779b97f4a7c15u;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
	x ^= x >> 31;
	return (uint32_t)(x & 0xfffffu);
}

static uint64_t encode(unsigned client, uint32_t seq)
{
	return (uint64_t)(client + 1) << 38 | (uint64_t)seq << 20 |
	       check_bits(client, seq);
}

/* B's bookkeeping for one run. Only B touches it. */
struct tally {
	unsigned nclients;
	int64_t last_seq[MAX_CLIENTS];  /* last intact sequence, -1 for none */
	uint64_t wakeups;               /* epoll_wait returns with data ready */
	uint64_t intact;
	uint64_t merged;
};

static void tally_init(struct tally *t, unsigned nclients)
{
	memset(t, 0, sizeof *t);
	t->nclients = nclients;
	for (unsigned i = 0; i < MAX_CLIENTS; i++)
		t->last_seq[i] = -1;
}

/* B's "dispatch": route a result to its client, or notice it is garbage. */
static void dispatch(struct tally *t, uint64_t v)
{
	uint64_t client1 = v >> 38;
	uint32_t seq = (uint32_t)(v >> 20) & (MAX_SEQ - 1);

	if (client1 == 0 || client1 > t->nclients ||
	    (v & 0xfffffu) != check_bits((unsigned)client1 - 1, seq) ||
	    (int64_t)seq <= t->last_seq[client1 - 1]) {
		t->merged++;
		return;
	}
	t->last_seq[client1 - 1] = seq;
	t->intact++;
}

/* ---- small helpers ------------------------------------------------------ */

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("seed_demo: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

static void die_errno(const char *what)
{
	die("%s: %s", what, strerror(errno));
}

static void die_eq(const char *what, int err)
{
	die("%s: %s (%d)", what, eventq_strerror(err), err);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Adds v to an eventfd's counter, as the seed's A does. */
static void eventfd_add(int fd, uint64_t v)
{
	for (;;) {
		ssize_t n = write(fd, &v, sizeof v);
		if (n == (ssize_t)sizeof v)
			return;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			/* Counter at its ceiling (cannot happen with these
			 * values, but never spin): wait until B reads. */
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				die_errno("poll eventfd");
			continue;
		}
		die_errno("write eventfd");
	}
}

/* Reads and resets an eventfd's counter; false if it was zero. */
static bool eventfd_take(int fd, uint64_t *v)
{
	for (;;) {
		ssize_t n = read(fd, v, sizeof *v);
		if (n == (ssize_t)sizeof *v)
			return true;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return false;
		die_errno("read eventfd");
	}
}

static void epoll_add(int ep, int fd, uint64_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		die_errno("epoll_ctl");
}

/* ---- the use cases and the producers (thread A) ------------------------- */

enum transport { BARE_EVENTFD, LIBEVENTQ };

struct use_case {
	const char *name;
	unsigned clients;
	uint32_t per_client;
	long interval_ns;  /* 0: a burst, back to back */
};

struct run {
	const struct use_case *uc;
	enum transport tr;
	pthread_barrier_t start;   /* producers and B start together */
	/* bare eventfd */
	int data_fd;               /* the seed's eventfd */
	int done_fd;               /* end marker: +1 per finished producer */
	/* libeventq */
	struct eventq_chan *chan;
	atomic_uint producing;     /* the last producer out closes the channel */
};

struct producer {
	struct run *run;
	unsigned client;
	struct eventq_chan *tx;           /* this thread's own handle (libeventq) */
	pthread_t thread;
};

static void *producer_main(void *arg)
{
	struct producer *p = arg;
	struct run *r = p->run;
	const struct use_case *uc = r->uc;
	struct timespec next;

	pthread_barrier_wait(&r->start);
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (uint32_t seq = 0; seq < uc->per_client; seq++) {
		if (uc->interval_ns > 0) {
			/* The client's pace: a load pattern, not a handshake. */
			next.tv_nsec += uc->interval_ns;
			while (next.tv_nsec >= 1000000000L) {
				next.tv_nsec -= 1000000000L;
				next.tv_sec++;
			}
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME,
					       &next, NULL) == EINTR)
				;
		}
		/* "Process the request", then hand its result to B. */
		uint64_t result = encode(p->client, seq);
		if (r->tr == BARE_EVENTFD) {
			eventfd_add(r->data_fd, result);
		} else {
			int rc = eventq_chan_send(p->tx, &result, sizeof result,
						  EVENTQ_FOREVER);
			if (rc != 0)
				die_eq("eventq_chan_send", rc);
		}
	}
	if (r->tr == BARE_EVENTFD) {
		eventfd_add(r->done_fd, 1);
	} else {
		if (atomic_fetch_sub(&r->producing, 1) == 1) {
			int rc = eventq_chan_close(p->tx);
			if (rc != 0)
				die_eq("eventq_chan_close", rc);
		}
		eventq_chan_free(p->tx);
	}
	return NULL;
}

/* ---- the consumers (thread B) ------------------------------------------- */

/* The seed's B: epoll on the eventfd, one read per wake-up, dispatch. */
static void consume_bare(struct run *r, struct tally *t)
{
	enum { DATA, DONE };
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die_errno("epoll_create1");
	epoll_add(ep, r->data_fd, DATA);
	epoll_add(ep, r->done_fd, DONE);

	uint64_t finished = 0;
	for (;;) {
		struct epoll_event evs[2];
		int n = epoll_wait(ep, evs, 2, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die_errno("epoll_wait");
		}
		bool data = false, done = false;
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u64 == DATA)
				data = true;
			else
				done = true;
		}
		uint64_t v;
		if (data) {
			t->wakeups++;
			if (eventfd_take(r->data_fd, &v))
				dispatch(t, v);
		}
		if (done) {
			if (eventfd_take(r->done_fd, &v))
				finished += v;
			if (finished == r->uc->clients) {
				/* Every write happened before its producer's
				 * end marker: whatever is left is in the
				 * counter now. */
				if (eventfd_take(r->data_fd, &v))
					dispatch(t, v);
				break;
			}
		}
	}
	close(ep);
}

/* B with libeventq: epoll on the receive fd, drain every message per wake. */
static void consume_chan(struct run *r, struct tally *t)
{
	int fd = eventq_chan_recv_fd(r->chan);
	if (fd < 0)
		die_eq("eventq_chan_recv_fd", fd);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die_errno("epoll_create1");
	epoll_add(ep, fd, 0);

	for (;;) {
		struct epoll_event ev;
		int n = epoll_wait(ep, &ev, 1, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die_errno("epoll_wait");
		}
		if (n == 0)
			continue;
		t->wakeups++;
		for (;;) {
			uint64_t v = 0;
			unsigned char buf[64];
			size_t len = 0;
			int rc = eventq_chan_recv(r->chan, buf, sizeof buf, &len, 0);
			if (rc == -EAGAIN)
				break;          /* drained: back to epoll */
			if (rc == -EPIPE)
				goto end;       /* closed and drained */
			if (rc != 0)
				die_eq("eventq_chan_recv", rc);
			if (len != sizeof v) {
				t->merged++;    /* not whole: would break D2 */
				continue;
			}
			memcpy(&v, buf, sizeof v);
			dispatch(t, v);
		}
	}
end:
	close(ep);
}

/* ---- one run: a use case through one transport -------------------------- */

struct result {
	uint64_t sent;
	struct tally t;
	double seconds;
	struct eventq_chan_stats stats;  /* libeventq only */
};

static void run_case(const struct use_case *uc, enum transport tr,
		     struct result *res)
{
	struct run r;
	struct producer prod[MAX_CLIENTS];

	memset(&r, 0, sizeof r);
	memset(res, 0, sizeof *res);
	r.uc = uc;
	r.tr = tr;
	r.data_fd = r.done_fd = -1;
	atomic_init(&r.producing, uc->clients);
	tally_init(&res->t, uc->clients);
	res->sent = (uint64_t)uc->clients * uc->per_client;

	if (tr == BARE_EVENTFD) {
		/* As in the seed: counter 0; non-blocking so B never blocks
		 * in read (A never meets the ceiling, see encode()). */
		r.data_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		r.done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (r.data_fd < 0 || r.done_fd < 0)
			die_errno("eventfd");
	} else {
		int rc = eventq_chan_new(NULL, &r.chan);  /* capacity 1024 */
		if (rc != 0)
			die_eq("eventq_chan_new", rc);
	}

	int rc = pthread_barrier_init(&r.start, NULL, uc->clients + 1);
	if (rc != 0)
		die("pthread_barrier_init: %s", strerror(rc));
	for (unsigned i = 0; i < uc->clients; i++) {
		prod[i].run = &r;
		prod[i].client = i;
		prod[i].tx = NULL;
		if (tr == LIBEVENTQ) {
			prod[i].tx = eventq_chan_clone(r.chan);
			if (prod[i].tx == NULL)
				die("eventq_chan_clone failed");
		}
		rc = pthread_create(&prod[i].thread, NULL, producer_main, &prod[i]);
		if (rc != 0)
			die("pthread_create: %s", strerror(rc));
	}

	pthread_barrier_wait(&r.start);
	double t0 = now_s();
	if (tr == BARE_EVENTFD)
		consume_bare(&r, &res->t);
	else
		consume_chan(&r, &res->t);
	res->seconds = now_s() - t0;

	for (unsigned i = 0; i < uc->clients; i++)
		pthread_join(prod[i].thread, NULL);
	pthread_barrier_destroy(&r.start);

	if (tr == BARE_EVENTFD) {
		close(r.data_fd);
		close(r.done_fd);
	} else {
		/* Our handle is the last: its final counters. */
		rc = eventq_chan_free_final(r.chan, &res->stats, sizeof res->stats);
		if (rc != 1)
			die("eventq_chan_free_final returned %d, not 1", rc);
	}
}

int main(void)
{
	static const struct use_case cases[] = {
		{ "1 paced client (1 ms)", 1, 300, 1000000L },
		{ "1 client, burst", 1, 200000, 0 },
		{ "8 clients, bursts", 8, 50000, 0 },
	};
	enum { NCASES = sizeof cases / sizeof cases[0] };
	static struct result res[NCASES][2];
	bool ok = true;

	for (int c = 0; c < NCASES; c++) {
		if (cases[c].clients > MAX_CLIENTS || cases[c].per_client > MAX_SEQ)
			die("use case %d is too big for the encoding", c);
		run_case(&cases[c], BARE_EVENTFD, &res[c][0]);
		run_case(&cases[c], LIBEVENTQ, &res[c][1]);
	}

	printf("libeventq %s: the seed's three use cases, bare eventfd vs channel\n\n",
	       eventq_version_string());
	printf("%-22s %-9s %8s %9s %8s %7s %8s %7s\n", "use case", "transport",
	       "sent", "wake-ups", "intact", "merged", "lost", "time");
	for (int c = 0; c < NCASES; c++) {
		for (int k = 0; k < 2; k++) {
			const struct result *x = &res[c][k];
			uint64_t lost = x->sent - x->t.intact;
			printf("%-22s %-9s %8" PRIu64 " %9" PRIu64 " %8" PRIu64
			       " %7" PRIu64 " %8" PRIu64 " %6.2fs\n",
			       k == 0 ? cases[c].name : "",
			       k == 0 ? "eventfd" : "libeventq", x->sent,
			       x->t.wakeups, x->t.intact, x->t.merged, lost,
			       x->seconds);
			if (k == 1) {
				const struct eventq_chan_stats *s = &x->stats;
				if (lost != 0 || x->t.merged != 0 ||
				    x->t.intact != x->sent || s->sent != x->sent ||
				    s->received != x->sent || s->dropped != 0)
					ok = false;
			}
		}
	}

	printf("\nlibeventq channel counters (one eventfd write per empty-to-non-empty\n"
	       "transition and one at close; the bare eventfd takes one per message):\n");
	printf("%-22s %8s %8s %10s %11s %11s\n", "use case", "sent", "received",
	       "peak depth", "recv rings", "send rings");
	for (int c = 0; c < NCASES; c++) {
		const struct eventq_chan_stats *s = &res[c][1].stats;
		printf("%-22s %8" PRIu64 " %8" PRIu64 " %10" PRIu64 " %11" PRIu64
		       " %11" PRIu64 "\n", cases[c].name, s->sent, s->received,
		       s->peak_depth, s->recv_doorbell_rings,
		       s->send_doorbell_rings);
	}

	printf("\nintact: delivered exactly once, whole, in per-client order.\n"
	       "merged: a read that returned no single result (a sum of several).\n"
	       "lost:   sent but never delivered intact.\n\n");
	if (ok)
		printf("PASS: libeventq delivered every result intact in all three use cases.\n");
	else
		printf("FAIL: libeventq merged or lost results (see the table).\n");
	return ok ? 0 : 1;
}
