/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * nng: push/pull (pipeline0) over ipc:// (a Unix stream socket at a path
 * in $TMPDIR or /tmp). The consumer process listens with its pull socket;
 * each producer process opens a push socket and dials it, and sends with a
 * blocking nng_send (a copy into a new nng_msg). Bounded by the push
 * socket's NNG_OPT_SENDBUF and the pull socket's NNG_OPT_RECVBUF, CAPACITY
 * messages each. Every socket is made after the fork (nng runs threads).
 *
 * The consumer waits on NNG_OPT_RECVFD in its own epoll set and drains it
 * as bench-peers' inproc row does (../peers/drain.h). nng has no linger,
 * so producers close only once the consumer has everything (as every
 * row's do).
 */
#ifdef PEERS_HAVE_NNG

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>

#include "../peers/drain.h"
#include "ipc.h"

struct nq {
    char path[128], url[160];
    nng_socket sock; /* the consumer's pull, or a producer's push */
    int buf_err;
};

static void ncheck(int rc, const char *what)
{
    if (rc)
        die("%s: %s", what, nng_strerror(rc));
}

static void *setup(const struct run_info *ri)
{
    (void)ri;
    struct nq *n = xmalloc(sizeof *n);
    memset(n, 0, sizeof *n);
    const char *tmp = getenv("TMPDIR");
    char name[64];
    endpoint_name(name, sizeof name, "");
    snprintf(n->path, sizeof n->path, "%s/%s.sock", tmp && *tmp ? tmp : "/tmp", name);
    snprintf(n->url, sizeof n->url, "ipc://%s", n->path);
    return n;
}

static void *producer_open(void *st, int p)
{
    (void)p;
    struct nq *n = st;
    ncheck(nng_push0_open(&n->sock), "nng_push0_open");
    n->buf_err = nng_socket_set_int(n->sock, NNG_OPT_SENDBUF, CAPACITY);
    /* The pull side listens after the fork: redial soon. */
    ncheck(nng_socket_set_ms(n->sock, NNG_OPT_RECONNMINT, 5), "NNG_OPT_RECONNMINT");
    ncheck(nng_dial(n->sock, n->url, NULL, NNG_FLAG_NONBLOCK), "nng_dial");
    return n;
}

static void nsend(void *tx, const void *msg, size_t len)
{
    ncheck(nng_send(((struct nq *)tx)->sock, (void *)msg, len, 0), "nng_send");
}

static void producer_close(void *tx)
{
    nng_close(((struct nq *)tx)->sock);
}

static void consume(void *st, struct sink *k)
{
    struct nq *n = st;
    ncheck(nng_pull0_open(&n->sock), "nng_pull0_open");
    n->buf_err = nng_socket_set_int(n->sock, NNG_OPT_RECVBUF, CAPACITY);
    ncheck(nng_listen(n->sock, n->url, NULL, 0), "nng_listen");
    nng_drain(n->sock, &k->t->wakes, sink_take, k);
}

static void teardown(void *st, char *note, size_t cap)
{
    struct nq *n = st;
    snprintf(note, cap, "sendbuf %d per producer, recvbuf %d%s", CAPACITY, CAPACITY,
             n->buf_err ? " REFUSED" : "");
    nng_close(n->sock);
    unlink(n->path);
    free(n);
}

static const struct row nng_ipc = {
    .label = "nng ipc:// push/pull, NNG_OPT_RECVFD in epoll",
    .setup = setup,
    .producer_open = producer_open,
    .send = nsend,
    .producer_close = producer_close,
    .consume = consume,
    .teardown = teardown,
};

static const struct row *const rows[] = {&nng_ipc};
const struct lib lib_nng = {
    .name = "nng",
    .version = nng_version,
    .rows = rows,
    .nrows = 1,
};

#else
typedef int row_nng_not_built; /* nng missing when built: see ipc.c */
#endif
