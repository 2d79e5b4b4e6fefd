# hheap -- the only build entry point.
#
#   make               build/libhheap.a, build/libhheap.so (+ what mk/*.mk add: shim, tools)
#   make check         install missing test dependencies (apt-get, as root), build the
#                      Check suites, run them, then run them again under Valgrind memcheck
#                      (zero errors, zero leaks), then the extra checks mk/*.mk register
#   make install PREFIX=/usr/local    headers, libraries, tools, hheap.pc, CMake config
#   make install-lib                  the same without the tools (needs no cairo)
#   make uninstall                    removes what install wrote (same PREFIX/LIBDIR/...)
#   make clean
#
# Test-only -D switches (see src/common/hh_config.h), used by the test build:
#   -DHH_DEBUG=2 -DHH_TESTING=1 -DHH_TRACK_VALGRIND=1
#   -DHH_DEBUG=3 (whole-heap checks around every mutation; slow)
#   (run-time stress: the HH_HEAP_STRESS_MOVES heap flag moves every block at every step)
#
# Modules add their own targets in mk/<name>.mk, included below; a fragment may
# append to CHECK_EXTRA (targets `make check` runs after the memcheck pass),
# ALL_EXTRA (built by `make`), DEPS_PKGS (Debian packages), INSTALL_BINS (tools),
# INSTALL_LIBS (extra libraries, installed by install-lib: no cairo there),
# LIB_EXCLUDE (sources not part of libhheap) and CLEAN_EXTRA.

CC      ?= cc
V       ?= 0
Q       := $(if $(filter 1,$(V)),,@)
PREFIX  ?= /usr/local
BUILD   := build
# The version is the one in the public header (HH_VERSION_MAJOR/MINOR/PATCH).
VERSION := $(shell sed -n 's/^\#define HH_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' include/hheap/common.h | paste -sd.)

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
INSTALL_LIBS :=
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

# --fair-sched=yes: the threaded suites hand locks and spin-waits between threads;
# memcheck's default scheduler can leave a spinning thread running for whole
# time slices, which made the pass take 2 minutes or 11 on the same tree. Fair
# scheduling keeps it at about 2.
VALGRIND := valgrind --quiet --fair-sched=yes --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible \
            --errors-for-leak-kinds=definite,indirect,possible --track-origins=yes --num-callers=30
# The suites' memcheck pass runs without --track-origins, which finds the same
# errors but made the pass 5.5x slower (420 s against 77 s here; the heap suite,
# which fills and moves many bytes, 298 s against 25); only if it fails does it
# run again with origins, to say where an undefined value came from.
VALGRIND_QUICK = $(filter-out --track-origins=yes,$(VALGRIND))

.PHONY: FORCE all lib check check-build check-headers check-exports check-unit check-valgrind deps install install-lib uninstall clean
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

$(BUILD)/test-obj/tests/%.o: tests/%.c $(HEADERS) tests/test_util.h tests/test_rng.h $(BUILD)/test/suites.h
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

# Each phase prints its elapsed seconds.
check: deps
	@$(MAKE) --no-print-directory check-build
	@$(MAKE) --no-print-directory check-unit
	@for t in check-valgrind $(CHECK_EXTRA); do s=$$(date +%s); \
	  $(MAKE) --no-print-directory $$t || exit 1; \
	  echo "   [$$t: $$(( $$(date +%s) - s )) s]"; done
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

check-build: check-headers check-exports
	@echo "== library with -Werror (gcc, clang)"
	@$(MAKE) --no-print-directory lib BUILD=$(BUILD)/werror-gcc CC=gcc CFLAGS="-O2 -Werror"
	@$(MAKE) --no-print-directory lib BUILD=$(BUILD)/werror-clang CC=clang CFLAGS="-O2 -Werror"

# The release shared library exports the public API and nothing else: every
# dynamic symbol is an hh_* name declared in a public header, and no test seam
# (hh_test_*) is there.
check-exports: $(BUILD)/libhheap.so
	@echo "== exported symbols of $(BUILD)/libhheap.so: public hh_* API only"
	@syms=$$(nm -D --defined-only $(BUILD)/libhheap.so | awk '{ print $$NF }' | sort -u); \
	  [ -n "$$syms" ] || { echo "check-exports: no symbols read from $(BUILD)/libhheap.so"; exit 1; }; bad=0; \
	  for s in $$syms; do case $$s in \
	    hh_test_*) echo "  test seam exported: $$s"; bad=1 ;; \
	    hh_*) grep -qw "$$s" include/hheap.h include/hheap/*.h || { echo "  not in a public header: $$s"; bad=1; } ;; \
	    *) echo "  not an hh_ name: $$s"; bad=1 ;; esac; done; \
	  [ $$bad -eq 0 ] || { echo "check-exports: libhheap.so exports more than the public API"; exit 1; }; \
	  echo "  $$(echo "$$syms" | wc -l) symbols, all public hh_* API"

check-unit: $(BUILD)/test/hh-tests
	@echo "== Check suites"
	@$(BUILD)/test/hh-tests

check-valgrind: $(BUILD)/test/hh-tests
	@echo "== Check suites under Valgrind memcheck (no-fork)"
	@CK_FORK=no HH_TEST_UNDER_VALGRIND=1 $(VALGRIND_QUICK) $(BUILD)/test/hh-tests || { \
	  echo "== memcheck failed: the suites again with --track-origins=yes (where undefined values came from)"; \
	  CK_FORK=no HH_TEST_UNDER_VALGRIND=1 $(VALGRIND) $(BUILD)/test/hh-tests; exit 1; }

# ---------------------------------------------------------------------------
# Install. PREFIX, LIBDIR, INCLUDEDIR, BINDIR and DESTDIR (staging) as usual.
#   install-lib   headers (hheap.h, hheap.hpp, hheap/*.h), libhheap.a, libhheap.so,
#                 INSTALL_LIBS (the malloc shim), hheap.pc, and the CMake package
#                 config (LIBDIR/cmake/hheap); needs no cairo
#   install       install-lib + the tools (INSTALL_BINS)
#   uninstall     removes everything either wrote
# The .pc file and the CMake config record the final paths, so they are rewritten
# on every install (paths may differ between runs).
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
PC_DIR      = $(LIBDIR)/pkgconfig
CMAKE_DIR   = $(LIBDIR)/cmake/hheap
HH_SUBST    = sed -e 's|@HHEAP_VERSION@|$(VERSION)|g' -e 's|@HHEAP_VERSION_MAJOR@|$(word 1,$(subst ., ,$(VERSION)))|g' \
                  -e 's|@HHEAP_VERSION_MINOR@|$(word 2,$(subst ., ,$(VERSION)))|g' \
                  -e 's|@HHEAP_INSTALL_LIBDIR@|$(LIBDIR)|g' -e 's|@HHEAP_INSTALL_INCLUDEDIR@|$(INCLUDEDIR)|g'

$(BUILD)/hheap.pc: FORCE
	@mkdir -p $(dir $@)
	@printf 'prefix=%s\nlibdir=%s\nincludedir=%s\n\nName: hheap\nDescription: relocatable handle heap, binned and linear allocators for game engines\nVersion: %s\nCflags: -I$${includedir}\nLibs: -L$${libdir} -Wl,-rpath,$${libdir} -lhheap\nLibs.private: -lpthread -lm\n' '$(PREFIX)' '$(LIBDIR)' '$(INCLUDEDIR)' '$(VERSION)' > $@

$(BUILD)/cmake/hheapConfig.cmake: cmake/hheapConfig.cmake.in FORCE
	@mkdir -p $(dir $@)
	@$(HH_SUBST) $< > $@

$(BUILD)/cmake/hheapConfigVersion.cmake: cmake/hheapConfigVersion.cmake.in FORCE
	@mkdir -p $(dir $@)
	@$(HH_SUBST) $< > $@

INSTALLED_HEADERS := include/hheap.h include/hheap.hpp $(wildcard include/hheap/*.h)

install-lib: lib $(INSTALL_LIBS) $(BUILD)/hheap.pc $(BUILD)/cmake/hheapConfig.cmake $(BUILD)/cmake/hheapConfigVersion.cmake
	install -d $(DESTDIR)$(INCLUDEDIR)/hheap $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PC_DIR) $(DESTDIR)$(CMAKE_DIR)
	install -m 644 include/hheap.h include/hheap.hpp $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(wildcard include/hheap/*.h) $(DESTDIR)$(INCLUDEDIR)/hheap/
	install -m 644 $(BUILD)/libhheap.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/libhheap.so $(DESTDIR)$(LIBDIR)/libhheap.so.0
	ln -sf libhheap.so.0 $(DESTDIR)$(LIBDIR)/libhheap.so
	install -m 644 $(BUILD)/hheap.pc $(DESTDIR)$(PC_DIR)/
	install -m 644 $(BUILD)/cmake/hheapConfig.cmake $(BUILD)/cmake/hheapConfigVersion.cmake $(DESTDIR)$(CMAKE_DIR)/
	@for l in $(INSTALL_LIBS); do echo install $$l; install -m 755 $$l $(DESTDIR)$(LIBDIR)/ || exit 1; done

install: install-lib $(INSTALL_BINS)
	install -d $(DESTDIR)$(BINDIR)
	@for b in $(INSTALL_BINS); do echo install $$b; install -m 755 $$b $(DESTDIR)$(BINDIR)/ || exit 1; done

FORCE:

uninstall:
	rm -f $(foreach h,$(INSTALLED_HEADERS),$(DESTDIR)$(INCLUDEDIR)/$(h:include/%=%))
	@rmdir $(DESTDIR)$(INCLUDEDIR)/hheap 2>/dev/null || true
	rm -f $(DESTDIR)$(LIBDIR)/libhheap.a $(DESTDIR)$(LIBDIR)/libhheap.so $(DESTDIR)$(LIBDIR)/libhheap.so.0
	rm -f $(foreach l,$(INSTALL_LIBS),$(DESTDIR)$(LIBDIR)/$(notdir $(l)))
	rm -f $(DESTDIR)$(PC_DIR)/hheap.pc
	rm -f $(DESTDIR)$(CMAKE_DIR)/hheapConfig.cmake $(DESTDIR)$(CMAKE_DIR)/hheapConfigVersion.cmake
	@rmdir $(DESTDIR)$(CMAKE_DIR) 2>/dev/null || true
	rm -f $(foreach b,$(INSTALL_BINS),$(DESTDIR)$(BINDIR)/$(notdir $(b)))

clean:
	rm -rf $(BUILD) $(CLEAN_EXTRA)
