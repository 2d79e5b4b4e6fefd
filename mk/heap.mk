# mk/heap.mk -- must-be-caught programs of the relocatable heap (tests/wrong/heap_*.c).
# Each is built against the test library (memcheck client requests on) and run
# under memcheck; the target passes only if memcheck reports an invalid read,
# and only if the program's control build (-DHH_WRONG_CONTROL: the pointer
# taken again after the step) runs clean, which shows that the report comes
# from the stale read (WRONG_MC_LINK and WRONG_MC_CHECK, in mk/reliability.mk).

WRONG_HEAP_SRCS := $(wildcard tests/wrong/heap_*.c)
WRONG_HEAP_BINS := $(WRONG_HEAP_SRCS:tests/wrong/%.c=$(BUILD)/wrong/%)
WRONG_HEAP_CTLS := $(WRONG_HEAP_SRCS:tests/wrong/%.c=$(BUILD)/wrong/ctl_%)
CHECK_EXTRA += check-wrong-heap

$(BUILD)/wrong/heap_%: tests/wrong/heap_%.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(call WRONG_MC_LINK)

$(BUILD)/wrong/ctl_heap_%: tests/wrong/heap_%.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(call WRONG_MC_LINK,-DHH_WRONG_CONTROL=1)

.PHONY: check-wrong-heap
check-wrong-heap: $(WRONG_HEAP_BINS) $(WRONG_HEAP_CTLS)
	@echo "== must-be-caught programs (heap) under memcheck"
	$(call WRONG_MC_CHECK,$(WRONG_HEAP_BINS),$(WRONG_HEAP_CTLS),Invalid read)
