# SPDX-License-Identifier: MIT OR Apache-2.0
# Installing and packaging: install, install-strip, uninstall, the man pages,
# pkg-config files, CMake package and split debug info they put in place,
# the test install in build/prefix, and the stages that check all of it.
#
#   make man            build/man: a page per function of eventq.h and
#                       eventq(7), generated from the header's doc comments
#                       and docs/design.md by scripts/gen-man.py (part of
#                       the default build)
#   make install        the shared library (stripped of its debug info and
#                       symbol table, both in DEBUGDIR, linked by
#                       .gnu_debuglink), its symlinks, the static library
#                       (eventq_* its only global symbols), header,
#                       eventq.pc, eventq-static.pc (both relocatable), the
#                       CMake package and man pages: what `make` built.
#                       It builds nothing (no cargo, no python3: `make &&
#                       sudo make install` works with root's PATH) and
#                       says to run `make` when something is missing.
#   make install-strip  install, then strip the debug info of libeventq.a
#                       and the symbol table of the shared library (its
#                       debug file in DEBUGDIR keeps the full symbols)
#   make uninstall      removes what install put there (give the same
#                       PREFIX, DESTDIR and directories), then each directory
#                       of the install's paths that is left empty, up to but
#                       not including DESTDIR (or PREFIX's parent without
#                       DESTDIR). An empty directory that was there before
#                       the install goes too: nothing records which existed.

PREFIX       ?= /usr/local
DESTDIR      ?=
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DATAROOTDIR  ?= $(PREFIX)/share
MANDIR       ?= $(DATAROOTDIR)/man
CMAKEDIR     ?= $(LIBDIR)/cmake/eventq
# The shared library's split debug info: gdb (and valgrind, readelf -wK) look
# for it by themselves in .debug/ next to the library; a distribution may
# set DEBUGDIR=/usr/lib/debug$(LIBDIR) instead.
DEBUGDIR     ?= $(LIBDIR)/.debug

OBJCOPY ?= objcopy
STRIP   ?= strip
CMAKE   ?= cmake
MAN     ?= man
TOOL_objcopy = $(OBJCOPY)
HINT_objcopy = install binutils (objcopy, strip, readelf) to split the debug info
TOOL_cmake   = $(CMAKE)
HINT_cmake   = install CMake to test the CMake package (apt-get install cmake)
TOOL_man     = $(MAN)
HINT_man     = install man-db and groff-base to check the man pages (apt-get install man-db groff-base)

VERSION_MINOR := $(word 2,$(subst ., ,$(VERSION)))
MAN_DIR    := $(BUILD)/man
MAN_STAMP  := $(MAN_DIR)/.generated
DIST_DIR   := $(BUILD)/dist
DIST_SO    := $(DIST_DIR)/$(REALNAME)
DIST_DEBUG := $(DIST_DIR)/$(REALNAME).debug
# Every file install copies. `make` (all) builds each; install only checks
# that they are there.
INSTALL_INPUTS = $(DIST_SO) $(DIST_DEBUG) $(LIB_A) $(NATIVE_LIBS) $(HEADER) $(MAN_STAMP)
# Every directory install writes into.
INSTALL_DIRS = $(LIBDIR) $(INCLUDEDIR) $(PKGCONFIGDIR) $(DEBUGDIR) $(CMAKEDIR) \
               $(MANDIR)/man3 $(MANDIR)/man7
# uninstall removes no directory at or above this one.
UNINSTALL_TOP = $(if $(DESTDIR),$(DESTDIR),$(patsubst %/,%,$(dir $(PREFIX))))

.PHONY: man install install-strip uninstall install-test-prefix abi-check abi-baseline \
        release-check print-version

all: $(INSTALL_INPUTS)

man: $(MAN_STAMP)
$(MAN_STAMP): $(HEADER) docs/design.md scripts/gen-man.py Cargo.toml | need-python3
	$(PYTHON3) scripts/gen-man.py --header $(HEADER) --design docs/design.md \
	  --version $(VERSION) --out $(MAN_DIR)
	@touch $@

# The shared library as installed: its debug info and symbol table copied
# into a file of its own, then stripped from the library (which keeps its
# dynamic symbols), which names that file (and its CRC) in .gnu_debuglink;
# both keep the build ID. gdb and perf read the symbols from the debug file.
$(DIST_SO): $(LIB_SO) mk/install.mk | need-objcopy
	@mkdir -p $(@D)
	$(OBJCOPY) --only-keep-debug $(LIB_SO) $(DIST_DEBUG)
	$(OBJCOPY) --strip-all --add-gnu-debuglink=$(DIST_DEBUG) $(LIB_SO) $@
$(DIST_DEBUG): $(DIST_SO)
	@:

# The native libraries of a static link, but the unwinder: the compiler
# driver adds the right one itself, libgcc_s for a dynamic link and
# libgcc_eh for `cc -static`, where an explicit -lgcc_s fails (no
# libgcc_s.a exists).
STATIC_LIBS = $$(sed -e 's/\(^\|[[:space:]]\)-lgcc_s\([[:space:]]\|$$\)/\1\2/' \
                 -e 's/[[:space:]][[:space:]]*/ /g' -e 's/^ //' -e 's/ $$//' $(NATIVE_LIBS))
# prefix as seen from PKGCONFIGDIR, so the installed tree can move
# (pkg-config's ${pcfiledir}); an absolute prefix if PKGCONFIGDIR is not
# below it.
PC_PREFIX = $(if $(filter $(PREFIX)/%,$(PKGCONFIGDIR)),\$${pcfiledir}/$$(realpath -m -s --relative-to=$(PKGCONFIGDIR) $(PREFIX)),$(PREFIX))
# $(call install_pc,NAME): NAME.pc.in to PKGCONFIGDIR/NAME.pc, with the
# install's paths and the static library's native libraries filled in.
install_pc = sed -e "s|@prefix@|$(PC_PREFIX)|g" \
	    -e 's|@libdir@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|g' \
	    -e 's|@includedir@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|g' \
	    -e 's|@version@|$(VERSION)|g' \
	    -e "s|@libs_private@|$(STATIC_LIBS)|g" \
	    $(1).pc.in > $(DESTDIR)$(PKGCONFIGDIR)/$(1).pc.tmp && \
	  mv -f $(DESTDIR)$(PKGCONFIGDIR)/$(1).pc.tmp $(DESTDIR)$(PKGCONFIGDIR)/$(1).pc
# $(call install_cmake,FILE): cmake/FILE.in to CMAKEDIR/FILE. The library and
# include directories are written relative to CMAKEDIR, so the installed
# tree can move; the native libraries become a CMake list ("-lm" -> "m");
# the pointer size is the ELF class of the library (1: 32-bit, 2: 64-bit).
install_cmake = sed -e 's|@version@|$(VERSION)|g' -e 's|@major@|$(VERSION_MAJOR)|g' \
	    -e 's|@minor@|$(VERSION_MINOR)|g' \
	    -e 's|@realname@|$(REALNAME)|g' -e 's|@soname@|$(SONAME)|g' \
	    -e "s|@rel_libdir@|$$(realpath -m -s --relative-to=$(CMAKEDIR) $(LIBDIR))|g" \
	    -e "s|@rel_includedir@|$$(realpath -m -s --relative-to=$(CMAKEDIR) $(INCLUDEDIR))|g" \
	    -e "s|@static_libs@|$$(echo $(STATIC_LIBS) | sed -e 's/ /;/g' -e 's/\(^\|;\)-l/\1/g')|g" \
	    -e "s|@sizeof_void_p@|$$(( $$(od -An -tu1 -j4 -N1 $(DIST_SO)) * 4 ))|g" \
	    cmake/$(1).in > $(DESTDIR)$(CMAKEDIR)/$(1).tmp && \
	  mv -f $(DESTDIR)$(CMAKEDIR)/$(1).tmp $(DESTDIR)$(CMAKEDIR)/$(1)

# Copies what `make` built, and builds nothing: no prerequisite but a check
# that each file is there.
install:
	@missing=""; for f in $(INSTALL_INPUTS); do [ -e "$$f" ] || missing="$$missing $$f"; done; \
	if [ -n "$$missing" ]; then \
	  echo "error: nothing to install:$$missing not built; run \`make\` first, then \`make install\` (which builds nothing, so \`sudo make install\` needs no cargo)" >&2; \
	  exit 1; fi
	$(INSTALL) -d $(addprefix $(DESTDIR),$(INSTALL_DIRS))
	$(INSTALL) -m 755 $(DIST_SO) $(DESTDIR)$(LIBDIR)/$(REALNAME)
	$(INSTALL) -m 644 $(DIST_DEBUG) $(DESTDIR)$(DEBUGDIR)/$(REALNAME).debug
	ln -sfn $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sfn $(SONAME) $(DESTDIR)$(LIBDIR)/libeventq.so
	$(INSTALL) -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/libeventq.a
	$(INSTALL) -m 644 $(HEADER) $(DESTDIR)$(INCLUDEDIR)/eventq.h
	$(call install_pc,eventq)
	$(call install_pc,eventq-static)
	$(call install_cmake,eventqConfig.cmake)
	$(call install_cmake,eventqConfigVersion.cmake)
	$(INSTALL) -m 644 $(MAN_DIR)/man3/*.3 $(DESTDIR)$(MANDIR)/man3
	$(INSTALL) -m 644 $(MAN_DIR)/man7/*.7 $(DESTDIR)$(MANDIR)/man7

# GNU's install-strip: install, then strip what can be stripped. The static
# library keeps the symbols a link needs (--strip-debug).
install-strip: install
	$(STRIP) --strip-debug $(DESTDIR)$(LIBDIR)/libeventq.a
	$(STRIP) --strip-unneeded $(DESTDIR)$(LIBDIR)/$(REALNAME)

# The man pages to remove are those build/man holds for the current header
# (built by `make`; uninstall builds nothing either).
uninstall:
	@[ -e $(MAN_STAMP) ] || { echo "error: $(MAN_STAMP) is missing: run \`make\` first (uninstall removes the man pages it lists)" >&2; exit 1; }
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,$(REALNAME) $(SONAME) libeventq.so libeventq.a) \
	  $(DESTDIR)$(DEBUGDIR)/$(REALNAME).debug $(DESTDIR)$(INCLUDEDIR)/eventq.h \
	  $(DESTDIR)$(PKGCONFIGDIR)/eventq.pc $(DESTDIR)$(PKGCONFIGDIR)/eventq-static.pc \
	  $(DESTDIR)$(CMAKEDIR)/eventqConfig.cmake $(DESTDIR)$(CMAKEDIR)/eventqConfigVersion.cmake
	for f in $(MAN_DIR)/man3/*.3 $(MAN_DIR)/man7/*.7; do \
	  page=$${f#$(MAN_DIR)/}; rm -f "$(DESTDIR)$(MANDIR)/$$page" || exit 1; done
	scripts/rmdir-empty.sh "$(UNINSTALL_TOP)" $(addprefix $(DESTDIR),$(INSTALL_DIRS))

# The install the test stages build against; relinks only what changed.
# Into an empty prefix, so no file of an earlier install (a man page of a
# function since removed) can pass for one of this install.
$(TEST_STAMP): $(INSTALL_INPUTS) \
               eventq.pc.in eventq-static.pc.in $(wildcard cmake/*.cmake.in) Makefile mk/install.mk
	rm -rf $(TEST_PREFIX)
	$(MAKE) --no-print-directory install PREFIX=$(TEST_PREFIX) DESTDIR=
	@touch $@
install-test-prefix: $(TEST_STAMP)

# Stage: install into build/prefix through the install target; then, with
# a PATH whose cargo fails if run, install again into a scratch DESTDIR:
# install copies what `make` built and builds nothing, and with nothing
# built it fails saying to run `make` first.
stage-install: install-test-prefix
	@echo "installed in $(TEST_PREFIX)"
	MAKE="$(MAKE)" scripts/check-install-nobuild.sh $(VERSION) $(BUILD)/check-install-nobuild

# Stage: exports, soname, symlinks, pkg-config and version of the install.
stage-installed-lib: $(TEST_STAMP) | need-cc need-pkg-config
	CC="$(CC)" PKG_CONFIG="$(PKG_CONFIG)" \
	  scripts/check-install.sh $(TEST_PREFIX) $(VERSION) $(HEADER) $(BUILD)/check-install

# Stage: the ABI against the baseline in abi/ (scripts/abi-check.sh says
# how), then the check itself on deliberately broken ABIs. abidiff comes
# from libabigail (Debian: abigail-tools; .ci/run installs it).
ABI_CHECK = CC="$(CC)" scripts/abi-check.sh $(1) $(LIB_SO) $(HEADER) abi eventq.map $(BUILD)/abi
stage-abi abi-check: $(LIB_SO)
	$(call ABI_CHECK,check)
	$(call ABI_CHECK,selftest)
# A new baseline, at a release that changed the ABI compatibly (commit abi/).
abi-baseline: $(LIB_SO)
	$(call ABI_CHECK,update)

# Stage: the release's metadata: LICENSE-MIT and LICENSE-APACHE (the
# texts, the copyright line, the licence of Cargo.toml, the Go module's
# copies), and every version string agreeing (scripts/release.sh without
# --tag: it only checks).
stage-licenses: release-check
	scripts/check-licenses.sh $(GO_DIR)

# Every version string of the release agrees (Cargo.toml of each crate, the
# header, the .pc and CMake files, Go's header check, Python's, the
# CHANGELOG); scripts/release.sh --tag also makes the release's tags.
release-check:
	MAKE="$(MAKE)" scripts/release.sh

# The version make stamps into the .pc files and the CMake package.
print-version:
	@echo $(VERSION)

# Stage: the installed man pages: one per function of the header, found by
# man, rendered without a warning, with the sections the comments call for.
stage-man-pages: $(TEST_STAMP) | need-man need-cc
	CC="$(CC)" MAN="$(MAN)" scripts/check-man.sh $(TEST_PREFIX) $(HEADER) docs/design.md $(BUILD)/check-man

# Stage: tests/cmake built with find_package(eventq) against the test install
# (and a moved copy of it, and a staged install with other directories):
# eventq::eventq and eventq::eventq-static link and run; version requests.
stage-cmake: $(TEST_STAMP) | need-cmake need-cc
	CC="$(CC)" CMAKE="$(CMAKE)" MAKE="$(MAKE)" \
	  scripts/check-cmake.sh $(TEST_PREFIX) $(VERSION) $(BUILD)/check-cmake

# Stage: the README's link lines, shared, static and fully static (-static),
# build its C example against the test install; the static ones need no
# libeventq.so. The installed libeventq.a has only eventq_* global, and
# links beside another Rust static library (built with cargo).
stage-static-link: $(TEST_STAMP) $(BUILD)/readme.c | need-cc need-pkg-config need-cargo
	CC="$(CC)" PKG_CONFIG="$(PKG_CONFIG)" CARGO="$(CARGO)" ORIGINAL_A=$(CAPI_A) scripts/check-static-link.sh \
	  $(TEST_PREFIX) $(VERSION) README.md $(BUILD)/readme.c $(BUILD)/check-static-link

# Stage: the installed shared library has no debug info, and its
# .gnu_debuglink leads to the debug file (name, CRC, build ID; gdb).
stage-debuginfo: $(TEST_STAMP) | need-objcopy
	scripts/check-debuginfo.sh $(TEST_PREFIX)/lib/$(REALNAME) $(TEST_PREFIX)/lib/.debug/$(REALNAME).debug

# Stage: install, install-strip and uninstall into scratch DESTDIRs (empty,
# and holding other packages' files): exactly the expected files go in, and
# uninstall leaves the tree as it was.
stage-uninstall: $(TEST_STAMP) | need-objcopy need-cc
	CC="$(CC)" MAKE="$(MAKE)" scripts/check-uninstall.sh $(VERSION) $(HEADER) $(BUILD)/check-uninstall
