# mk/linear.mk -- linear allocators: the must-be-caught program and the benchmark.
#
#   make check-wrong-linear   tests/wrong/linear_read_after_pop.c must be reported by
#                             memcheck (exit 99, "Invalid read"); its control build
#                             (the stale read left out) must run clean. Part of `make check`.
#   make bench-linear         bench/bench_linear.c at -O2 against build/libhheap.a

CHECK_EXTRA += check-wrong-linear

LINEAR_WRONG     := $(BUILD)/test/wrong/linear_read_after_pop
LINEAR_WRONG_CTL := $(BUILD)/test/wrong/linear_read_after_pop_control

$(LINEAR_WRONG): tests/wrong/linear_read_after_pop.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O0 -g -pthread -o $@ $< $(BUILD)/test/libhheap-test.a $(LDLIBS)

$(LINEAR_WRONG_CTL): tests/wrong/linear_read_after_pop.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O0 -g -pthread -DHH_WRONG_CONTROL=1 -o $@ $< $(BUILD)/test/libhheap-test.a $(LDLIBS)

.PHONY: check-wrong-linear bench-linear
check-wrong-linear: $(LINEAR_WRONG) $(LINEAR_WRONG_CTL)
	@echo "== linear: must-be-caught program under memcheck"
	@out=$$($(VALGRIND) $(LINEAR_WRONG_CTL) 2>&1); rc=$$?; \
	  if [ $$rc -ne 0 ]; then echo "  control run not clean (rc=$$rc)"; echo "$$out" | tail -20; exit 1; fi
	@out=$$($(VALGRIND) $(LINEAR_WRONG) 2>&1); rc=$$?; \
	  if [ $$rc -eq 99 ] && echo "$$out" | grep -q "Invalid read"; then echo "  caught: $(LINEAR_WRONG)"; \
	  else echo "  NOT CAUGHT (rc=$$rc): $(LINEAR_WRONG)"; echo "$$out" | tail -20; exit 1; fi

$(BUILD)/bench/bench_linear: bench/bench_linear.c bench/bench_util.h $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O2 -g -pthread -o $@ $< $(BUILD)/libhheap.a $(LDLIBS)

bench-linear: $(BUILD)/bench/bench_linear
	@$(BUILD)/bench/bench_linear

# ---------------------------------------------------------------------------
# Sanitizer runs of the linear suite (not part of `make check`; the lead's
# asan/tsan targets may supersede them). ASan poisoning via HH_TRACK_ASAN=1:
# the must-be-caught program must report use-after-poison.
LINEAR_SAN_DIR  := $(BUILD)/san-linear
# test_util.c uses the heap API, so the whole library is built in.
LINEAR_SAN_SRCS  = $(filter-out $(LIB_EXCLUDE),$(sort $(wildcard src/*/*.c))) \
                   tests/check_main.c tests/test_util.c tests/check_linear.c

.PHONY: check-asan-linear check-tsan-linear
check-asan-linear:
	@mkdir -p $(LINEAR_SAN_DIR) && echo 'HH_SUITE(linear)' > $(LINEAR_SAN_DIR)/suites.h
	$(Q)$(CC) $(CPPFLAGS) -I$(LINEAR_SAN_DIR) $(WARN) -O1 -g -pthread -DHH_DEBUG=2 -DHH_TESTING=1 -DHH_TRACK_ASAN=1 \
	  -fsanitize=address,undefined -fno-omit-frame-pointer -o $(LINEAR_SAN_DIR)/asan-tests \
	  $(LINEAR_SAN_SRCS) $(CHECK_PC) $(LDLIBS)
	@echo "== linear suite under ASan+UBSan" && $(LINEAR_SAN_DIR)/asan-tests
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O0 -g -pthread -DHH_TRACK_ASAN=1 -fsanitize=address -o $(LINEAR_SAN_DIR)/wrong-asan \
	  tests/wrong/linear_read_after_pop.c $(wildcard src/common/*.c src/linear/*.c) $(LDLIBS)
	@out=$$($(LINEAR_SAN_DIR)/wrong-asan 2>&1); if echo "$$out" | grep -q "use-after-poison"; then \
	  echo "  caught by ASan: linear_read_after_pop"; else echo "  NOT CAUGHT by ASan"; echo "$$out" | tail; exit 1; fi

check-tsan-linear:
	@mkdir -p $(LINEAR_SAN_DIR) && echo 'HH_SUITE(linear)' > $(LINEAR_SAN_DIR)/suites.h
	$(Q)$(CC) $(CPPFLAGS) -I$(LINEAR_SAN_DIR) $(WARN) -O1 -g -pthread -DHH_DEBUG=2 -DHH_TESTING=1 -fsanitize=thread \
	  -o $(LINEAR_SAN_DIR)/tsan-tests $(LINEAR_SAN_SRCS) $(CHECK_PC) $(LDLIBS)
	@echo "== linear suite under TSan" && CK_FORK=no $(LINEAR_SAN_DIR)/tsan-tests
