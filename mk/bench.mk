# mk/bench.mk -- the benchmark harness, instruction counts, trace replay.
#
#   make bench              builds every bench/bench_*.c at -O2, runs the handle-heap
#                           cases, every other bench-* target of mk/*.mk and every
#                           bench program without such a target, then the callgrind
#                           instruction counts; prints one table per region and
#                           writes out/bench/results.json. QUICK=1: a smoke run
#                           (writes out/bench/results-quick.json).
#   make bench-instr        instructions per fast-path call under callgrind
#   make bench-compare OLD=a.json [NEW=b.json]   flags regressions beyond the spread
#   make check-bench-smoke  builds everything and runs `make bench QUICK=1`
#   (hh-replay, which `make bench` runs on recorded traces, is built by mk/tools.mk)
#
# A bench program is bench/bench_<name>.c; the generic rule below builds it as
# build/bench/bench_<name> against build/libhheap.a (a fragment may give its own
# rule and a bench-<name> target instead: bench/run.py then runs that target).

DEPS_PKGS    += libmimalloc-dev libjemalloc-dev libgoogle-perftools-dev valgrind python3
CLEAN_EXTRA  += out/bench

BENCH_CFLAGS := $(WARN) -O2 -g -pthread
BENCH_OUT    := out/bench
QUICK        ?=
BENCH_JSON   := $(BENCH_OUT)/results$(if $(filter-out 0,$(QUICK)),-quick).json
BENCH_HDRS   := bench/bench_util.h tests/test_rng.h $(wildcard include/*.h include/hheap/*.h)

$(BUILD)/bench/bench_%: bench/bench_%.c $(BENCH_HDRS) $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC bench $<')
	$(Q)$(CC) $(CPPFLAGS) $(BENCH_CFLAGS) -o $@ $< $(BUILD)/libhheap.a $(LDLIBS)

.PHONY: bench bench-instr bench-compare check-bench-smoke

# The runner builds (make build/bench/bench_<name>) and runs every other program
# itself, one at a time, so that a program that does not build is reported
# without stopping the others.
bench: $(BUILD)/libhheap.a $(BUILD)/bench/bench_heap $(BUILD)/bench/bench_instr $(BUILD)/hh-replay
	@mkdir -p $(BENCH_OUT)
	@QUICK=$(QUICK) MAKE="$(MAKE)" python3 bench/run.py --build $(BUILD) --out $(BENCH_JSON)

bench-instr: $(BUILD)/bench/bench_instr
	@mkdir -p $(BENCH_OUT)
	@python3 bench/run.py --build $(BUILD) --instr-only

bench-compare:
	@test -n "$(OLD)" || { echo "usage: make bench-compare OLD=old.json [NEW=new.json]"; exit 2; }
	@python3 bench/compare.py "$(OLD)" "$(or $(NEW),$(BENCH_OUT)/results.json)"

check-bench-smoke:
	@echo "== bench smoke run (QUICK=1)"
	@$(MAKE) --no-print-directory bench QUICK=1
