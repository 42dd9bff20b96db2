// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * line_transfer: the machine's phase, as make bench's driver records it
 * before every bench process: the nanoseconds to hand one cache line
 * between two threads (line_transfer.h), the lower quartile of 16 bursts.
 *
 *   line_transfer [HANDOVERS]   (default 400000; at least 1000)
 *
 * Exit 0 and one number on stdout; 2 on a bad argument or a thread error.
 */
#include <stdio.h>
#include <stdlib.h>

#include "line_transfer.h"

int main(int argc, char **argv)
{
    long handovers = 400000;
    if (argc > 2 || (argc == 2 && (handovers = atol(argv[1])) < 1000)) {
        fprintf(stderr, "usage: line_transfer [HANDOVERS >= 1000]\n");
        return 2;
    }
    double ns = line_transfer_ns(handovers / 16, 0);
    if (ns < 0) {
        fprintf(stderr, "line_transfer: pthread_create failed\n");
        return 2;
    }
    printf("%.1f\n", ns);
    return 0;
}
