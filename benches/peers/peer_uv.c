/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * libuv: a queue under a uv_mutex_t, and a uv_async_t to wake the loop;
 * the consumer runs uv_run on its own uv_loop_t. Producers push, then call
 * uv_async_send after every push, the usual way (libuv coalesces the calls:
 * one made while a wake-up is pending costs a load, and no syscall).
 * The async callback takes what is queued in one go, as libuv's own thread
 * pool hands back finished work (uv__work_done), and handles it unlocked.
 *
 * - bounded: a ring of CAPACITY slots of the run's message size (a copy
 *   and its length); a producer waits on a uv_cond_t while it is full. The
 *   callback snapshots the filled slots under the lock, checks them in
 *   place, then releases them under the lock and wakes waiting producers:
 *   two lock round trips per wake-up, not per message.
 * - unbounded: a linked list of malloc'd nodes (one per message, the
 *   message copied in); the callback detaches the whole list, checks and
 *   frees each node. Producers never wait: a consumer slower than its
 *   producers lets it grow (the peak is reported).
 */
#ifdef PEERS_HAVE_UV

#include <stdio.h>
#include <stdlib.h>

#include <uv.h>

#include "peers.h"

struct node {
    struct node *next;
    size_t len;
    unsigned char data[];
};

struct uvq {
    uv_loop_t loop;
    uv_async_t async;
    uv_mutex_t mu;
    uv_cond_t not_full;
    int bounded;
    size_t size;
    /* bounded: the ring, slots of `size` bytes and their lengths */
    unsigned char *ring;
    size_t *lens;
    size_t head, count;
    int waiting;
    /* unbounded: the list */
    struct node *first, *last;
    size_t depth, peak;
    struct tally *t;
};

static void uv_check(int rc, const char *what)
{
    if (rc)
        die("%s: %s", what, uv_strerror(rc));
}

static void bounded_cb(uv_async_t *a)
{
    struct uvq *q = a->data;
    struct tally *t = q->t;
    t->wakes++;
    uv_mutex_lock(&q->mu);
    size_t head = q->head, n = q->count;
    uv_mutex_unlock(&q->mu);
    /* Slots head..head+n stay ours until released: producers only write
     * slots past head + count. */
    for (size_t i = 0; i < n && !t->done; i++)
        tally_msg(t, q->ring + ((head + i) % CAPACITY) * q->size, q->lens[(head + i) % CAPACITY]);
    uv_mutex_lock(&q->mu);
    q->head = (q->head + n) % CAPACITY;
    q->count -= n;
    if (q->waiting)
        uv_cond_broadcast(&q->not_full);
    uv_mutex_unlock(&q->mu);
    if (t->done)
        uv_stop(&q->loop);
}

static void unbounded_cb(uv_async_t *a)
{
    struct uvq *q = a->data;
    struct tally *t = q->t;
    t->wakes++;
    uv_mutex_lock(&q->mu);
    struct node *n = q->first;
    q->first = q->last = NULL;
    if (q->depth > q->peak)
        q->peak = q->depth;
    q->depth = 0;
    uv_mutex_unlock(&q->mu);
    while (n) {
        struct node *next = n->next;
        tally_msg(t, n->data, n->len);
        free(n);
        n = next;
    }
    if (t->done)
        uv_stop(&q->loop);
}

static void *setup(const struct run_info *ri, int bounded)
{
    struct uvq *q = xmalloc(sizeof *q);
    memset(q, 0, sizeof *q);
    q->bounded = bounded;
    q->size = ri->size;
    uv_check(uv_loop_init(&q->loop), "uv_loop_init");
    uv_check(uv_async_init(&q->loop, &q->async, bounded ? bounded_cb : unbounded_cb),
             "uv_async_init");
    q->async.data = q;
    uv_check(uv_mutex_init(&q->mu), "uv_mutex_init");
    uv_check(uv_cond_init(&q->not_full), "uv_cond_init");
    if (bounded) {
        q->ring = xmalloc((size_t)CAPACITY * ri->size);
        q->lens = xmalloc(CAPACITY * sizeof *q->lens);
    }
    return q;
}
static void *bounded_setup(const struct run_info *ri) { return setup(ri, 1); }
static void *unbounded_setup(const struct run_info *ri) { return setup(ri, 0); }

static void *producer_open(void *st, int p)
{
    (void)p;
    return st;
}

static void bounded_send(void *tx, const void *msg, size_t len)
{
    struct uvq *q = tx;
    if (len > q->size)
        die("libuv ring: a %zu-byte message in a %zu-byte slot", len, q->size);
    uv_mutex_lock(&q->mu);
    while (q->count == CAPACITY) {
        q->waiting++;
        uv_cond_wait(&q->not_full, &q->mu);
        q->waiting--;
    }
    size_t slot = (q->head + q->count) % CAPACITY;
    memcpy(q->ring + slot * q->size, msg, len);
    q->lens[slot] = len;
    q->count++;
    uv_mutex_unlock(&q->mu);
    uv_check(uv_async_send(&q->async), "uv_async_send");
}

static void unbounded_send(void *tx, const void *msg, size_t len)
{
    struct uvq *q = tx;
    struct node *n = xmalloc(sizeof *n + len);
    n->next = NULL;
    n->len = len;
    memcpy(n->data, msg, len);
    uv_mutex_lock(&q->mu);
    if (q->last)
        q->last->next = n;
    else
        q->first = n;
    q->last = n;
    q->depth++;
    uv_mutex_unlock(&q->mu);
    uv_check(uv_async_send(&q->async), "uv_async_send");
}

static void consume(void *st, struct tally *t)
{
    struct uvq *q = st;
    q->t = t;
    t->wakes = 0;
    while (!t->done)
        uv_run(&q->loop, UV_RUN_DEFAULT); /* returns at uv_stop */
}

/* After every thread was joined: no producer can call uv_async_send any
 * more, so the handle is closed (on this thread, the loop running nowhere
 * else) and the loop freed. */
static void teardown(void *st, char *note, size_t cap)
{
    struct uvq *q = st;
    if (q->bounded)
        snprintf(note, cap, "cap %d, producers wait on a condvar", CAPACITY);
    else
        snprintf(note, cap, "unbounded; peak %zu queued at a wake-up", q->peak);
    uv_close((uv_handle_t *)&q->async, NULL);
    uv_run(&q->loop, UV_RUN_DEFAULT);
    uv_check(uv_loop_close(&q->loop), "uv_loop_close");
    uv_mutex_destroy(&q->mu);
    uv_cond_destroy(&q->not_full);
    for (struct node *n = q->first, *next; n; n = next) {
        next = n->next;
        free(n);
    }
    free(q->ring);
    free(q->lens);
    free(q);
}

const struct peer uv_bounded = {
    .label = "libuv uv_async_send + mutex ring, bounded",
    .setup = bounded_setup,
    .producer_open = producer_open,
    .send = bounded_send,
    .consume = consume,
    .teardown = teardown,
};
static const struct peer uv_unbounded = {
    .label = "libuv uv_async_send + mutex list, unbounded",
    .setup = unbounded_setup,
    .producer_open = producer_open,
    .send = unbounded_send,
    .consume = consume,
    .teardown = teardown,
};

static const struct peer *const rows[] = {&uv_bounded, &uv_unbounded};
const struct family family_uv = {
    .name = "libuv",
    .version = uv_version_string,
    .rows = rows,
    .nrows = 2,
};

#else
typedef int peer_uv_not_built; /* libuv missing when built: see peers.c */
#endif
