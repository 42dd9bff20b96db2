// SPDX-License-Identifier: MIT OR Apache-2.0
//! libeventq, the C library (`libeventq.a`; `libeventq.so` is linked from
//! it). The C ABI itself is eventq's `src/ffi` (feature `capi`), whose
//! `#[no_mangle]` functions need the crate's internals; this crate only
//! links eventq into a staticlib, which then holds and exports them.

#![forbid(unsafe_code)]

// Named so that rustc links the crate (a dependency nothing refers to is
// not linked): its exported functions come with it.
extern crate eventq;
