/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * libeventq through its C ABI (the installed library): one channel of
 * capacity CAPACITY, one handle (eventq_chan_clone) per producer, producers
 * blocking in eventq_chan_send(.., EVENTQ_FOREVER).
 *
 * - epoll: the consumer waits on eventq_chan_recv_fd in its own epoll set
 *   (level-triggered, blocking epoll_wait) and drains with non-blocking
 *   receives until -EAGAIN: eventq_chan_recv one message per call, or
 *   eventq_chan_recv_batch BATCH per call.
 * - loop: libeventq's own loop, eventq_loop_add_chan with one callback per
 *   message, run by eventq_loop_run on the consumer thread; the callback
 *   stops the loop once the run is complete. Default budget
 *   (EVENTQ_DEFAULT_BUDGET messages per iteration), or 1024 set with
 *   eventq_source_set_budget.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <eventq.h>

#include "peers.h"

struct eq {
    eventq_chan *chan;
    size_t size;
    int batch;
    /* loop rows */
    eventq_loop *lp;
    eventq_source *src;
    struct tally *t;
};

static eventq_chan *new_chan(void)
{
    eventq_chan_opts opts;
    eventq_chan *c;
    int rc = eventq_chan_opts_init(&opts, sizeof opts);
    if (rc)
        die("eventq_chan_opts_init: %s", eventq_strerror(rc));
    opts.capacity = CAPACITY;
    if ((rc = eventq_chan_new(&opts, &c)))
        die("eventq_chan_new: %s", eventq_strerror(rc));
    return c;
}

static void *eq_producer_open(void *st, int p)
{
    (void)p;
    eventq_chan *c = eventq_chan_clone(((struct eq *)st)->chan);
    if (!c)
        die("eventq_chan_clone failed");
    return c;
}

static void eq_send(void *tx, const void *msg, size_t len)
{
    int rc = eventq_chan_send(tx, msg, len, EVENTQ_FOREVER);
    if (rc)
        die("eventq_chan_send: %s", eventq_strerror(rc));
}

static void eq_producer_close(void *tx)
{
    eventq_chan_free(tx);
}

/* --- epoll + eventq_chan_recv / eventq_chan_recv_batch -------------------- */

static void *eq_epoll_setup_common(const struct run_info *ri, int batch)
{
    struct eq *e = xmalloc(sizeof *e);
    *e = (struct eq){.chan = new_chan(), .size = ri->size, .batch = batch};
    return e;
}
static void *eq_epoll_setup(const struct run_info *ri) { return eq_epoll_setup_common(ri, 0); }
static void *eq_batch_setup(const struct run_info *ri) { return eq_epoll_setup_common(ri, 1); }

static void eq_epoll_consume(void *st, struct tally *t)
{
    struct eq *e = st;
    int fd = eventq_chan_recv_fd(e->chan);
    if (fd < 0)
        die("eventq_chan_recv_fd: %s", eventq_strerror(fd));
    int ep = epoll_for(fd, 0);
    size_t cap = e->batch ? BATCH * e->size : e->size;
    unsigned char *buf = xmalloc(cap);
    size_t lens[BATCH];
    t->wakes = 0;
    for (;;) {
        epoll_wait1(ep);
        t->wakes++;
        for (;;) {
            if (e->batch) {
                int n = eventq_chan_recv_batch(e->chan, buf, cap, lens, BATCH, 0);
                if (n == -EAGAIN)
                    break;
                if (n < 0)
                    die("eventq_chan_recv_batch: %s", eventq_strerror(n));
                size_t off = 0;
                for (int i = 0; i < n; i++) {
                    if (tally_msg(t, buf + off, lens[i]))
                        goto done;
                    off += lens[i];
                }
            } else {
                size_t len;
                int rc = eventq_chan_recv(e->chan, buf, cap, &len, 0);
                if (rc == -EAGAIN)
                    break;
                if (rc)
                    die("eventq_chan_recv: %s", eventq_strerror(rc));
                if (tally_msg(t, buf, len))
                    goto done;
            }
        }
    }
done:
    free(buf);
    close(ep);
}

static void eq_teardown(void *st, char *note, size_t cap)
{
    struct eq *e = st;
    eventq_chan_stats s;
    if (eventq_chan_get_stats(e->chan, &s, sizeof s) == 0)
        snprintf(note, cap, "cap %d; %.4f doorbell rings/msg", CAPACITY,
                 s.sent ? (double)s.recv_doorbell_rings / (double)s.sent : 0.0);
    eventq_source_free(e->src);
    eventq_loop_free(e->lp);
    eventq_chan_free(e->chan);
    free(e);
}

/* --- eventq_loop_add_chan ------------------------------------------------- */

static int eq_loop_cb(eventq_source *src, const void *data, size_t len, void *ud)
{
    (void)src;
    struct eq *e = ud;
    if (!data) /* end of stream: the channel is never closed here */
        return 0;
    if (tally_msg(e->t, data, len))
        eventq_loop_stop(e->lp);
    return 0;
}

static void *eq_loop_setup_common(const struct run_info *ri, size_t budget)
{
    struct eq *e = xmalloc(sizeof *e);
    *e = (struct eq){.chan = new_chan(), .size = ri->size};
    int rc = eventq_loop_new(&e->lp);
    if (rc)
        die("eventq_loop_new: %s", eventq_strerror(rc));
    if ((rc = eventq_loop_add_chan(e->lp, e->chan, eq_loop_cb, e, NULL, &e->src)))
        die("eventq_loop_add_chan: %s", eventq_strerror(rc));
    if (budget && (rc = eventq_source_set_budget(e->src, budget)))
        die("eventq_source_set_budget: %s", eventq_strerror(rc));
    return e;
}
static void *eq_loop_setup(const struct run_info *ri) { return eq_loop_setup_common(ri, 0); }
static void *eq_loop1024_setup(const struct run_info *ri) { return eq_loop_setup_common(ri, 1024); }

static void eq_loop_consume(void *st, struct tally *t)
{
    struct eq *e = st;
    e->t = t;
    int rc = eventq_loop_run(e->lp);
    if (rc)
        die("eventq_loop_run: %s", eventq_strerror(rc));
    if (!t->done)
        die("eventq_loop_run returned before the run was complete");
}

/* --- rows ------------------------------------------------------------------ */

#define STR_(x) #x
#define STR(x) STR_(x)

const struct peer eq_epoll = {
    .label = "libeventq epoll + eventq_chan_recv",
    .setup = eq_epoll_setup,
    .producer_open = eq_producer_open,
    .send = eq_send,
    .producer_close = eq_producer_close,
    .consume = eq_epoll_consume,
    .teardown = eq_teardown,
};
const struct peer eq_batch = {
    .label = "libeventq epoll + eventq_chan_recv_batch(" STR(BATCH) ")",
    .setup = eq_batch_setup,
    .producer_open = eq_producer_open,
    .send = eq_send,
    .producer_close = eq_producer_close,
    .consume = eq_epoll_consume,
    .teardown = eq_teardown,
};
const struct peer eq_loop = {
    .label = "libeventq loop: add_chan, cb/msg, budget " STR(EVENTQ_DEFAULT_BUDGET),
    .setup = eq_loop_setup,
    .producer_open = eq_producer_open,
    .send = eq_send,
    .producer_close = eq_producer_close,
    .consume = eq_loop_consume,
    .teardown = eq_teardown,
};
const struct peer eq_loop1024 = {
    .label = "libeventq loop: add_chan, cb/msg, budget 1024",
    .setup = eq_loop1024_setup,
    .producer_open = eq_producer_open,
    .send = eq_send,
    .producer_close = eq_producer_close,
    .consume = eq_loop_consume,
    .teardown = eq_teardown,
};

static const char *eq_version(void) { return eventq_version_string(); }

static const struct peer *const eq_rows[] = {&eq_epoll, &eq_batch, &eq_loop, &eq_loop1024};
const struct family family_eventq = {
    .name = "libeventq",
    .version = eq_version,
    .rows = eq_rows,
    .nrows = 4,
};
