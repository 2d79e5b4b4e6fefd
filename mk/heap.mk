# mk/heap.mk -- must-be-caught programs of the relocatable heap (tests/wrong/heap_*.c).
# Each is built against the test library (memcheck client requests on) and run
# under memcheck; the target passes only if memcheck reports an error.

WRONG_HEAP_SRCS := $(wildcard tests/wrong/heap_*.c)
WRONG_HEAP_BINS := $(WRONG_HEAP_SRCS:tests/wrong/%.c=$(BUILD)/wrong/%)
CHECK_EXTRA += check-wrong-heap

$(BUILD)/wrong/heap_%: tests/wrong/heap_%.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) -std=c11 -g -O0 -pthread -o $@ $< $(BUILD)/test/libhheap-test.a $(LDLIBS)

.PHONY: check-wrong-heap
check-wrong-heap: $(WRONG_HEAP_BINS)
	@echo "== must-be-caught programs (heap) under memcheck"
	@for b in $(WRONG_HEAP_BINS); do \
	  valgrind -q --error-exitcode=99 $$b >/dev/null 2>$$b.log; rc=$$?; \
	  if [ $$rc -eq 99 ] && grep -q "Invalid read" $$b.log; then echo "  caught: $$(basename $$b)"; \
	  else echo "  NOT CAUGHT: $$(basename $$b) (rc=$$rc)"; cat $$b.log; exit 1; fi; done
