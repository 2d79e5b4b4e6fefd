# mk/linear.mk -- linear allocators: the must-be-caught program and the benchmark.
# (The linear suite runs under ASan and TSan with every other suite: check-asan,
# check-tsan in mk/reliability.mk; check-wrong-rel runs the must-be-caught
# program under ASan too.)
#
#   make check-wrong-linear   tests/wrong/linear_read_after_pop.c must be reported by
#                             memcheck (exit 99, "Invalid read"); its control build
#                             (the stale read left out) must run clean. Part of `make check`.
#   make bench-linear         bench/bench_linear.c at -O2 against build/libhheap.a

CHECK_EXTRA += check-wrong-linear

LINEAR_WRONG     := $(BUILD)/test/wrong/linear_read_after_pop
LINEAR_WRONG_CTL := $(BUILD)/test/wrong/ctl_linear_read_after_pop

$(LINEAR_WRONG): tests/wrong/linear_read_after_pop.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(call WRONG_MC_LINK)

$(LINEAR_WRONG_CTL): tests/wrong/linear_read_after_pop.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(call WRONG_MC_LINK,-DHH_WRONG_CONTROL=1)

# The link and the runner (WRONG_MC_LINK, WRONG_MC_CHECK) are mk/reliability.mk's.
.PHONY: check-wrong-linear bench-linear
check-wrong-linear: $(LINEAR_WRONG) $(LINEAR_WRONG_CTL)
	@echo "== linear: must-be-caught program under memcheck"
	$(call WRONG_MC_CHECK,$(LINEAR_WRONG),$(LINEAR_WRONG_CTL),Invalid read)

$(BUILD)/bench/bench_linear: bench/bench_linear.c bench/bench_util.h $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O2 -g -pthread -o $@ $< $(BUILD)/libhheap.a $(LDLIBS)

bench-linear: $(BUILD)/bench/bench_linear
	@$(BUILD)/bench/bench_linear
