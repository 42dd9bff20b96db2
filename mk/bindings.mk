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
#                  cffi, pytest, pytest-timeout, trio (the README's trio
#                  example) from PyPI and bindings/python from the tree),
#                  pointed at the test install, then pytest on
#                  bindings/python/tests; no tests collected is a failure
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

# The venv and its tools, made once (delete build/py-venv to refresh them).
$(PY_VENV)/.tools: | need-python-venv
	rm -rf $(PY_VENV)
	$(PYTHON3) -m venv $(PY_VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip setuptools wheel cffi pytest pytest-timeout trio
	@touch $@

# The package, reinstalled when it changes; built from a copy in build/ so
# setuptools leaves nothing in the source tree.
$(PY_VENV)/.installed: $(PY_VENV)/.tools $(PY_SOURCES)
	rm -rf $(BUILD)/py-src && mkdir -p $(BUILD)/py-src
	cp -R $(PY_DIR)/pyproject.toml $(PY_DIR)/README.md $(PY_DIR)/eventq $(BUILD)/py-src/
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
	  --force-reinstall $(BUILD)/py-src
	@touch $@

# Stage: the Python binding's tests (the name make test-python is also the group).
stage-python: $(PY_VENV)/.installed $(TEST_STAMP) $(CROSS_PRODUCER) | need-cc need-pkg-config
	@cd $(BUILD) && $(PY_ENV) $(PY) -m pytest -p no:cacheprovider --timeout $(PY_TIMEOUT) \
	  $(PYTEST_ARGS) $(CURDIR)/$(PY_DIR)/tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc
