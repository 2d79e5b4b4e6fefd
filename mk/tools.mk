# mk/tools.mk -- hh-replay, and the command lines of the tools (hh-viz, hh-demo,
# hh-replay), which share tools/hh_cli.h (getopt_long; --help, --version,
# --opt=value, errors naming the option, the reason and the accepted range).
# hh-viz and hh-demo are built by mk/viz.mk (they need cairo).
#
#   make build/hh-replay  tools/hh_replay.c: replays a trace written by hh_trace
#                     (include/hheap/trace.h) on hheap and on glibc (part of `make`;
#                     `make bench` runs it on recorded traces: it prints BENCH lines,
#                     hence bench/bench_util.h)
#   make check-cli    tests/cli/check_cli.sh: every convention and error message of
#                     the three tools, on a 20-frame dump (part of `make check`)

CHECK_EXTRA  += check-cli
ALL_EXTRA    += $(BUILD)/hh-replay
INSTALL_BINS += $(BUILD)/hh-replay

$(BUILD)/hh-replay: tools/hh_replay.c tools/hh_cli.h bench/bench_util.h $(wildcard include/*.h include/hheap/*.h) $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC      $<')
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O2 -g -pthread -Itools -Ibench -o $@ $< $(BUILD)/libhheap.a $(LDLIBS)

.PHONY: check-cli
check-cli: $(BUILD)/hh-viz $(BUILD)/hh-demo $(BUILD)/hh-replay
	@echo "== tools: command lines of hh-viz, hh-demo, hh-replay"
	@sh tests/cli/check_cli.sh $(BUILD)
