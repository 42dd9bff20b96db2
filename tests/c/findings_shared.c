/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Minimal reproducers of library bugs in the process-shared channel that
 * are still open, found by fuzz/fuzz_shared.h (its FUZZ_SHARED_BUGS cases,
 * fuzz/findings/). Each check is named "BUG: ..." and fails until the
 * library is fixed (tests/c/check.h); this program is not a test_*.c, so
 * stage c-tests does not run it: `make shm-findings` does. Once a bug is
 * fixed, its check passes: rename it and move it into
 * tests/c/test_shared_findings.c with the others.
 *
 * 1. Positions at the top of their range. An end imported from a memory
 *    whose tail and head are 2^61 - 1 (the largest a position word holds
 *    below its 3 flag bits; the import checks only head <= tail <=
 *    head + capacity) takes a send whose publication adds one to the tail
 *    word: the word overflows. In a release build it wraps to position 0
 *    and the send returns 0, for a message no receiver can take (the next
 *    send fails with -EPROTO); with overflow checks (debug builds, `make
 *    fuzz`'s library) it panics (ring.rs, SharedWord::advance) and every
 *    send returns -ENOTRECOVERABLE, a code no call of the channel lists, on
 *    an end that does not read as closed. The contract: a word out of its
 *    range fails the call with -EPROTO and closes the channel on this side.
 *    A well-behaved process never gets there (2^61 messages); a hostile
 *    one does in one handover. A fix: refuse positions within a ring of
 *    the top at import (or fail the move with -EPROTO).
 */
#include <sys/mman.h>
#include <sys/stat.h>

#include "check.h" /* includes <eventq.h> */

#define TAIL_OFF 128
#define HEAD_OFF 256

/* The end a hostile process hands over: a copy of a new channel's memory
 * with both positions at the top, sealed as the library seals it. */
static void top_of_the_range(void)
{
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 4;
    eventq_chan *made, *taken = NULL;
    REQUIRE("new_shared", eventq_chan_new_shared(&o, EVENTQ_SIDE_RECV, &made) == 0);
    eventq_shared_fds f;
    REQUIRE("export_fds", eventq_chan_export_fds(made, &f, sizeof f) == 0);
    struct stat st;
    REQUIRE("fstat", fstat(f.mem, &st) == 0);
    int forged = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE("memfd", forged >= 0 && ftruncate(forged, st.st_size) == 0);
    char *buf = malloc((size_t)st.st_size);
    REQUIRE("copy", buf && pread(f.mem, buf, (size_t)st.st_size, 0) == st.st_size);
    uint64_t top = ((1ull << 61) - 1) << 3;
    memcpy(buf + TAIL_OFF, &top, 8);
    memcpy(buf + HEAD_OFF, &top, 8);
    REQUIRE("write", pwrite(forged, buf, (size_t)st.st_size, 0) == st.st_size);
    free(buf);
    REQUIRE("seals", fcntl(forged, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
    close(f.mem);
    f.mem = forged;
    int rc = eventq_chan_import_fds(&f, sizeof f, &taken);
    REQUIRE("import of the forged end (its layout and positions pass the checks)", rc == 0);
    rc = eventq_chan_send(taken, "x", 1, 0);
    eventq_chan_stats s;
    REQUIRE("stats", eventq_chan_get_stats(taken, &s, sizeof s) == 0);
    CHECK_MSG("BUG: a send that would move the tail past the top of its range fails with "
              "-EPROTO, and the end reads as closed",
              rc == -EPROTO && s.closed == 1,
              "returned %d (%s), stats.closed %llu, stats.sent %llu (the tail word %s)", rc,
              eventq_strerror(rc), (unsigned long long)s.closed, (unsigned long long)s.sent,
              s.sent == 0 ? "wrapped to 0" : "did not move");
    eventq_chan_free(taken);
    eventq_chan_free(made);
}

int main(void)
{
    check_init();
    top_of_the_range();
    return check_done();
}
