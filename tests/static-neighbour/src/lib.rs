// SPDX-License-Identifier: MIT OR Apache-2.0
//! A static library using std the way most do (a String, a panic caught),
//! so that its archive defines std's symbols and rust_eh_personality, as
//! libeventq.a's own std would if it kept them global.

use std::ffi::c_int;
use std::panic;

/// The length of the decimal text of `n`, computed through a String and a
/// caught panic; -1 if the panic was not caught.
#[no_mangle]
pub extern "C" fn neighbour_digits(n: u64) -> c_int {
    let text = format!("{n}");
    // The panic below is expected: no message for it.
    panic::set_hook(Box::new(|_| {}));
    let caught = panic::catch_unwind(|| {
        if text.is_empty() {
            return 0;
        }
        panic!("unwinds inside the neighbour");
    });
    match caught {
        Err(_) => c_int::try_from(text.len()).unwrap_or(-1),
        Ok(_) => -1,
    }
}
