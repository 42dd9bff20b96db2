/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Extensible structs: eventq_chan_opts, eventq_chan_stats and
 * eventq_shared_fds carry their size, so a program built against an older
 * header (a smaller struct) or a newer one (a larger struct) keeps working
 * with this library; a size no struct has (above EVENTQ_STRUCT_SIZE_MAX,
 * or ending inside a field) is refused before anything is touched.
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

/* Sizes no real struct has (an unset size field, a wrong argument): each
 * is -E2BIG without a byte read or written. The struct ends at the guard
 * page, so an access past its real size would kill the test. */
static const size_t absurd[] = { EVENTQ_STRUCT_SIZE_MAX + 1, (size_t)1 << 20,
                                 (size_t)1 << 40, SIZE_MAX };
#define N_ABSURD (sizeof absurd / sizeof absurd[0])

/* The last error's text holds `part`. */
static int text_has(const char *part)
{
    const char *t = eventq_last_error();
    return t != NULL && strstr(t, part) != NULL;
}

static void absurd_sizes(void)
{
    char name[160];
    struct eventq_chan *ch = NULL, *sh = NULL;
    REQUIRE("channel", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("shared channel", eventq_chan_new_shared(NULL, EVENTQ_SIDE_SEND, &sh) == 0);
    struct eventq_chan_opts *o = before_guard(sizeof *o);
    struct eventq_chan_stats *s = before_guard(sizeof *s);
    struct eventq_shared_fds *f = before_guard(sizeof *f);
    for (size_t i = 0; i < N_ABSURD; i++) {
        size_t size = absurd[i];
        memset(o, 0xA5, sizeof *o);
        snprintf(name, sizeof name, "opts_init size %zu: -E2BIG, nothing written", size);
        CHECK_INT(name, eventq_chan_opts_init(o, size), -E2BIG);
        CHECK_U64("  opts untouched", o->capacity, (size_t)0xA5A5A5A5A5A5A5A5ull);
        CHECK_MSG("  the text names the size", text_has("size") && text_has("4096"), "text: %s",
                  eventq_last_error() ? eventq_last_error() : "(null)");

        REQUIRE("opts", eventq_chan_opts_init(o, sizeof *o) == 0);
        o->size = size;
        struct eventq_chan *made = NULL;
        snprintf(name, sizeof name, "chan_new with opts->size %zu: -E2BIG", size);
        CHECK_INT(name, eventq_chan_new(o, &made), -E2BIG);
        CHECK_MSG("  the text names opts->size", text_has("eventq_chan_new: opts->size"),
                  "text: %s", eventq_last_error() ? eventq_last_error() : "(null)");
        snprintf(name, sizeof name, "chan_new_shared with opts->size %zu: -E2BIG", size);
        CHECK_INT(name, eventq_chan_new_shared(o, EVENTQ_SIDE_SEND, &made), -E2BIG);
        CHECK("  nothing made", made == NULL);

        snprintf(name, sizeof name, "get_stats size %zu: -E2BIG", size);
        CHECK_INT(name, eventq_chan_get_stats(ch, s, size), -E2BIG);
        snprintf(name, sizeof name, "free_final size %zu: -E2BIG, nothing freed", size);
        CHECK_INT(name, eventq_chan_free_final(ch, s, size), -E2BIG);
        CHECK_INT("  the handle still works", eventq_chan_send(ch, "x", 1, 0), 0);
        char buf[8];
        size_t len;
        REQUIRE("receive", eventq_chan_recv(ch, buf, sizeof buf, &len, 0) == 0);

        snprintf(name, sizeof name, "export_fds size %zu: -E2BIG", size);
        CHECK_INT(name, eventq_chan_export_fds(sh, f, size), -E2BIG);
        f->side = EVENTQ_SIDE_RECV;
        f->mem = f->recv_bell = f->send_bell = f->link = -1;
        snprintf(name, sizeof name, "import_fds size %zu: -E2BIG", size);
        CHECK_INT(name, eventq_chan_import_fds(f, size, &made), -E2BIG);
        CHECK("  nothing made", made == NULL);
    }

    /* A whole page, the largest size accepted: zeros past the known fields. */
    uint8_t *big = before_guard(EVENTQ_STRUCT_SIZE_MAX);
    memset(big, 0xA5, EVENTQ_STRUCT_SIZE_MAX);
    CHECK_INT("opts_init with EVENTQ_STRUCT_SIZE_MAX",
              eventq_chan_opts_init((struct eventq_chan_opts *)big, EVENTQ_STRUCT_SIZE_MAX), 0);
    CHECK("  zeros up to the last byte", big[EVENTQ_STRUCT_SIZE_MAX - 1] == 0);
    struct eventq_chan *made = NULL;
    CHECK_INT("chan_new reads all of EVENTQ_STRUCT_SIZE_MAX",
              eventq_chan_new((struct eventq_chan_opts *)big, &made), 0);
    eventq_chan_free(made);
    CHECK_INT("get_stats with EVENTQ_STRUCT_SIZE_MAX",
              eventq_chan_get_stats(ch, (struct eventq_chan_stats *)big, EVENTQ_STRUCT_SIZE_MAX), 0);

    /* Sizes that end inside a field: -EINVAL, nothing written. */
    const size_t opts_mid[] = { EVENTQ_CHAN_OPTS_SIZE_MIN + 1, 20, sizeof *o - 1, sizeof *o + 1 };
    for (size_t i = 0; i < sizeof opts_mid / sizeof opts_mid[0]; i++) {
        uint8_t *p = before_guard(opts_mid[i]);
        memset(p, 0xA5, opts_mid[i]);
        snprintf(name, sizeof name, "opts_init size %zu (inside a field): -EINVAL", opts_mid[i]);
        CHECK_INT(name, eventq_chan_opts_init((struct eventq_chan_opts *)p, opts_mid[i]), -EINVAL);
        CHECK("  nothing written", p[0] == 0xA5);
        CHECK_MSG("  the text says a field", text_has("inside a field"), "text: %s",
                  eventq_last_error() ? eventq_last_error() : "(null)");
        REQUIRE("opts", eventq_chan_opts_init(o, sizeof *o) == 0);
        o->size = opts_mid[i] <= sizeof *o ? opts_mid[i] : sizeof *o;
        if (opts_mid[i] <= sizeof *o) {
            snprintf(name, sizeof name, "chan_new opts->size %zu (inside a field): -EINVAL", opts_mid[i]);
            CHECK_INT(name, eventq_chan_new(o, &made), -EINVAL);
        }
    }
    const size_t stats_mid[] = { EVENTQ_CHAN_STATS_SIZE_MIN + 1, 12, sizeof *s - 4, sizeof *s + 4 };
    for (size_t i = 0; i < sizeof stats_mid / sizeof stats_mid[0]; i++) {
        uint8_t *p = before_guard(stats_mid[i]);
        memset(p, 0xA5, stats_mid[i]);
        snprintf(name, sizeof name, "get_stats size %zu (inside a field): -EINVAL", stats_mid[i]);
        CHECK_INT(name, eventq_chan_get_stats(ch, (struct eventq_chan_stats *)p, stats_mid[i]), -EINVAL);
        CHECK("  nothing written", p[0] == 0xA5);
        snprintf(name, sizeof name, "free_final size %zu (inside a field): -EINVAL", stats_mid[i]);
        CHECK_INT(name, eventq_chan_free_final(ch, (struct eventq_chan_stats *)p, stats_mid[i]), -EINVAL);
    }
    const size_t fds_mid[] = { sizeof *f + 1, sizeof *f + 2 };
    for (size_t i = 0; i < sizeof fds_mid / sizeof fds_mid[0]; i++) {
        uint8_t *p = before_guard(fds_mid[i]);
        memset(p, 0xFF, fds_mid[i]);
        snprintf(name, sizeof name, "export_fds size %zu (not a whole field): -EINVAL", fds_mid[i]);
        CHECK_INT(name, eventq_chan_export_fds(sh, (struct eventq_shared_fds *)p, fds_mid[i]), -EINVAL);
        snprintf(name, sizeof name, "import_fds size %zu (not a whole field): -EINVAL", fds_mid[i]);
        CHECK_INT(name, eventq_chan_import_fds((struct eventq_shared_fds *)p, fds_mid[i], &made), -EINVAL);
    }
    CHECK_INT("the channel survives", eventq_chan_free_final(ch, s, sizeof *s), 1);
    eventq_chan_free(sh);
}

int main(void)
{
    check_init();
    page = (size_t)sysconf(_SC_PAGESIZE);
    old_caller();
    new_caller();
    bad_sizes();
    absurd_sizes();
    return check_done();
}
