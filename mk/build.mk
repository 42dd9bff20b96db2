# SPDX-License-Identifier: MIT OR Apache-2.0
# The build: the release libeventq.a (cargo), libeventq.so linked from it
# with eventq.map, rustc's native-static-libs list, the header.

LIB_SO   := $(BUILD)/lib/libeventq.so
LIB_A    := $(CARGO_TARGET_DIR)/release/libeventq.a
HEADER   := include/eventq.h
SONAME   := libeventq.so.$(VERSION_MAJOR)
REALNAME := libeventq.so.$(VERSION)
# rustc's --print native-static-libs (Libs.private of the static library),
# written by the release build itself.
NATIVE_LIBS := $(BUILD)/native-libs/native-static-libs.txt

.PHONY: header

# cargo decides whether anything is stale; make only re-stats the outputs.
# One cargo build gives both: see scripts/native-static-libs.sh.
$(LIB_A): FORCE | need-cargo
	@CARGO="$(CARGO)" CARGO_FEATURES="$(CARGO_FEATURES)" scripts/native-static-libs.sh $(NATIVE_LIBS)
$(NATIVE_LIBS): $(LIB_A) ;
# libeventq.a as installed and linked into libeventq.so: cargo's archive
# made one object whose only global symbols are eventq.map's exports, so it
# links beside other Rust static libraries (scripts/localize-archive.sh).
LIB_A_DIST := $(BUILD)/lib/libeventq.a
$(LIB_A_DIST): $(LIB_A) eventq.map scripts/localize-archive.sh | need-cc need-objcopy
	@CC="$(CC)" OBJCOPY="$(OBJCOPY)" scripts/localize-archive.sh $(LIB_A) eventq.map $@

# The shared library is linked here from the static one, with eventq.map;
# the crate builds no cdylib: rustc would hand the linker an export list of
# its own (an anonymous version script) that wins over eventq.map, leaving
# the symbols unversioned.
$(LIB_SO): $(LIB_A_DIST) $(NATIVE_LIBS) eventq.map | need-cc
	@mkdir -p $(@D)
	$(CC) -shared -o $@ -Wl,--whole-archive $(LIB_A_DIST) -Wl,--no-whole-archive \
	  $$(cat $(NATIVE_LIBS)) -Wl,-soname,$(SONAME) -Wl,--version-script=eventq.map \
	  -Wl,--gc-sections -Wl,-z,relro -Wl,-z,now

# Regenerates the committed C header from src/ffi (commit the result).
header: | need-cargo
	EVENTQ_UPDATE_HEADER=1 $(CARGO) build $(CARGO_FEATURES)
