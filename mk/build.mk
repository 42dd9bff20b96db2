# SPDX-License-Identifier: MIT OR Apache-2.0
# The build: the release libeventq.a (cargo, the crate eventq-capi in
# capi/), libeventq.so linked from it with eventq.map, rustc's
# native-static-libs list, the header.

LIB_SO   := $(BUILD)/lib/libeventq.so
LIB_A    := $(BUILD)/lib/libeventq.a
# What cargo builds: the C library's crate (capi/) is named eventq_capi, as
# the Rust crate eventq is a dependency of it.
CAPI_A   := $(CARGO_TARGET_DIR)/release/libeventq_capi.a
HEADER   := include/eventq.h
SONAME   := libeventq.so.$(VERSION_MAJOR)
REALNAME := libeventq.so.$(VERSION)
# rustc's --print native-static-libs (Libs.private of the static library),
# written by the release build itself.
NATIVE_LIBS := $(BUILD)/native-libs/native-static-libs.txt

.PHONY: header

# cargo decides whether anything is stale; make only re-stats the outputs.
# One cargo build gives both: see scripts/native-static-libs.sh.
$(CAPI_A): FORCE | need-cargo
	@CARGO="$(CARGO)" scripts/native-static-libs.sh $(NATIVE_LIBS)
$(NATIVE_LIBS): $(CAPI_A) ;
# libeventq.a as installed and linked into libeventq.so: cargo's archive
# made one object whose only global symbols are eventq.map's exports, so it
# links beside other Rust static libraries (scripts/localize-archive.sh).
$(LIB_A): $(CAPI_A) eventq.map scripts/localize-archive.sh | need-cc need-objcopy
	@mkdir -p $(@D)
	@CC="$(CC)" OBJCOPY="$(OBJCOPY)" scripts/localize-archive.sh $(CAPI_A) eventq.map $@

# The shared library is linked here from the static one, with eventq.map;
# the crate builds no cdylib: rustc would hand the linker an export list of
# its own (an anonymous version script) that wins over eventq.map, leaving
# the symbols unversioned.
$(LIB_SO): $(LIB_A) $(NATIVE_LIBS) eventq.map | need-cc
	@mkdir -p $(@D)
	$(CC) -shared -o $@ -Wl,--whole-archive $(LIB_A) -Wl,--no-whole-archive \
	  $$(cat $(NATIVE_LIBS)) -Wl,-soname,$(SONAME) -Wl,--version-script=eventq.map \
	  -Wl,--gc-sections -Wl,-z,relro -Wl,-z,now

# Regenerates the committed C header from src/ffi (commit the result).
header: | need-cargo
	EVENTQ_UPDATE_HEADER=1 $(CARGO) build $(CARGO_FEATURES)
