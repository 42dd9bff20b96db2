// SPDX-License-Identifier: MIT OR Apache-2.0
//! With feature `capi` (the C library, `make`): generates the C header from
//! `src/ffi`. Without it (a Rust program using the crate) there is nothing
//! to do. The shared library is linked by the Makefile (soname, eventq.map).
//!
//! The header is written to `$OUT_DIR/eventq.h` on every build; the committed
//! `include/eventq.h` is only rewritten when `EVENTQ_UPDATE_HEADER=1`
//! (`make header`). A unit test compares the two, so a stale committed header
//! fails `make test` instead of silently shipping.

#[cfg(feature = "capi")]
use std::{env, path::PathBuf};

fn main() {
    #[cfg(feature = "capi")]
    capi();
}

#[cfg(feature = "capi")]
fn capi() {
    let crate_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let major = env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    let minor = env::var("CARGO_PKG_VERSION_MINOR").unwrap();
    let patch = env::var("CARGO_PKG_VERSION_PATCH").unwrap();

    // cbindgen reads the whole crate, not just src/ffi.
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    // So that `make header` also rewrites a committed header edited by
    // hand (or checked out from elsewhere) while src/ffi did not change.
    println!("cargo:rerun-if-changed=include/eventq.h");
    println!("cargo:rerun-if-env-changed=EVENTQ_UPDATE_HEADER");

    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is readable and valid");
    // Version macros come from Cargo.toml so the header cannot disagree with
    // the library it describes.
    config.after_includes = Some(format!(
        "\n#define EVENTQ_VERSION_MAJOR {major}\n#define EVENTQ_VERSION_MINOR {minor}\n#define EVENTQ_VERSION_PATCH {patch}\n\
         /* eventq_version() returns this: (major << 16) | (minor << 8) | patch. */\n\
         #define EVENTQ_VERSION ((EVENTQ_VERSION_MAJOR << 16) | (EVENTQ_VERSION_MINOR << 8) | EVENTQ_VERSION_PATCH)\n\n\
         /** `low_water` value meaning \"half the capacity\" (see eventq_chan_opts). */\n\
         #define EVENTQ_LOW_WATER_DEFAULT SIZE_MAX\n\n\
         /** Timeout meaning \"wait without limit\" (timeout_ns arguments). */\n\
         #define EVENTQ_FOREVER ((int64_t)-1)\n"
    ));

    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut text = Vec::new();
    bindings.write(&mut text);
    let text = squeeze_blank_lines(&String::from_utf8(text).expect("cbindgen writes UTF-8"));
    write_if_changed(&out_dir.join("eventq.h"), &text);
    if env::var_os("EVENTQ_UPDATE_HEADER").is_some_and(|v| v == "1") {
        write_if_changed(&crate_dir.join("include/eventq.h"), &text);
    }
}

#[cfg(feature = "capi")]
/// cbindgen leaves a blank line for each constant the config excludes; one
/// blank line between items is enough.
fn squeeze_blank_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            if blank {
                continue;
            }
            blank = true;
        } else {
            blank = false;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(feature = "capi")]
/// Writes only on a change, so the header's mtime moves only when it does.
fn write_if_changed(path: &std::path::Path, text: &str) {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
