# hheap -- the only build entry point.
#
#   make               build/libhheap.a, build/libhheap.so (+ what mk/*.mk add: shim, tools)
#   make check         install missing test dependencies (apt-get, as root), build the
#                      Check suites, run them, then run them again under Valgrind memcheck
#                      (zero errors, zero leaks), then the extra checks mk/*.mk register
#   make install PREFIX=/usr/local    headers, libraries, tools, hheap.pc
#   make clean
#
# Test-only -D switches (see src/common/hh_config.h), used by the test build:
#   -DHH_DEBUG=2 -DHH_TESTING=1 -DHH_TRACK_VALGRIND=1
#   -DHH_DEBUG=3 (whole-heap checks around every mutation; slow)
#   (run-time stress: the HH_HEAP_STRESS_MOVES heap flag moves every block at every step)
#
# Modules add their own targets in mk/<name>.mk, included below; a fragment may
# append to CHECK_EXTRA (targets `make check` runs after the memcheck pass),
# ALL_EXTRA (built by `make`), DEPS_PKGS (Debian packages), INSTALL_BINS,
# LIB_EXCLUDE (sources not part of libhheap) and CLEAN_EXTRA.

CC      ?= cc
V       ?= 0
Q       := $(if $(filter 1,$(V)),,@)
PREFIX  ?= /usr/local
BUILD   := build
VERSION := 0.1.0

WARN     := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wundef -Wmissing-prototypes \
            -Wstrict-prototypes -Wold-style-definition -Wmissing-declarations -Wvla
# The C++ standards the public headers are checked against (check-headers, check-cxx).
CXX_STDS := c++11 c++14 c++17 c++20
CPPFLAGS += -Iinclude -D_POSIX_C_SOURCE=200809L
CFLAGS   ?= -O2 -g
LIB_CFLAGS := $(WARN) $(CFLAGS) -fPIC -fvisibility=hidden -pthread
LDLIBS   := -pthread -lm

# Test build: debug assertions, fault-injection seam, memcheck client requests.
TEST_DEFS   := -DHH_DEBUG=2 -DHH_TESTING=1 -DHH_TRACK_VALGRIND=1
TEST_CFLAGS := $(WARN) -Werror -O1 -g -fno-omit-frame-pointer -pthread $(TEST_DEFS)

DEPS_PKGS    := build-essential pkg-config check valgrind clang
CHECK_EXTRA  :=
ALL_EXTRA    :=
INSTALL_BINS :=
LIB_EXCLUDE  :=
CLEAN_EXTRA  :=

include $(sort $(wildcard mk/*.mk))

LIB_SRCS  := $(filter-out $(LIB_EXCLUDE),$(sort $(wildcard src/*/*.c)))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
TLIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/test-obj/%.o)
HEADERS   := $(wildcard include/*.h include/hheap/*.h src/*/*.h)

SUITE_SRCS := $(filter-out tests/check_main.c,$(sort $(wildcard tests/check_*.c)))
TEST_SRCS  := tests/check_main.c tests/test_util.c $(SUITE_SRCS)
TEST_OBJS  := $(TEST_SRCS:%.c=$(BUILD)/test-obj/%.o)
CHECK_PC   = $(shell pkg-config --cflags --libs check 2>/dev/null || echo -lcheck)

VALGRIND := valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible \
            --errors-for-leak-kinds=definite,indirect,possible --track-origins=yes --num-callers=30

.PHONY: FORCE all lib check check-build check-headers check-unit check-valgrind deps install uninstall clean
.DEFAULT_GOAL := all

all: lib $(ALL_EXTRA)
lib: $(BUILD)/libhheap.a $(BUILD)/libhheap.so

$(BUILD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC      $<')
	$(Q)$(CC) $(CPPFLAGS) $(LIB_CFLAGS) -c $< -o $@

$(BUILD)/test-obj/src/%.o: src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC test $<')
	$(Q)$(CC) $(CPPFLAGS) $(TEST_CFLAGS) -fvisibility=hidden -c $< -o $@

$(BUILD)/test-obj/tests/%.o: tests/%.c $(HEADERS) tests/test_util.h $(BUILD)/test/suites.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC test $<')
	$(Q)$(CC) $(CPPFLAGS) -I$(BUILD)/test $(TEST_CFLAGS) $(shell pkg-config --cflags check 2>/dev/null) -c $< -o $@

$(BUILD)/libhheap.a: $(LIB_OBJS)
	@rm -f $@
	$(Q)$(AR) rcs $@ $^

$(BUILD)/libhheap.so: $(LIB_OBJS)
	$(Q)$(CC) -shared -Wl,-soname,libhheap.so.0 -o $@ $^ $(LDLIBS)

$(BUILD)/test/libhheap-test.a: $(TLIB_OBJS)
	@mkdir -p $(dir $@)
	@rm -f $@
	$(Q)$(AR) rcs $@ $^

# The suite list is generated from the file names: tests/check_<name>.c exports
# hh_test_<name>_suite(), so adding a suite is adding a file.
$(BUILD)/test/suites.h: $(SUITE_SRCS) Makefile
	@mkdir -p $(dir $@)
	@{ for f in $(SUITE_SRCS); do n=$$(basename $$f .c); echo "HH_SUITE($${n#check_})"; done; } > $@.tmp
	@cmp -s $@.tmp $@ 2>/dev/null && rm -f $@.tmp || mv $@.tmp $@

$(BUILD)/test/hh-tests: $(TEST_OBJS) $(BUILD)/test/libhheap-test.a
	$(Q)$(CC) -o $@ $(TEST_OBJS) $(BUILD)/test/libhheap-test.a $(CHECK_PC) $(LDLIBS)

# Installs what a fresh Debian machine lacks (root: apt-get; otherwise prints the command).
deps:
	@missing=""; for p in $(DEPS_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing:$$missing"; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing packages:$$missing -- run: sudo apt-get install$$missing"; exit 1; fi; fi

check: deps
	@$(MAKE) --no-print-directory check-build
	@$(MAKE) --no-print-directory check-unit
	@$(MAKE) --no-print-directory check-valgrind
	@for t in $(CHECK_EXTRA); do $(MAKE) --no-print-directory $$t || exit 1; done
	@echo "make check: all passed"

# Every public header compiles on its own as C11 (gcc, clang) and as C++11, 14,
# 17 and 20 (g++, clang++; engines are C++), warning-free (-Werror); hheap.hpp
# as C++ too. The library builds warning-free under both gcc and clang.
check-headers:
	@echo "== public headers compile alone (gcc, clang)"
	@for c in gcc clang; do for h in include/hheap.h include/hheap/*.h; do \
	  echo "#include \"$${h#include/}\"" | $$c -std=c11 $(WARN) -Werror -Iinclude -x c -fsyntax-only - \
	  || { echo "  $$h does not compile alone with $$c"; exit 1; }; done; done
	@echo "== public headers compile alone as $(CXX_STDS) (g++, clang++)"
	@for c in g++ clang++; do for s in $(CXX_STDS); do for h in include/hheap.hpp include/hheap.h include/hheap/*.h; do \
	  printf '#include "%s"\nstatic hh_handle none() { hh_handle h = HH_NULL; return h; }\nint main() { return hh_is_null(none()) ? 0 : 1; }\n' "$${h#include/}" \
	  | $$c -std=$$s -Wall -Wextra -Wpedantic -Werror -Iinclude -x c++ -fsyntax-only - \
	  || { echo "  $$h does not compile as $$s with $$c"; exit 1; }; done; done; done

check-build: check-headers
	@echo "== library with -Werror (gcc, clang)"
	@$(MAKE) --no-print-directory lib BUILD=$(BUILD)/werror-gcc CC=gcc CFLAGS="-O2 -Werror"
	@$(MAKE) --no-print-directory lib BUILD=$(BUILD)/werror-clang CC=clang CFLAGS="-O2 -Werror"

check-unit: $(BUILD)/test/hh-tests
	@echo "== Check suites"
	@$(BUILD)/test/hh-tests

check-valgrind: $(BUILD)/test/hh-tests
	@echo "== Check suites under Valgrind memcheck (no-fork)"
	@CK_FORK=no HH_TEST_UNDER_VALGRIND=1 $(VALGRIND) $(BUILD)/test/hh-tests

# Rewritten on every install: it records PREFIX, which may differ between runs.
$(BUILD)/hheap.pc: FORCE
	@mkdir -p $(dir $@)
	@printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: hheap\nDescription: relocatable handle heap, binned and linear allocators for game engines\nVersion: %s\nCflags: -I$${includedir}\nLibs: -L$${libdir} -Wl,-rpath,$${libdir} -lhheap\nLibs.private: -lpthread -lm\n' '$(PREFIX)' '$(VERSION)' > $@

install: all $(BUILD)/hheap.pc
	install -d $(DESTDIR)$(PREFIX)/include/hheap $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/hheap.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 include/hheap/*.h $(DESTDIR)$(PREFIX)/include/hheap/
	install -m 644 $(BUILD)/libhheap.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libhheap.so $(DESTDIR)$(PREFIX)/lib/libhheap.so.0
	ln -sf libhheap.so.0 $(DESTDIR)$(PREFIX)/lib/libhheap.so
	install -m 644 $(BUILD)/hheap.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	@if [ -f $(BUILD)/libhheap_malloc.so ]; then install -m 755 $(BUILD)/libhheap_malloc.so $(DESTDIR)$(PREFIX)/lib/; fi
	@for b in $(INSTALL_BINS); do echo install $$b; install -m 755 $$b $(DESTDIR)$(PREFIX)/bin/ || exit 1; done

FORCE:

uninstall:
	rm -rf $(DESTDIR)$(PREFIX)/include/hheap $(DESTDIR)$(PREFIX)/include/hheap.h
	rm -f $(DESTDIR)$(PREFIX)/lib/libhheap.a $(DESTDIR)$(PREFIX)/lib/libhheap.so* $(DESTDIR)$(PREFIX)/lib/libhheap_malloc.so
	rm -f $(DESTDIR)$(PREFIX)/lib/pkgconfig/hheap.pc

clean:
	rm -rf $(BUILD) $(CLEAN_EXTRA)
