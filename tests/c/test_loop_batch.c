/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The batch channel source through the C ABI (eventq_loop_add_chan_batch):
 * one callback per batch, messages in order and intact, at most the budget
 * per batch, run_once counting a batch as one callback; a failing batch
 * leaves the later messages queued; end of stream (data NULL, count 0)
 * exactly once, then the source is disabled; destroy runs once.
 *
 * No sleeps and no timing assertions.
 */
#include "check.h" /* includes <eventq.h> */

struct seen {
    struct eventq_loop *lp;
    uint32_t next;     /* the sequence number expected next */
    int bad;           /* messages out of order or damaged */
    size_t batches;
    size_t max_batch;
    int eos;           /* end-of-stream calls */
    int fail_first;    /* return -EIO from the first batch */
    int destroyed;
};

static size_t len_of(uint32_t seq) { return seq % 53; } /* 0..52: inline and heap */

static void make(uint8_t *buf, uint32_t seq)
{
    for (size_t i = 0; i < len_of(seq); i++)
        buf[i] = (uint8_t)(seq * 31u + i);
}

static int on_batch(struct eventq_source *src, const void *data, const size_t *lens,
                    size_t count, void *ud)
{
    (void)src;
    struct seen *s = ud;
    if (data == NULL) {
        s->eos++;
        if (count != 0 || lens != NULL)
            s->bad++;
        eventq_loop_stop(s->lp);
        return 0;
    }
    s->batches++;
    if (count > s->max_batch)
        s->max_batch = count;
    const uint8_t *p = data;
    for (size_t i = 0; i < count; i++) {
        uint8_t want[64];
        uint32_t seq = s->next++;
        make(want, seq);
        if (lens[i] != len_of(seq) || memcmp(p, want, lens[i]) != 0)
            s->bad++;
        p += lens[i];
    }
    if (s->fail_first) {
        s->fail_first = 0;
        return -EIO;
    }
    return 0;
}

static void on_destroy(void *ud) { ((struct seen *)ud)->destroyed++; }

static void send_n(struct eventq_chan *ch, uint32_t from, uint32_t n)
{
    uint8_t buf[64];
    for (uint32_t seq = from; seq < from + n; seq++) {
        make(buf, seq);
        if (eventq_chan_send(ch, buf, len_of(seq), 0) != 0)
            abort();
    }
}

int main(void)
{
    check_init();
    struct eventq_chan *ch;
    struct eventq_loop *lp;
    struct eventq_source *src;
    CHECK_INT("chan_new", eventq_chan_new(NULL, &ch), 0);
    CHECK_INT("loop_new", eventq_loop_new(&lp), 0);
    struct seen s = { .lp = lp };

    CHECK_INT("NULL cb", eventq_loop_add_chan_batch(lp, ch, 0, NULL, NULL, NULL, NULL), -EINVAL);
    CHECK_INT("add_chan_batch, budget 10",
              eventq_loop_add_chan_batch(lp, ch, 10, on_batch, &s, on_destroy, &src), 0);
    CHECK_INT("second source for the channel",
              eventq_loop_add_chan_batch(lp, ch, 0, on_batch, NULL, NULL, NULL), -EEXIST);

    /* 25 queued, budget 10: three run_once calls of one callback each. */
    send_n(ch, 0, 25);
    CHECK_INT("run_once 1", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("run_once 2", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("run_once 3", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("three batches", (int)s.batches, 3);
    CHECK_INT("at most the budget", (int)s.max_batch, 10);
    CHECK_INT("25 delivered", (int)s.next, 25);

    /* A failing batch disables the source; the later messages stay queued. */
    CHECK_INT("set_budget", eventq_source_set_budget(src, 10), 0);
    s.fail_first = 1;
    send_n(ch, 25, 15);
    CHECK_INT("failing batch", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("source error", eventq_source_error(src), -EIO);
    struct eventq_chan_stats st;
    CHECK_INT("stats", eventq_chan_get_stats(ch, &st, sizeof st), 0);
    CHECK_U64("the rest stays queued", st.pending, 5);
    CHECK_INT("disabled: nothing runs", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("re-enable", eventq_source_set_enabled(src, 1), 0);

    /* The rest, then end of stream once (the callback stops the loop). */
    send_n(ch, 40, 60);
    CHECK_INT("close", eventq_chan_close(ch), 0);
    CHECK_INT("run", eventq_loop_run(lp), 0);
    CHECK_INT("all 100 delivered", (int)s.next, 100);
    CHECK_INT("in order, intact", s.bad, 0);
    CHECK_INT("end of stream once", s.eos, 1);
    CHECK_INT("disabled after end of stream", eventq_loop_run_once(lp, 0), 0);

    eventq_source_free(src);
    CHECK_INT("destroy ran once", s.destroyed, 1);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
    return check_done();
}
