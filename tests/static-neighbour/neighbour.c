/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* A C program with two Rust static libraries: libeventq.a and the
 * neighbour's (tests/static-neighbour), each with its own std. */
#include <stdint.h>
#include <stdio.h>
#include <eventq.h>

int neighbour_digits(uint64_t n);

int main(void)
{
    struct eventq_chan *ch;
    char buf[8];
    size_t len;
    if (eventq_chan_new(NULL, &ch) != 0 || eventq_chan_send(ch, "ping", 4, 0) != 0 ||
        eventq_chan_recv(ch, buf, sizeof buf, &len, 0) != 0 || len != 4)
        return 1;
    eventq_chan_free(ch);
    int digits = neighbour_digits(123456);
    printf("libeventq %s and the neighbour (%d digits) in one program\n",
           eventq_version_string(), digits);
    return digits == 6 ? 0 : 1;
}
