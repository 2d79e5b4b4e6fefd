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

# Footprint against non-moving allocators on game traces (bench/bench_footprint.c):
# glibc always; mimalloc, jemalloc, tcmalloc when their packages are installed.
$(BUILD)/bench/bench_footprint: bench/bench_footprint.c bench/bench_util.h $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O2 -g -pthread -o $@ $< $(BUILD)/libhheap.a $(LDLIBS)

.PHONY: bench-footprint
bench-footprint: $(BUILD)/bench/bench_footprint
	@peer() { dpkg -L $$1 2>/dev/null | grep -E "/$$2[^/]*\.so(\.[0-9]+)*$$" | head -1; }; \
	 $(BUILD)/bench/bench_footprint \
	   mimalloc=$$(peer libmimalloc2.0 libmimalloc) \
	   jemalloc=$$(peer libjemalloc2 libjemalloc) \
	   tcmalloc=$$(peer libtcmalloc-minimal4 libtcmalloc_minimal)
