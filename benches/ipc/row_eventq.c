/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * libeventq through its C ABI (the installed library), capacity CAPACITY,
 * producers blocking in eventq_chan_send(.., EVENTQ_FOREVER), one message
 * per call.
 *
 * - shared: process-shared channels (eventq_chan_new_shared), one per
 *   producer process, since a shared channel has one sending process: the
 *   consumer makes them (EVENTQ_SIDE_RECV, max_msg_size = the message
 *   size), exports each send end (eventq_chan_export_fds) to the producer
 *   process it forks, which takes it with eventq_chan_import_fds. The
 *   consumer waits on every channel's receive fd (itself an epoll fd) in
 *   one epoll set of its own, level-triggered, and drains each readable
 *   channel with non-blocking receives until -EAGAIN: what a C program
 *   with an epoll loop of its own writes for 4 producer processes.
 * - in-process: the reference; one channel (eventq_chan_new), one handle
 *   (eventq_chan_clone) per producer thread, the same consumer.
 *
 * Each has two consumers: eventq_chan_recv_batch, BATCH messages per call,
 * and eventq_chan_recv, one message per call. The receive fds are
 * level-triggered, as a single consumer registers them by default (and
 * as bench-peers' rows do); one more shared row registers them with
 * EPOLLET, which the header allows for a consumer that drains to -EAGAIN.
 * The notes count the wake-ups that found a channel empty.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <eventq.h>

#include "ipc.h"

struct eq {
    int shared, batch, et, n; /* n channels: one per producer when shared */
    size_t size;
    eventq_chan *ch[MAX_PRODUCERS];
    eventq_shared_fds fds[MAX_PRODUCERS]; /* shared: each producer's end */
    /* Wake-ups (readable channels) whose first receive found nothing. */
    uint64_t empty;
};

static void eq_check(int rc, const char *what)
{
    if (rc < 0)
        die("%s: %s", what, eventq_strerror(rc));
}

static void close_fds(eventq_shared_fds *f)
{
    if (f->mem < 0)
        return;
    close(f->mem);
    close(f->recv_bell);
    close(f->send_bell);
    close(f->link);
    f->mem = -1;
}

static void *setup_common(const struct run_info *ri, int shared, int batch, int et)
{
    struct eq *e = xmalloc(sizeof *e);
    memset(e, 0, sizeof *e);
    e->shared = shared;
    e->batch = batch;
    e->et = et;
    e->size = ri->size;
    e->n = shared ? ri->producers : 1;
    eventq_chan_opts opts;
    eq_check(eventq_chan_opts_init(&opts, sizeof opts), "eventq_chan_opts_init");
    opts.capacity = CAPACITY;
    for (int i = 0; i < e->n; i++) {
        e->fds[i].mem = -1;
        if (!shared) {
            eq_check(eventq_chan_new(&opts, &e->ch[i]), "eventq_chan_new");
            continue;
        }
        opts.max_msg_size = ri->size;
        eq_check(eventq_chan_new_shared(&opts, EVENTQ_SIDE_RECV, &e->ch[i]),
                 "eventq_chan_new_shared");
        eq_check(eventq_chan_export_fds(e->ch[i], &e->fds[i], sizeof e->fds[i]),
                 "eventq_chan_export_fds");
    }
    return e;
}
static void *shared_batch_setup(const struct run_info *ri) { return setup_common(ri, 1, 1, 0); }
static void *shared_et_setup(const struct run_info *ri) { return setup_common(ri, 1, 1, 1); }
static void *shared_recv_setup(const struct run_info *ri) { return setup_common(ri, 1, 0, 0); }
static void *local_batch_setup(const struct run_info *ri) { return setup_common(ri, 0, 1, 0); }
static void *local_recv_setup(const struct run_info *ri) { return setup_common(ri, 0, 0, 0); }

static void *producer_open(void *st, int p)
{
    struct eq *e = st;
    eventq_chan *c;
    if (!e->shared) {
        if (!(c = eventq_chan_clone(e->ch[0])))
            die("eventq_chan_clone failed");
        return c;
    }
    /* A forked producer process: its own end, and none of the others'. The
     * consumer's handles it inherited are left alone (eventq.h, fork()). */
    for (int i = 0; i < e->n; i++)
        if (i != p)
            close_fds(&e->fds[i]);
    eq_check(eventq_chan_import_fds(&e->fds[p], sizeof e->fds[p], &c), "eventq_chan_import_fds");
    if (eventq_chan_side(c) != EVENTQ_SIDE_SEND)
        die("eventq_chan_import_fds: not the send side");
    return c;
}

static void eq_send(void *tx, const void *msg, size_t len)
{
    eq_check(eventq_chan_send(tx, msg, len, EVENTQ_FOREVER), "eventq_chan_send");
}

static void producer_close(void *tx)
{
    eventq_chan_free(tx);
}

/* Takes what channel c holds, until -EAGAIN; returns 1 once the run is
 * complete. */
static int drain(struct eq *e, eventq_chan *c, unsigned char *buf, size_t cap, struct sink *k)
{
    size_t lens[BATCH];
    for (int first = 1;; first = 0) {
        if (e->batch) {
            int n = eventq_chan_recv_batch(c, buf, cap, lens, BATCH, 0);
            if (n == -EAGAIN) {
                e->empty += first;
                return 0;
            }
            eq_check(n, "eventq_chan_recv_batch");
            size_t off = 0;
            for (int i = 0; i < n; i++) {
                if (sink_msg(k, buf + off, lens[i]))
                    return 1;
                off += lens[i];
            }
        } else {
            size_t len;
            int rc = eventq_chan_recv(c, buf, cap, &len, 0);
            if (rc == -EAGAIN) {
                e->empty += first;
                return 0;
            }
            eq_check(rc, "eventq_chan_recv");
            if (sink_msg(k, buf, len))
                return 1;
        }
    }
}

static void consume(void *st, struct sink *k)
{
    struct eq *e = st;
    for (int i = 0; i < e->n; i++)
        close_fds(&e->fds[i]); /* the producers have them */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1: %s", strerror(errno));
    for (int i = 0; i < e->n; i++) {
        int fd = eventq_chan_recv_fd(e->ch[i]);
        eq_check(fd, "eventq_chan_recv_fd");
        epoll_add(ep, fd, EPOLLIN | (e->et ? EPOLLET : 0), (uint64_t)i);
    }
    size_t cap = (e->batch ? BATCH : 1) * (e->size > 16 ? e->size : 16);
    unsigned char *buf = xmalloc(cap);
    struct epoll_event evs[MAX_PRODUCERS];
    k->t->wakes = 0;
    for (;;) {
        int n = epoll_waitn(ep, evs, MAX_PRODUCERS);
        k->t->wakes++;
        for (int i = 0; i < n; i++)
            if (drain(e, e->ch[evs[i].data.u64], buf, cap, k))
                goto done;
    }
done:
    free(buf);
    close(ep);
}

static void teardown(void *st, char *note, size_t cap)
{
    struct eq *e = st;
    uint64_t sent = 0, rings = 0;
    for (int i = 0; i < e->n; i++) {
        eventq_chan_stats s;
        if (eventq_chan_get_stats(e->ch[i], &s, sizeof s) == 0) {
            sent += s.sent;
            rings += s.recv_doorbell_rings;
        }
        eventq_chan_free(e->ch[i]);
    }
    /* A shared channel's stats count this process's doorbell writes only:
     * the producers' are in their processes. */
    snprintf(note, cap, "%d channel%s, cap %d%s; %.4f %sdoorbell rings/msg, %.4f empty wakes/msg",
             e->n, e->n == 1 ? "" : "s", CAPACITY, e->shared ? ", max_msg_size = msg" : "",
             sent ? (double)rings / (double)sent : 0.0, e->shared ? "consumer's " : "",
             sent ? (double)e->empty / (double)sent : 0.0);
    free(e);
}

#define EQ_ROW(name, lbl, thr, setup_fn)                                                       \
    const struct row name = {                                                                  \
        .label = lbl,                                                                          \
        .threads = thr,                                                                        \
        .setup = setup_fn,                                                                     \
        .producer_open = producer_open,                                                        \
        .send = eq_send,                                                                       \
        .producer_close = producer_close,                                                      \
        .consume = consume,                                                                    \
        .teardown = teardown,                                                                  \
    }

EQ_ROW(eq_shared_batch, "libeventq shared, epoll + recv_batch(" STR(BATCH) ")", 0,
       shared_batch_setup);
EQ_ROW(eq_shared_et, "libeventq shared, EPOLLET + recv_batch(" STR(BATCH) ")", 0,
       shared_et_setup);
EQ_ROW(eq_shared_recv, "libeventq shared, epoll + recv", 0, shared_recv_setup);
EQ_ROW(eq_local_batch, "in-process libeventq (threads), epoll + recv_batch(" STR(BATCH) ")", 1,
       local_batch_setup);
EQ_ROW(eq_local_recv, "in-process libeventq (threads), epoll + recv", 1, local_recv_setup);

static const char *eq_version(void) { return eventq_version_string(); }

static const struct row *const eq_rows[] = {&eq_shared_batch, &eq_shared_et, &eq_shared_recv,
                                            &eq_local_batch, &eq_local_recv};
const struct lib lib_eventq = {
    .name = "libeventq",
    .version = eq_version,
    .rows = eq_rows,
    .nrows = 5,
};
