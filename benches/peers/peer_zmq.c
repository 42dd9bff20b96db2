/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ZeroMQ: inproc PUSH/PULL. The consumer's PULL socket is bound; each
 * producer has its own PUSH socket (ZeroMQ sockets are not thread-safe)
 * connected to it, and sends with a blocking zmq_send (a copy into a new
 * message). Bounded by the high-water marks: SNDHWM + RCVHWM of 512 each,
 * which ZeroMQ adds up for an inproc pipe: CAPACITY messages per producer.
 *
 * The consumer waits on the PULL socket's ZMQ_FD in its own epoll set,
 * edge-triggered, and drains it as drain.h's zmq_drain says.
 */
#ifdef PEERS_HAVE_ZMQ

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <zmq.h>

#include "drain.h"
#include "peers.h"

#define HWM 512

struct zq {
    void *ctx;
    void *pull;
    char endpoint[64];
};

static void zcheck(int rc, const char *what)
{
    if (rc < 0)
        die("%s: %s", what, zmq_strerror(zmq_errno()));
}

static void set_int(void *sock, int opt, int v, const char *what)
{
    zcheck(zmq_setsockopt(sock, opt, &v, sizeof v), what);
}

static void *setup(const struct run_info *ri)
{
    (void)ri;
    static int runs;
    struct zq *z = xmalloc(sizeof *z);
    z->ctx = zmq_ctx_new();
    if (!z->ctx)
        die("zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    z->pull = zmq_socket(z->ctx, ZMQ_PULL);
    if (!z->pull)
        die("zmq_socket: %s", zmq_strerror(zmq_errno()));
    set_int(z->pull, ZMQ_RCVHWM, HWM, "ZMQ_RCVHWM");
    set_int(z->pull, ZMQ_LINGER, 0, "ZMQ_LINGER");
    snprintf(z->endpoint, sizeof z->endpoint, "inproc://bench-peers-%d", runs++);
    zcheck(zmq_bind(z->pull, z->endpoint), "zmq_bind");
    return z;
}

static void *producer_open(void *st, int p)
{
    (void)p;
    struct zq *z = st;
    void *push = zmq_socket(z->ctx, ZMQ_PUSH);
    if (!push)
        die("zmq_socket: %s", zmq_strerror(zmq_errno()));
    set_int(push, ZMQ_SNDHWM, HWM, "ZMQ_SNDHWM");
    zcheck(zmq_connect(push, z->endpoint), "zmq_connect");
    return push;
}

static void zsend(void *tx, const void *msg, size_t len)
{
    while (zmq_send(tx, msg, len, 0) < 0)
        if (zmq_errno() != EINTR)
            die("zmq_send: %s", zmq_strerror(zmq_errno()));
}

/* Closing a PUSH socket leaves what it sent in the inproc pipe, which the
 * PULL side still receives; ZMQ_LINGER only matters to zmq_ctx_term. */
static void producer_close(void *tx)
{
    zcheck(zmq_close(tx), "zmq_close");
}

static void consume(void *st, struct tally *t)
{
    struct zq *z = st;
    zmq_drain(z->pull, &t->wakes, tally_take, t);
}

static void teardown(void *st, char *note, size_t cap)
{
    struct zq *z = st;
    snprintf(note, cap, "HWM %d+%d per producer pipe", HWM, HWM);
    zcheck(zmq_close(z->pull), "zmq_close");
    zcheck(zmq_ctx_term(z->ctx), "zmq_ctx_term");
    free(z);
}

static const struct peer zmq_pushpull = {
    .label = "ZeroMQ inproc PUSH/PULL, ZMQ_FD in epoll",
    .setup = setup,
    .producer_open = producer_open,
    .send = zsend,
    .producer_close = producer_close,
    .consume = consume,
    .teardown = teardown,
};

static const struct peer *const rows[] = {&zmq_pushpull};
const struct family family_zmq = {
    .name = "ZeroMQ",
    .version = zmq_version_str,
    .rows = rows,
    .nrows = 1,
};

#else
typedef int peer_zmq_not_built; /* ZeroMQ missing when built: see peers.c */
#endif
