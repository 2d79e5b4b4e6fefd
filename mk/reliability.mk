# mk/reliability.mk -- sanitizer builds, libFuzzer harnesses, corpus replay,
# must-be-caught programs and the soak run (issue 8).
#
#   make check-asan          library + every Check suite with -fsanitize=address,undefined
#                            and the library's own ASan poisoning (HH_TRACK_ASAN=1), in
#                            build/asan/; LeakSanitizer on. Part of `make check`.
#   make check-tsan          library + the threaded suites with -fsanitize=thread, in
#                            build/tsan/ (TSAN_SUITES; each run as CK_RUN_SUITE=<name>).
#                            Part of `make check`.
#   make fuzz                builds build/fuzz/fuzz_<name> (clang -fsanitize=fuzzer,address,
#                            undefined) and runs each for FUZZ_SECONDS (default 60) on a
#                            scratch copy of its committed corpus tests/fuzz/corpus_<name>/;
#                            crashes land in build/fuzz/artifacts/.
#   make check-fuzz          the same run, FUZZ_SECONDS=$(FUZZ_CI_SECONDS) per harness
#                            (part of `make check`).
#   make check-fuzz-corpus   replays every committed corpus file through every harness
#                            WITHOUT libFuzzer (tests/fuzz/replay.c + the normal test
#                            library), plain and under memcheck, then runs the bug
#                            reproducers tests/fuzz/repro_*.c the same two ways (each
#                            exits 0 while its bug stays fixed). Part of `make check`.
#   make check-wrong-rel     tests/wrong/rel_*.c under memcheck and, with every other
#                            tests/wrong/*.c, under ASan: passes only if the tool reports.
#   make soak                tests/soak.c for SOAK_SECONDS (default 600); not in CI.
#
# The sanitizer builds need clang and its runtime (libclang-rt-14-dev); `make deps`
# installs them. REL_CC overrides the compiler (gcc works for check-asan/check-tsan).
# CI: `make check` runs check-asan, check-tsan, check-fuzz-corpus, check-wrong-rel and
# check-fuzz (about 5 minutes together on 2 cores, builds included; `make check`
# prints each one's wall time).
# FUZZ_STRICT=0 makes the harnesses report known bugs instead of failing on them.

REL_CC          ?= clang
FUZZ_SECONDS    ?= 60
FUZZ_CI_SECONDS ?= 20
FUZZ_CI_SEED    ?= 1
SOAK_SECONDS    ?= 600
# FUZZ_STRICT=0: known bugs (tests/fuzz/README.md) are only reported, not failed.
FUZZ_STRICT     ?= 1
TSAN_SUITES     ?= reliability binned linear heap

DEPS_PKGS   += clang libclang-rt-14-dev llvm
CHECK_EXTRA += check-asan check-tsan check-fuzz-corpus check-wrong-rel check-fuzz
CLEAN_EXTRA +=

REL_HEADERS := $(wildcard include/*.h include/hheap/*.h src/*/*.h tests/*.h tests/fuzz/*.h)
REL_CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
REL_CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck)

# The lists of sources come from the core Makefile (LIB_SRCS, TEST_SRCS), which it
# defines after including this fragment: they are used only inside recipes, where
# every variable is known, and the objects are built by the pattern rules below.
REL_LIB_OBJS  = $(patsubst %.c,$(1)/obj/%.o,$(LIB_SRCS))
REL_TEST_OBJS = $(patsubst %.c,$(1)/obj/%.o,$(TEST_SRCS))

# Object rules of one sanitizer build: $(1) dir, $(2) tag printed, $(3) compiler flags.
define REL_SAN_OBJ_RULES
$(1)/obj/src/%.o: src/%.c $$(REL_HEADERS)
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo '  CC $(2) $$<')
	$$(Q)$$(REL_CC) $$(CPPFLAGS) $(3) -fvisibility=hidden -c $$< -o $$@

$(1)/obj/tests/%.o: tests/%.c $$(REL_HEADERS) | $$(BUILD)/test/suites.h
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo '  CC $(2) $$<')
	$$(Q)$$(REL_CC) $$(CPPFLAGS) -I$$(BUILD)/test $(3) -Werror $$(REL_CHECK_CFLAGS) -c $$< -o $$@
endef

# ---------------------------------------------------------------------------
# ASan + UBSan
ASAN_DIR    := $(BUILD)/asan
ASAN_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_DEFS   := -DHH_DEBUG=2 -DHH_TESTING=1 -DHH_TRACK_ASAN=1
ASAN_CFLAGS := $(WARN) -O1 -g -pthread $(ASAN_SAN) $(ASAN_DEFS)
# REL_ASAN_UNMAP_SHIM=1 links tests/fuzz/asan_unmap_shim.c (un-poisons every munmap
# of the library): the workaround used while hhi_os_unmap left poison behind
# (bugs.md, fixed since); off by default so such a regression is reported.
REL_ASAN_UNMAP_SHIM ?= 0
REL_ASAN_LINK = $(if $(filter 1,$(REL_ASAN_UNMAP_SHIM)),-Xlinker --wrap=munmap $(ASAN_DIR)/obj/tests/fuzz/asan_unmap_shim.o)
REL_ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1:strict_string_checks=1 \
                UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

$(eval $(call REL_SAN_OBJ_RULES,$(ASAN_DIR),asan,$$(ASAN_CFLAGS)))

# ---------------------------------------------------------------------------
# TSan
TSAN_DIR    := $(BUILD)/tsan
TSAN_SAN    := -fsanitize=thread -fno-omit-frame-pointer
TSAN_DEFS   := -DHH_DEBUG=2 -DHH_TESTING=1
TSAN_CFLAGS := $(WARN) -O1 -g -pthread $(TSAN_SAN) $(TSAN_DEFS)

$(eval $(call REL_SAN_OBJ_RULES,$(TSAN_DIR),tsan,$$(TSAN_CFLAGS)))

# One sanitizer build of the library and the Check runner: $(1) dir, $(2) sanitizer flags.
# Objects are (re)made by the pattern rules through a sub-make; archive + link are cheap.
define REL_SAN_BUILD
	@$(MAKE) --no-print-directory -s $(call REL_LIB_OBJS,$(1)) $(call REL_TEST_OBJS,$(1)) $(4)
	@rm -f $(1)/libhheap.a
	$(Q)$(AR) rcs $(1)/libhheap.a $(call REL_LIB_OBJS,$(1))
	$(Q)$(REL_CC) $(2) -pthread -o $(1)/hh-tests $(call REL_TEST_OBJS,$(1)) $(1)/libhheap.a $(3) $(REL_CHECK_LIBS) $(LDLIBS)
endef

.PHONY: check-asan check-tsan rel-asan-build rel-tsan-build
rel-asan-build: | $(BUILD)/test/suites.h
	$(call REL_SAN_BUILD,$(ASAN_DIR),$(ASAN_SAN),$(REL_ASAN_LINK),$(ASAN_DIR)/obj/tests/fuzz/asan_unmap_shim.o)

rel-tsan-build: | $(BUILD)/test/suites.h
	$(call REL_SAN_BUILD,$(TSAN_DIR),$(TSAN_SAN))

# No-fork mode: a leak or a sanitizer report is attributed to the whole run and
# fails it (in fork mode a child's report could be lost with the child).
# HH_TEST_UNDER_VALGRIND=1 tells the suites a memory tool watches (they then skip
# their deliberate overruns, which the tool itself would report); HH_TEST_SCALE
# keeps the randomised tests at ASAN_TEST_SCALE of their normal length.
ASAN_TEST_SCALE ?= 1
# Each target of `make check` prints its wall time, build included (REL_T0 .. REL_T1).
REL_T0 = @mkdir -p $(BUILD); date +%s > $(BUILD)/.rel_t_$@
REL_T1 = @echo "  $@: $$(( $$(date +%s) - $$(cat $(BUILD)/.rel_t_$@) )) s wall, build included"; rm -f $(BUILD)/.rel_t_$@

check-asan:
	$(REL_T0)
	@$(MAKE) --no-print-directory rel-asan-build
	@echo "== Check suites under ASan + UBSan (HH_TRACK_ASAN=1, $(REL_CC))"
	@CK_FORK=no HH_TEST_UNDER_VALGRIND=1 HH_TEST_SCALE=$(ASAN_TEST_SCALE) $(REL_ASAN_ENV) $(ASAN_DIR)/hh-tests
	$(REL_T1)

check-tsan:
	$(REL_T0)
	@$(MAKE) --no-print-directory rel-tsan-build
	@echo "== threaded suites under TSan ($(TSAN_SUITES))"
	@for s in $(TSAN_SUITES); do \
	  CK_FORK=no CK_RUN_SUITE=$$s TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	    $(TSAN_DIR)/hh-tests || { echo "check-tsan: suite $$s failed"; exit 1; }; done
	$(REL_T1)

# ---------------------------------------------------------------------------
# libFuzzer harnesses. The library is built with ASan+UBSan and coverage
# (-fsanitize=fuzzer-no-link), HH_TESTING=1 so the heap harness can inject faults.
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_DEFS    := -DHH_DEBUG=2 -DHH_TESTING=1 -DHH_TRACK_ASAN=1
FUZZ_CFLAGS  := $(WARN) -O1 -g -pthread $(FUZZ_SAN) $(FUZZ_DEFS)
FUZZ_ALL     := heap binned linear hhmap vheap
# The harness files themselves get no coverage instrumentation: their shadow-model
# byte loops would otherwise spend most of the time in comparison hooks (measured:
# 75% of the run), and it is the library's coverage that guides the fuzzer.
FUZZ_NAMES   := $(FUZZ_ALL)

$(FUZZ_DIR)/obj/src/%.o: src/%.c $(REL_HEADERS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC fuzz $<')
	$(Q)$(REL_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -fvisibility=hidden -c $< -o $@

$(FUZZ_DIR)/obj/tests/fuzz/%.o: tests/fuzz/%.c $(REL_HEADERS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC fuzz $<')
	$(Q)$(REL_CC) $(CPPFLAGS) -Isrc $(FUZZ_CFLAGS) -Werror -c $< -o $@

.PHONY: fuzz check-fuzz fuzz-build check-fuzz-corpus
fuzz-build:
	@$(MAKE) --no-print-directory -s $(call REL_LIB_OBJS,$(FUZZ_DIR)) $(foreach n,$(FUZZ_NAMES),$(FUZZ_DIR)/obj/tests/fuzz/fuzz_$(n).o)
	@rm -f $(FUZZ_DIR)/libhheap.a
	$(Q)$(AR) rcs $(FUZZ_DIR)/libhheap.a $(call REL_LIB_OBJS,$(FUZZ_DIR))
	@$(MAKE) --no-print-directory -s $(ASAN_DIR)/obj/tests/fuzz/asan_unmap_shim.o
	$(Q)for n in $(FUZZ_NAMES); do \
	  $(REL_CC) $(FUZZ_SAN) -fsanitize=fuzzer -pthread -o $(FUZZ_DIR)/fuzz_$$n \
	    $(FUZZ_DIR)/obj/tests/fuzz/fuzz_$$n.o $(FUZZ_DIR)/libhheap.a $(REL_ASAN_LINK) $(LDLIBS) || exit 1; done

# Runs every harness for $(1) seconds on a scratch copy of its corpus (the committed
# corpus only changes when someone copies a new input in on purpose); prints execs.
# $(2): extra libFuzzer flags (the CI run uses a fixed -seed so that a rerun
# explores the same inputs).
define REL_FUZZ_RUN
	@mkdir -p $(FUZZ_DIR)/artifacts
	@for n in $(FUZZ_NAMES); do \
	  work=$(FUZZ_DIR)/work_$$n; rm -rf $$work; mkdir -p $$work; \
	  cp tests/fuzz/corpus_$$n/* $$work/ 2>/dev/null; \
	  start=$$(date +%s); \
	  FUZZ_STRICT=$(FUZZ_STRICT) $(REL_ASAN_ENV) $(FUZZ_DIR)/fuzz_$$n -max_total_time=$(1) -timeout=20 -rss_limit_mb=2048 \
	    -max_len=4096 -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/artifacts/$$n- $(2) \
	    $$work >$(FUZZ_DIR)/fuzz_$$n.log 2>&1; rc=$$?; \
	  execs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(FUZZ_DIR)/fuzz_$$n.log); \
	  cov=$$(grep -o 'cov: [0-9]*' $(FUZZ_DIR)/fuzz_$$n.log | tail -1); \
	  echo "  fuzz_$$n: $${execs:-?} execs in $$(( $$(date +%s) - start )) s, $$cov, corpus $$(ls $$work | wc -l) files, rc=$$rc"; \
	  if [ $$rc -ne 0 ]; then tail -60 $(FUZZ_DIR)/fuzz_$$n.log; \
	    echo "fuzz_$$n FAILED: reproducer in $(FUZZ_DIR)/artifacts/"; exit 1; fi; done
endef

fuzz: fuzz-build
	@echo "== libFuzzer, $(FUZZ_SECONDS) s per harness: $(FUZZ_NAMES)"
	$(call REL_FUZZ_RUN,$(FUZZ_SECONDS))

check-fuzz:
	$(REL_T0)
	@$(MAKE) --no-print-directory fuzz-build
	@echo "== libFuzzer (short CI run), $(FUZZ_CI_SECONDS) s per harness: $(FUZZ_NAMES)"
	$(call REL_FUZZ_RUN,$(FUZZ_CI_SECONDS),-seed=$(FUZZ_CI_SEED))
	$(REL_T1)

# Corpus replay: the same harness sources, compiled with the test flags against
# the test library (memcheck client requests on), a main() instead of libFuzzer.
REPLAY_DIR := $(BUILD)/test/fuzz

$(REPLAY_DIR)/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(REL_HEADERS) $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(CPPFLAGS) -Isrc $(TEST_CFLAGS) -o $@ tests/fuzz/fuzz_$*.c tests/fuzz/replay.c $(BUILD)/test/libhheap-test.a $(LDLIBS)

# The reproducers of the bugs the harnesses found (tests/fuzz/README.md): small
# programs against the test library that exit 0 while the bug stays fixed.
REPRO_BINS := $(patsubst tests/fuzz/%.c,$(REPLAY_DIR)/%,$(wildcard tests/fuzz/repro_*.c))

$(REPLAY_DIR)/repro_%: tests/fuzz/repro_%.c $(REL_HEADERS) $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(CPPFLAGS) $(TEST_CFLAGS) -o $@ $< $(BUILD)/test/libhheap-test.a $(LDLIBS)

check-fuzz-corpus:
	$(REL_T0)
	@$(MAKE) --no-print-directory -s $(foreach n,$(FUZZ_NAMES),$(REPLAY_DIR)/replay_$(n)) $(REPRO_BINS)
	@echo "== fuzz corpora replayed without libFuzzer (plain, then memcheck)"
	@for n in $(FUZZ_NAMES); do \
	  FUZZ_STRICT=$(FUZZ_STRICT) $(REPLAY_DIR)/replay_$$n tests/fuzz/corpus_$$n || { echo "replay_$$n FAILED"; exit 1; }; \
	  FUZZ_STRICT=$(FUZZ_STRICT) HH_TEST_UNDER_VALGRIND=1 $(VALGRIND) $(REPLAY_DIR)/replay_$$n tests/fuzz/corpus_$$n \
	    || { echo "replay_$$n FAILED under memcheck"; exit 1; }; done
	@echo "== bug reproducers tests/fuzz/repro_*.c (plain, then memcheck)"
	@for b in $(REPRO_BINS); do n=$$(basename $$b); \
	  $$b > $$b.log 2>&1 || { cat $$b.log; echo "$$n FAILED: the bug is back"; exit 1; }; \
	  $(VALGRIND) $$b > $$b.log 2>&1 || { cat $$b.log; echo "$$n FAILED under memcheck"; exit 1; }; \
	  echo "  still fixed: $$n"; done
	$(REL_T1)

# ---------------------------------------------------------------------------
# Must-be-caught programs. rel_*.c are ours: each is run under memcheck (built
# against the test library) and under ASan (built against the ASan library);
# every other tests/wrong/*.c is run under ASan here too (its owner's fragment
# runs it under memcheck). A program passes only if the tool reports an error.
# rel_*_lib.c programs are caught by the library itself (its error message), not
# by a tool; they run under both tools and must stay clean there.
# The one must-be-caught runner, shared with mk/heap.mk, mk/linear.mk and
# mk/binned.mk (make expands it inside recipes, so the order of the fragments
# does not matter). WRONG_MC_LINK: the link of a must-be-caught program against
# the test library (memcheck client requests on), with the house warnings, $(1)
# extra flags. WRONG_MC_CHECK: the control builds $(2) (each program with the
# bug left out, -DHH_WRONG_CONTROL) must run clean (WRONG_MC_CLEAN), then the
# programs $(1) must be caught with a report matching the grep pattern $(3)
# (WRONG_MC_MUST_CATCH) -- a catch counts only where its control is clean.
# WRONG_MC_MUST_CATCH: runs each program of $(1) under memcheck and passes only
# if memcheck exits 99 with a report matching the grep pattern $(2).
# WRONG_MC_CLEAN: runs each program of $(1) under memcheck and passes only if
# it runs clean, leaks included.
WRONG_MC_LINK = $(CC) $(CPPFLAGS) $(WARN) -g -O0 -pthread $(1) -o $@ $< $(BUILD)/test/libhheap-test.a $(LDLIBS)
define WRONG_MC_MUST_CATCH
	@for b in $(1); do n=$$(basename $$b | sed 's/^mc_//'); \
	  valgrind -q --error-exitcode=99 $$b >/dev/null 2>$$b.log; rc=$$?; \
	  if [ $$rc -eq 99 ] && grep -q "$(2)" $$b.log; then echo "  memcheck caught: $$n"; \
	  else echo "  NOT CAUGHT by memcheck: $$n (rc=$$rc)"; cat $$b.log; exit 1; fi; done
endef
define WRONG_MC_CLEAN
	@for b in $(1); do n=$$(basename $$b | sed 's/^ctl_//'); \
	  valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible $$b >/dev/null 2>$$b.log \
	    || { echo "  control build of $$n not clean"; cat $$b.log; exit 1; }; done
endef
define WRONG_MC_CHECK
	$(call WRONG_MC_CLEAN,$(2))
	$(call WRONG_MC_MUST_CATCH,$(1),$(3))
endef
REL_WRONG_MC   := $(filter-out %_lib.c,$(wildcard tests/wrong/rel_*.c))
REL_WRONG_LIB  := $(wildcard tests/wrong/rel_*_lib.c)
REL_WRONG_ALL   = $(wildcard tests/wrong/*.c)
REL_WRONG_DIR  := $(BUILD)/test/wrong-rel

$(REL_WRONG_DIR)/mc_%: tests/wrong/%.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(call WRONG_MC_LINK)

$(REL_WRONG_DIR)/ctl_%: tests/wrong/%.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(call WRONG_MC_LINK,-DHH_WRONG_CONTROL=1)

$(REL_WRONG_DIR)/asan_%: tests/wrong/%.c
	@mkdir -p $(dir $@)
	$(Q)$(REL_CC) $(CPPFLAGS) -std=c11 -g -O0 -pthread $(ASAN_SAN) -o $@ $< $(ASAN_DIR)/libhheap.a $(REL_ASAN_LINK) $(LDLIBS)

.PHONY: check-wrong-rel
check-wrong-rel:
	$(REL_T0)
	@$(MAKE) --no-print-directory rel-asan-build
	@$(MAKE) --no-print-directory -s $(patsubst tests/wrong/%.c,$(REL_WRONG_DIR)/mc_%,$(REL_WRONG_MC) $(REL_WRONG_LIB)) \
	  $(patsubst tests/wrong/%.c,$(REL_WRONG_DIR)/ctl_%,$(REL_WRONG_MC)) \
	  $(patsubst tests/wrong/%.c,$(REL_WRONG_DIR)/asan_%,$(REL_WRONG_ALL))
	@echo "== must-be-caught programs: rel_* under memcheck, all under ASan"
	$(call WRONG_MC_CHECK,$(patsubst tests/wrong/%.c,$(REL_WRONG_DIR)/mc_%,$(REL_WRONG_MC)),$(patsubst tests/wrong/%.c,$(REL_WRONG_DIR)/ctl_%,$(REL_WRONG_MC)),Invalid read\|Invalid write)
	@for s in $(REL_WRONG_LIB); do n=$$(basename $$s .c); b=$(REL_WRONG_DIR)/mc_$$n; \
	  valgrind -q --error-exitcode=99 $$b >/dev/null 2>$$b.log; rc=$$?; \
	  if [ $$rc -eq 3 ] && grep -q "^hheap: " $$b.log; then echo "  library caught (memcheck clean): $$n"; \
	  else echo "  NOT CAUGHT by the library: $$n (rc=$$rc)"; cat $$b.log; exit 1; fi; done
	@for s in $(REL_WRONG_ALL); do n=$$(basename $$s .c); b=$(REL_WRONG_DIR)/asan_$$n; \
	  ASAN_OPTIONS=detect_leaks=0 $$b >/dev/null 2>$$b.log; rc=$$?; \
	  case $$n in *_lib) \
	    if [ $$rc -eq 3 ] && grep -q "^hheap: " $$b.log && ! grep -q "ERROR: AddressSanitizer" $$b.log; then \
	      echo "  library caught (ASan clean): $$n"; else echo "  NOT CAUGHT / ASan report: $$n (rc=$$rc)"; cat $$b.log; exit 1; fi;; \
	  *) if [ $$rc -ne 0 ] && grep -q "ERROR: AddressSanitizer" $$b.log; then echo "  ASan caught: $$n ($$(grep -o 'AddressSanitizer: [a-z-]*' $$b.log | head -1))"; \
	    else echo "  NOT CAUGHT by ASan: $$n (rc=$$rc)"; cat $$b.log; exit 1; fi;; esac; done
	$(REL_T1)

# ---------------------------------------------------------------------------
# Soak (not in CI).
$(BUILD)/test/soak: tests/soak.c $(REL_HEADERS) $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O2 -g -pthread -o $@ tests/soak.c $(BUILD)/libhheap.a $(LDLIBS)

.PHONY: soak
soak: $(BUILD)/test/soak
	@$(BUILD)/test/soak $(SOAK_SECONDS)
