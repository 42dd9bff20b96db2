/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ZeroMQ: PUSH/PULL over ipc:// (a Unix stream socket, abstract address).
 * The consumer process binds its PULL socket; each producer process has
 * its own context and PUSH socket connected to it, and sends with a
 * blocking zmq_send (a copy into a new message). Bounded by SNDHWM and
 * RCVHWM of 512 each. Every context and socket is made after the fork, as
 * ZeroMQ requires (its contexts run I/O threads).
 *
 * The consumer waits on the PULL socket's ZMQ_FD in its own epoll set and
 * drains it as bench-peers' inproc row does (../peers/drain.h).
 */
#ifdef PEERS_HAVE_ZMQ

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <zmq.h>

#include "../peers/drain.h"
#include "ipc.h"

#define HWM 512

struct zq {
    char endpoint[96];
    void *ctx, *sock; /* the consumer's PULL, or a producer's PUSH */
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

/* A context and a socket of this process. */
static void open_sock(struct zq *z, int type, int hwm_opt)
{
    if (!(z->ctx = zmq_ctx_new()))
        die("zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    if (!(z->sock = zmq_socket(z->ctx, type)))
        die("zmq_socket: %s", zmq_strerror(zmq_errno()));
    set_int(z->sock, hwm_opt, HWM, "HWM");
}

static void close_sock(struct zq *z)
{
    zcheck(zmq_close(z->sock), "zmq_close");
    zcheck(zmq_ctx_term(z->ctx), "zmq_ctx_term");
}

static void *setup(const struct run_info *ri)
{
    (void)ri;
    struct zq *z = xmalloc(sizeof *z);
    memset(z, 0, sizeof *z);
    char name[64];
    endpoint_name(name, sizeof name, "");
    snprintf(z->endpoint, sizeof z->endpoint, "ipc://@%s", name);
    return z;
}

static void *producer_open(void *st, int p)
{
    (void)p;
    struct zq *z = st;
    open_sock(z, ZMQ_PUSH, ZMQ_SNDHWM);
    /* The PULL side binds after the fork: retry soon, not after 100 ms. */
    set_int(z->sock, ZMQ_RECONNECT_IVL, 5, "ZMQ_RECONNECT_IVL");
    zcheck(zmq_connect(z->sock, z->endpoint), "zmq_connect");
    return z;
}

static void zsend(void *tx, const void *msg, size_t len)
{
    void *sock = ((struct zq *)tx)->sock;
    while (zmq_send(sock, msg, len, 0) < 0)
        if (zmq_errno() != EINTR)
            die("zmq_send: %s", zmq_strerror(zmq_errno()));
}

static void producer_close(void *tx)
{
    close_sock(tx);
}

static void consume(void *st, struct sink *k)
{
    struct zq *z = st;
    open_sock(z, ZMQ_PULL, ZMQ_RCVHWM);
    set_int(z->sock, ZMQ_LINGER, 0, "ZMQ_LINGER");
    zcheck(zmq_bind(z->sock, z->endpoint), "zmq_bind");
    zmq_drain(z->sock, &k->t->wakes, sink_take, k);
}

static void teardown(void *st, char *note, size_t cap)
{
    struct zq *z = st;
    snprintf(note, cap, "SNDHWM %d + RCVHWM %d", HWM, HWM);
    close_sock(z);
    free(z);
}

const struct row zmq_ipc = {
    .label = "ZeroMQ ipc:// PUSH/PULL, ZMQ_FD in epoll",
    .setup = setup,
    .producer_open = producer_open,
    .send = zsend,
    .producer_close = producer_close,
    .consume = consume,
    .teardown = teardown,
};

static const struct row *const rows[] = {&zmq_ipc};
const struct lib lib_zmq = {
    .name = "ZeroMQ",
    .version = zmq_version_str,
    .rows = rows,
    .nrows = 1,
};

#else
typedef int row_zmq_not_built; /* ZeroMQ missing when built: see ipc.c */
#endif
