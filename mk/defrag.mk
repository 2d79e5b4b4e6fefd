# mk/defrag.mk -- the incremental defragmentation service's benchmark.
#
#   make bench-defrag     bench/bench_defrag.c at -O2 against build/libhheap.a; prints
#                         BENCH lines (bench/bench_util.h). QUICK=1: a short run.
#                         Standalone: build/bench/bench_defrag

$(BUILD)/bench/bench_defrag: bench/bench_defrag.c bench/bench_util.h $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O2 -g -pthread -o $@ $< $(BUILD)/libhheap.a $(LDLIBS)

.PHONY: bench-defrag
bench-defrag: $(BUILD)/bench/bench_defrag
	@$(BUILD)/bench/bench_defrag
