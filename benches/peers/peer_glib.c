/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * GLib: a GAsyncQueue (it carries pointers) of g_malloc'd message copies,
 * each with its length, drained by a custom GSource on the consumer's own
 * GMainContext, run by g_main_loop_run. The source's prepare and check report "ready" while the
 * queue is not empty; dispatch pops with g_async_queue_try_pop until it is.
 * A producer pushes under the queue's lock and, when its push made the
 * queue non-empty, calls g_main_context_wakeup so a blocked poll returns
 * (pushes onto a non-empty queue need none: the consumer has not yet
 * drained to empty, and prepare finds them before it blocks again).
 * GAsyncQueue is unbounded: producers never wait (the peak is reported).
 */
#ifdef PEERS_HAVE_GLIB

#include <stdio.h>
#include <stdlib.h>

#include <glib.h>

#include "peers.h"

struct gq;

/* A queued message: a GAsyncQueue item is a pointer, never NULL. */
struct gmsg {
    size_t len;
    unsigned char data[];
};

typedef struct {
    GSource base;
    struct gq *g;
} QueueSource;

struct gq {
    GAsyncQueue *q;
    GMainContext *ctx;
    GMainLoop *loop;
    GSource *src;
    struct tally *t;
    gint peak;
};

static gboolean q_prepare(GSource *s, gint *timeout)
{
    *timeout = -1;
    return g_async_queue_length(((QueueSource *)s)->g->q) > 0;
}

static gboolean q_check(GSource *s)
{
    return g_async_queue_length(((QueueSource *)s)->g->q) > 0;
}

static gboolean q_dispatch(GSource *s, GSourceFunc cb, gpointer ud)
{
    (void)cb;
    (void)ud;
    struct gq *g = ((QueueSource *)s)->g;
    struct tally *t = g->t;
    gint len = g_async_queue_length(g->q);
    if (len > g->peak)
        g->peak = len;
    t->wakes++;
    struct gmsg *m;
    while ((m = g_async_queue_try_pop(g->q))) {
        int done = tally_msg(t, m->data, m->len);
        g_free(m);
        if (done) {
            g_main_loop_quit(g->loop);
            break;
        }
    }
    return G_SOURCE_CONTINUE;
}

static GSourceFuncs queue_funcs = {
    .prepare = q_prepare,
    .check = q_check,
    .dispatch = q_dispatch,
};

static void *setup(const struct run_info *ri)
{
    (void)ri;
    struct gq *g = xmalloc(sizeof *g);
    memset(g, 0, sizeof *g);
    g->q = g_async_queue_new();
    g->ctx = g_main_context_new();
    g->loop = g_main_loop_new(g->ctx, FALSE);
    g->src = g_source_new(&queue_funcs, sizeof(QueueSource));
    ((QueueSource *)g->src)->g = g;
    g_source_attach(g->src, g->ctx);
    return g;
}

static void *producer_open(void *st, int p)
{
    (void)p;
    return st;
}

static void gsend(void *tx, const void *msg, size_t len)
{
    struct gq *g = tx;
    struct gmsg *m = g_malloc(sizeof *m + len);
    m->len = len;
    memcpy(m->data, msg, len);
    g_async_queue_lock(g->q);
    g_async_queue_push_unlocked(g->q, m);
    gboolean was_empty = g_async_queue_length_unlocked(g->q) == 1;
    g_async_queue_unlock(g->q);
    if (was_empty)
        g_main_context_wakeup(g->ctx);
}

static void consume(void *st, struct tally *t)
{
    struct gq *g = st;
    g->t = t;
    t->wakes = 0;
    g_main_context_push_thread_default(g->ctx);
    g_main_loop_run(g->loop);
    g_main_context_pop_thread_default(g->ctx);
    if (!t->done)
        die("g_main_loop_run returned before the run was complete");
}

static void teardown(void *st, char *note, size_t cap)
{
    struct gq *g = st;
    snprintf(note, cap, "unbounded; peak %d queued at a dispatch", g->peak);
    g_source_destroy(g->src);
    g_source_unref(g->src);
    g_main_loop_unref(g->loop);
    g_main_context_unref(g->ctx);
    void *m;
    while ((m = g_async_queue_try_pop(g->q)))
        g_free(m);
    g_async_queue_unref(g->q);
    free(g);
}

static const struct peer glib_queue = {
    .label = "GLib GAsyncQueue + GSource, GMainLoop",
    .setup = setup,
    .producer_open = producer_open,
    .send = gsend,
    .consume = consume,
    .teardown = teardown,
};

static const char *version(void)
{
    static char v[32];
    snprintf(v, sizeof v, "%u.%u.%u", glib_major_version, glib_minor_version,
             glib_micro_version);
    return v;
}

static const struct peer *const rows[] = {&glib_queue};
const struct family family_glib = {
    .name = "GLib",
    .version = version,
    .rows = rows,
    .nrows = 1,
};

#else
typedef int peer_glib_not_built; /* GLib missing when built: see peers.c */
#endif
