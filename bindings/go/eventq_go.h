/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* The one place where the Go binding states which libeventq it needs:
 * link.go and link_static.go include this in their cgo preambles, so a
 * build against an older eventq.h stops here with a message that names the
 * version found and the version needed, rather than at the first
 * undeclared function. Raise EQGO_NEEDS_* when the binding starts calling
 * functions of a newer version node (eventq.map). */
#ifndef EVENTQ_GO_H
#define EVENTQ_GO_H

#include <eventq.h>

/* 0.3.0: EVENTQ_0.3 (shared channels, consumer enter/leave). */
#define EQGO_NEEDS_VERSION 0x000300

#if !defined(EVENTQ_VERSION) || !defined(EVENTQ_VERSION_MAJOR) || !defined(EVENTQ_VERSION_MINOR)
#error "eventq Go binding: the eventq.h found defines no EVENTQ_VERSION; the binding needs libeventq >= 0.3.0 (set PKG_CONFIG_PATH to its lib/pkgconfig)"
#elif EVENTQ_VERSION < EQGO_NEEDS_VERSION
#if EVENTQ_VERSION_MAJOR == 0 && EVENTQ_VERSION_MINOR == 2
#error "eventq Go binding: found eventq.h 0.2, needs libeventq >= 0.3.0 (EVENTQ_0.3: shared channels, consumer enter/leave); install 0.3 or later and set PKG_CONFIG_PATH to its lib/pkgconfig"
#elif EVENTQ_VERSION_MAJOR == 0 && EVENTQ_VERSION_MINOR == 1
#error "eventq Go binding: found eventq.h 0.1, needs libeventq >= 0.3.0 (EVENTQ_0.3: shared channels, consumer enter/leave); install 0.3 or later and set PKG_CONFIG_PATH to its lib/pkgconfig"
#else
#error "eventq Go binding: found an eventq.h older than 0.3.0, needs libeventq >= 0.3.0 (EVENTQ_0.3: shared channels, consumer enter/leave); install 0.3 or later and set PKG_CONFIG_PATH to its lib/pkgconfig"
#endif
#endif

#endif
