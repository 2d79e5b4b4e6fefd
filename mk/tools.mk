# mk/tools.mk -- the command lines of the tools (hh-viz, hh-demo, hh-replay),
# which share tools/hh_cli.h (getopt_long; --help, --version, --opt=value,
# errors naming the option, the reason and the accepted range).
#
#   make check-cli    tests/cli/check_cli.sh: every convention and error message of
#                     the three tools, on a 20-frame dump (part of `make check`)

CHECK_EXTRA += check-cli

.PHONY: check-cli
check-cli: $(BUILD)/hh-viz $(BUILD)/hh-demo $(BUILD)/hh-replay
	@echo "== tools: command lines of hh-viz, hh-demo, hh-replay"
	@sh tests/cli/check_cli.sh $(BUILD)
