/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Extensible structs: eventq_chan_opts and eventq_chan_stats carry their
 * size, so a program built against an older header (a smaller struct) or a
 * newer one (a larger struct) keeps working with this library.
 *
 * "Not read" and "not written" are checked with the hardware: the caller's
 * struct ends exactly where an inaccessible page begins, so any access past
 * its size kills the test with SIGSEGV.
 */
#include "check.h"

#include <stddef.h>
#include <sys/mman.h>

/* An older caller's options: the fields up to max_bytes only. */
struct old_opts {
    size_t size;
    size_t capacity;
    size_t max_bytes;
};

/* An older caller's counters: sent and received only. */
struct old_stats {
    uint64_t sent;
    uint64_t received;
};

/* A newer caller's options: one field this library does not know. */
struct new_opts {
    struct eventq_chan_opts known;
    uint64_t future;
};

struct new_stats {
    struct eventq_chan_stats known;
    uint64_t future;
};

static size_t page;

/* `size` bytes ending exactly at an inaccessible page. */
static void *before_guard(size_t size)
{
    uint8_t *p = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE("mmap", p != MAP_FAILED);
    REQUIRE("guard page", mprotect(p + page, page, PROT_NONE) == 0);
    return p + page - size;
}

static void old_caller(void)
{
    struct old_opts *o = before_guard(sizeof *o);
    CHECK_INT("old opts: init writes only its size",
              eventq_chan_opts_init((struct eventq_chan_opts *)o, sizeof *o), 0);
    CHECK_U64("old opts: size recorded", o->size, sizeof *o);
    CHECK_U64("old opts: capacity default", o->capacity, EVENTQ_DEFAULT_CAPACITY);
    CHECK_U64("old opts: no byte limit", o->max_bytes, 0);
    o->capacity = 4;
    o->max_bytes = 64;

    struct eventq_chan *ch = NULL;
    CHECK_INT("old opts: new reads only its size",
              eventq_chan_new((const struct eventq_chan_opts *)o, &ch), 0);
    REQUIRE("old opts: channel", ch != NULL);
    /* The fields it set hold; the ones it lacks take their defaults. */
    for (int i = 0; i < 4; i++)
        CHECK_INT("old opts: capacity 4 holds 4", eventq_chan_send(ch, "abcd", 4, 0), 0);
    CHECK_INT("old opts: the fifth is refused", eventq_chan_send(ch, "e", 1, 0), -EAGAIN);
    char buf[128] = { 0 };
    size_t len = 0;
    CHECK_INT("old opts: receive", eventq_chan_recv(ch, buf, sizeof buf, &len, 0), 0);
    CHECK_INT("old opts: max_msg_size defaults to max_bytes",
              eventq_chan_send(ch, NULL, 0, 0) == 0 &&
                  eventq_chan_send(ch, buf, 65, 0) == -EMSGSIZE,
              1);

    struct old_stats *s = before_guard(sizeof *s);
    CHECK_INT("old stats: get_stats writes only its size",
              eventq_chan_get_stats(ch, (struct eventq_chan_stats *)s, sizeof *s), 0);
    CHECK_U64("old stats: sent", s->sent, 5);
    CHECK_U64("old stats: received", s->received, 1);

    struct eventq_chan *h2 = eventq_chan_clone(ch);
    eventq_chan_free(ch);
    s->sent = s->received = 0;
    CHECK_INT("old stats: free_final writes only its size",
              eventq_chan_free_final(h2, (struct eventq_chan_stats *)s, sizeof *s), 1);
    CHECK_U64("old stats: final sent", s->sent, 5);
}

static void new_caller(void)
{
    struct new_opts o;
    memset(&o, 0xA5, sizeof o);
    CHECK_INT("new opts: init", eventq_chan_opts_init(&o.known, sizeof o), 0);
    CHECK_U64("new opts: size recorded", o.known.size, sizeof o);
    CHECK_U64("new opts: unknown field zeroed", o.future, 0);
    o.known.capacity = 2;
    struct eventq_chan *ch = NULL;
    CHECK_INT("new opts: zero unknown fields are accepted", eventq_chan_new(&o.known, &ch), 0);
    REQUIRE("new opts: channel", ch != NULL);

    struct new_stats s;
    memset(&s, 0xFF, sizeof s);
    CHECK_INT("new stats: get_stats", eventq_chan_get_stats(ch, &s.known, sizeof s), 0);
    CHECK_U64("new stats: known fields written", s.known.sent, 0);
    CHECK_U64("new stats: unknown field zeroed", s.future, 0);
    eventq_chan_free(ch);

    struct eventq_chan *bad = (struct eventq_chan *)&o;
    o.future = 1;
    CHECK_INT("new opts: an unknown field set is -E2BIG", eventq_chan_new(&o.known, &bad), -E2BIG);
    CHECK("new opts: out untouched on -E2BIG", bad == (struct eventq_chan *)&o);
}

static void bad_sizes(void)
{
    struct eventq_chan_opts o;
    memset(&o, 0xA5, sizeof o);
    CHECK_INT("opts size below the minimum: -EINVAL",
              eventq_chan_opts_init(&o, EVENTQ_CHAN_OPTS_SIZE_MIN - 1), -EINVAL);
    CHECK_U64("opts untouched on -EINVAL", o.size, (size_t)0xA5A5A5A5A5A5A5A5ull);
    CHECK_INT("opts init at the minimum", eventq_chan_opts_init(&o, EVENTQ_CHAN_OPTS_SIZE_MIN), 0);
    o.size = EVENTQ_CHAN_OPTS_SIZE_MIN - 1;
    struct eventq_chan *ch = NULL;
    CHECK_INT("new with an opts size below the minimum: -EINVAL", eventq_chan_new(&o, &ch), -EINVAL);
    CHECK("nothing created", ch == NULL);

    REQUIRE("channel", eventq_chan_new(NULL, &ch) == 0);
    struct eventq_chan_stats s;
    CHECK_INT("stats size below the minimum: -EINVAL",
              eventq_chan_get_stats(ch, &s, EVENTQ_CHAN_STATS_SIZE_MIN - 1), -EINVAL);
    CHECK_INT("free_final with a size below the minimum: -EINVAL, nothing freed",
              eventq_chan_free_final(ch, &s, EVENTQ_CHAN_STATS_SIZE_MIN - 1), -EINVAL);
    CHECK_INT("the handle still works", eventq_chan_send(ch, "x", 1, 0), 0);
    CHECK_INT("free_final at the minimum size", eventq_chan_free_final(ch, &s, EVENTQ_CHAN_STATS_SIZE_MIN), 1);
    CHECK_U64("the minimum holds sent", s.sent, 1);
}

int main(void)
{
    check_init();
    page = (size_t)sysconf(_SC_PAGESIZE);
    old_caller();
    new_caller();
    bad_sizes();
    return check_done();
}
