/* SPDX-License-Identifier: MIT OR Apache-2.0 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctest.h"

static uint32_t fnv1a(const uint8_t *p, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 16777619u;
	}
	return h;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static size_t payload_len(uint32_t producer, uint64_t seq)
{
	return (size_t)((seq * 13 + (uint64_t)producer * 7) % 53);
}

size_t eqt_make(uint8_t *buf, uint32_t producer, uint64_t seq)
{
	size_t n = payload_len(producer, seq);
	put32(buf, producer);
	put64(buf + 4, seq);
	for (size_t i = 0; i < n; i++)
		buf[12 + i] = (uint8_t)(producer * 31 + seq * 7 + i);
	put32(buf + 12 + n, fnv1a(buf, 12 + n));
	return 16 + n;
}

int eqt_check(const uint8_t *buf, size_t len, uint32_t *producer, uint64_t *seq)
{
	if (len < 16)
		return -1;
	uint32_t p = get32(buf);
	uint64_t s = get64(buf + 4);
	if (len != 16 + payload_len(p, s) || get32(buf + len - 4) != fnv1a(buf, len - 4))
		return -1;
	*producer = p;
	*seq = s;
	return 0;
}

/* --- Producer threads --------------------------------------------------- */

struct prod {
	pthread_t thread;
	eventq_chan *chan;
	uint32_t id;
	uint64_t count;
	int batch;
	uint64_t sent;
	int rc;
};

struct eqt_producers {
	int n;
	struct prod *prods;
};

static void *produce(void *arg)
{
	struct prod *p = arg;
	uint8_t buf[64 * EQT_MAX_MSG];
	eventq_buf bufs[64];
	int batch = p->batch > 64 ? 64 : p->batch;
	uint64_t seq = 0;
	while (seq < p->count) {
		if (batch <= 1) {
			size_t len = eqt_make(buf, p->id, seq);
			int rc = eventq_chan_send(p->chan, buf, len, EVENTQ_FOREVER);
			if (rc < 0) {
				p->rc = rc;
				break;
			}
			seq++;
			continue;
		}
		size_t n = 0, off = 0;
		for (; n < (size_t)batch && seq + n < p->count; n++) {
			bufs[n].data = buf + off;
			bufs[n].len = eqt_make(buf + off, p->id, seq + n);
			off += bufs[n].len;
		}
		size_t done = 0;
		while (done < n) {
			int rc = eventq_chan_send_batch(p->chan, bufs + done, n - done, EVENTQ_FOREVER);
			if (rc < 0) {
				p->rc = rc;
				goto out;
			}
			done += (size_t)rc;
		}
		seq += n;
	}
out:
	p->sent = seq;
	eventq_chan_free(p->chan);
	return NULL;
}

struct eqt_producers *eqt_producers_start(eventq_chan *chan, int nprod, uint32_t id_base,
                                          uint64_t count, int batch)
{
	struct eqt_producers *ps = calloc(1, sizeof *ps);
	if (!ps || !(ps->prods = calloc((size_t)nprod, sizeof *ps->prods))) {
		free(ps);
		eventq_chan_free(chan);
		return NULL;
	}
	for (int i = 0; i < nprod; i++) {
		struct prod *p = &ps->prods[i];
		p->chan = eventq_chan_clone(chan);
		p->id = id_base + (uint32_t)i;
		p->count = count;
		p->batch = batch;
		if (!p->chan || pthread_create(&p->thread, NULL, produce, p) != 0)
			abort(); /* test helper: no partial start to unwind */
		ps->n++;
	}
	eventq_chan_free(chan);
	return ps;
}

int eqt_producers_wait(struct eqt_producers *ps, uint64_t *sent)
{
	int rc = 0;
	*sent = 0;
	for (int i = 0; i < ps->n; i++) {
		pthread_join(ps->prods[i].thread, NULL);
		*sent += ps->prods[i].sent;
		if (!rc)
			rc = ps->prods[i].rc;
	}
	free(ps->prods);
	free(ps);
	return rc;
}

/* --- Loop consumer ------------------------------------------------------ */

struct eqt_consumer {
	pthread_t thread;
	eventq_loop *lp;
	uint32_t nprod, id_base;
	uint64_t *next;
	struct eqt_result res;
};

static int on_message(eventq_source *src, const void *data, size_t len, void *ud)
{
	(void)src;
	struct eqt_consumer *c = ud;
	if (!data) {
		c->res.eof++;
		eventq_loop_stop(c->lp);
		return 0;
	}
	c->res.received++;
	uint32_t p;
	uint64_t seq;
	if (eqt_check(data, len, &p, &seq) < 0 || p < c->id_base || p - c->id_base >= c->nprod) {
		c->res.bad++;
		return 0;
	}
	if (seq == c->next[p - c->id_base])
		c->next[p - c->id_base]++;
	else
		c->res.out_of_order++;
	return 0;
}

static void *consume(void *arg)
{
	struct eqt_consumer *c = arg;
	c->res.rc = eventq_loop_run(c->lp);
	return NULL;
}

struct eqt_consumer *eqt_consumer_start(eventq_chan *chan, uint32_t nprod, uint32_t id_base)
{
	struct eqt_consumer *c = calloc(1, sizeof *c);
	if (!c || !(c->next = calloc(nprod ? nprod : 1, sizeof *c->next)) ||
	    eventq_loop_new(&c->lp) < 0)
		abort();
	c->nprod = nprod;
	c->id_base = id_base;
	if (eventq_loop_add_chan(c->lp, chan, on_message, c, NULL, NULL) < 0 ||
	    pthread_create(&c->thread, NULL, consume, c) != 0)
		abort();
	eventq_chan_free(chan); /* the source holds its own reference */
	return c;
}

void eqt_consumer_wait(struct eqt_consumer *c, struct eqt_result *res, uint64_t *next)
{
	pthread_join(c->thread, NULL);
	*res = c->res;
	memcpy(next, c->next, c->nprod * sizeof *next);
	eventq_loop_free(c->lp);
	free(c->next);
	free(c);
}

/* --- Benchmark floor ---------------------------------------------------- */

struct bench_cons {
	eventq_chan *chan;
	uint64_t n;
	size_t len;
	int batch;
	int rc;
};

static void *bench_consume(void *arg)
{
	struct bench_cons *b = arg;
	size_t lens[256];
	size_t cap = (size_t)b->batch * (b->len ? b->len : 1);
	uint8_t *buf = malloc(cap);
	uint64_t got = 0;
	while (!b->rc && got < b->n) {
		int rc;
		if (b->batch > 1) {
			rc = eventq_chan_recv_batch(b->chan, buf, cap, lens, (size_t)b->batch, EVENTQ_FOREVER);
		} else {
			rc = eventq_chan_recv(b->chan, buf, cap, lens, EVENTQ_FOREVER);
			if (rc == 0)
				rc = 1;
		}
		if (rc < 0)
			b->rc = rc;
		else
			got += (uint64_t)rc;
	}
	free(buf);
	return NULL;
}

int64_t eqt_bench_1p1c(const uint8_t *msg, size_t len, uint64_t n, int batch, size_t capacity)
{
	if (batch < 1 || batch > 256)
		return -EINVAL;
	eventq_chan_opts o;
	eventq_chan_opts_init(&o, sizeof o);
	o.capacity = capacity;
	eventq_chan *ch;
	int rc = eventq_chan_new(&o, &ch);
	if (rc < 0)
		return rc;
	eventq_buf bufs[256];
	for (int i = 0; i < batch; i++) {
		bufs[i].data = msg;
		bufs[i].len = len;
	}
	struct bench_cons b = { ch, n, len, batch, 0 };
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_t t;
	if (pthread_create(&t, NULL, bench_consume, &b) != 0) {
		eventq_chan_free(ch);
		return -EAGAIN;
	}
	for (uint64_t sent = 0; sent < n && !rc;) {
		uint64_t k = n - sent < (uint64_t)batch ? n - sent : (uint64_t)batch;
		rc = batch > 1 ? eventq_chan_send_batch(ch, bufs, (size_t)k, EVENTQ_FOREVER)
		               : eventq_chan_send(ch, msg, len, EVENTQ_FOREVER);
		if (rc >= 0) {
			sent += batch > 1 ? (uint64_t)rc : 1;
			rc = 0;
		}
	}
	if (rc < 0)
		eventq_chan_close(ch); /* wakes the consumer */
	pthread_join(t, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	eventq_chan_free(ch);
	if (rc < 0)
		return rc;
	if (b.rc < 0)
		return b.rc;
	return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
}
