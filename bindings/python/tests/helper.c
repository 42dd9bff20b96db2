/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * C side of the Python binding's tests, built by conftest.py into a shared
 * object against the installed libeventq (pkg-config) and loaded with cffi.
 *
 * Producers: N pthreads, each with its own clone of a channel handle,
 * sending `per_thread` sequenced messages (optionally in batches); the last
 * to finish closes the channel if asked. A message is
 *   u32 producer id | u64 sequence | (seq % 29) bytes of (id * 31 + seq) & 0xff
 * (little-endian), so a receiver can check it arrived whole (D2), once (D1)
 * and in its producer's order (D3).
 */
#include <eventq.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PRODUCERS 64
#define MAX_MSG (12 + 28)

struct producers;

struct producer {
    struct producers *group;
    uint32_t id;
    eventq_chan *tx;
    pthread_t thread;
};

struct producers {
    eventq_chan *chan;
    int n;
    uint64_t per_thread;
    size_t batch;
    int close_at_end;
    atomic_int running;
    atomic_int error; /* first failure, a negative errno */
    struct producer p[MAX_PRODUCERS];
};

size_t eqtest_encode(uint32_t id, uint64_t seq, uint8_t *buf)
{
    size_t extra = (size_t)(seq % 29);
    memcpy(buf, &id, 4);
    memcpy(buf + 4, &seq, 8);
    memset(buf + 12, (int)((id * 31u + seq) & 0xff), extra);
    return 12 + extra;
}

static int send_all(eventq_chan *tx, const eventq_buf *bufs, size_t n)
{
    while (n > 0) {
        int rc = eventq_chan_send_batch(tx, bufs, n, EVENTQ_FOREVER);
        if (rc < 0)
            return rc;
        bufs += rc;
        n -= (size_t)rc;
    }
    return 0;
}

static void *produce(void *arg)
{
    struct producer *me = arg;
    struct producers *g = me->group;
    size_t batch = g->batch ? g->batch : 1;
    uint8_t *store = malloc(batch * MAX_MSG);
    eventq_buf *bufs = malloc(batch * sizeof *bufs);
    int rc = store && bufs ? 0 : -ENOMEM;
    size_t k = 0;
    for (uint64_t seq = 0; rc == 0 && seq < g->per_thread; seq++) {
        uint8_t *m = store + k * MAX_MSG;
        size_t len = eqtest_encode(me->id, seq, m);
        if (batch == 1) {
            rc = eventq_chan_send(me->tx, m, len, EVENTQ_FOREVER);
            continue;
        }
        bufs[k].data = m;
        bufs[k].len = len;
        if (++k == batch) {
            rc = send_all(me->tx, bufs, k);
            k = 0;
        }
    }
    if (rc == 0 && k > 0)
        rc = send_all(me->tx, bufs, k);
    if (rc < 0) {
        int none = 0;
        atomic_compare_exchange_strong(&g->error, &none, rc);
    }
    if (atomic_fetch_sub(&g->running, 1) == 1 && g->close_at_end)
        eventq_chan_close(me->tx);
    eventq_chan_free(me->tx);
    free(store);
    free(bufs);
    return NULL;
}

/* Starts n producers on `chan` (an eventq_chan *, taken over). NULL on a
 * bad argument or if a thread could not be started (the rest are joined). */
void *eqtest_producers_start(uintptr_t chan, int n, uint64_t per_thread, size_t batch,
                             int close_at_end)
{
    if (chan == 0 || n < 1 || n > MAX_PRODUCERS)
        return NULL;
    struct producers *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->chan = (eventq_chan *)chan;
    g->n = n;
    g->per_thread = per_thread;
    g->batch = batch;
    g->close_at_end = close_at_end;
    atomic_init(&g->running, n);
    atomic_init(&g->error, 0);
    for (int i = 0; i < n; i++) {
        g->p[i].group = g;
        g->p[i].id = (uint32_t)i;
        g->p[i].tx = eventq_chan_clone(g->chan);
    }
    for (int i = 0; i < n; i++)
        pthread_create(&g->p[i].thread, NULL, produce, &g->p[i]);
    return g;
}

/* Joins the producers, frees everything; 0 or the first negative errno. */
int eqtest_producers_join(void *handle)
{
    struct producers *g = handle;
    for (int i = 0; i < g->n; i++)
        pthread_join(g->p[i].thread, NULL);
    int rc = atomic_load(&g->error);
    eventq_chan_free(g->chan);
    free(g);
    return rc;
}

/* Sets *flag to 1, then blocks in eventq_chan_recv without limit. Called
 * from Python: if the GIL were held during the call, the thread that must
 * see the flag and send could never run. */
int eqtest_recv_announce(uintptr_t chan, atomic_int *flag, void *buf, size_t cap, size_t *len)
{
    atomic_store(flag, 1);
    return eventq_chan_recv((const eventq_chan *)chan, buf, cap, len, EVENTQ_FOREVER);
}
