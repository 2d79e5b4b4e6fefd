# mk/heap.mk -- must-be-caught programs of the relocatable heap (tests/wrong/heap_*.c).
# Each is built against the test library (memcheck client requests on) and run
# under memcheck; the target passes only if memcheck reports an error
# (WRONG_MC_LINK and WRONG_MC_MUST_CATCH, in mk/reliability.mk).

WRONG_HEAP_SRCS := $(wildcard tests/wrong/heap_*.c)
WRONG_HEAP_BINS := $(WRONG_HEAP_SRCS:tests/wrong/%.c=$(BUILD)/wrong/%)
CHECK_EXTRA += check-wrong-heap

$(BUILD)/wrong/heap_%: tests/wrong/heap_%.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(call WRONG_MC_LINK)

.PHONY: check-wrong-heap
check-wrong-heap: $(WRONG_HEAP_BINS)
	@echo "== must-be-caught programs (heap) under memcheck"
	$(call WRONG_MC_MUST_CATCH,$(WRONG_HEAP_BINS),Invalid read)
