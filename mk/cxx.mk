# mk/cxx.mk -- the library from C++: every public header in one C++ translation
# unit, and the tests of include/hheap.hpp (the RAII / typed-handle layer).
#
#   make check-cxx    builds tests/cxx/cxx_headers.cpp and tests/cxx/cxx_hpp.cpp with
#                     g++ and clang++ at -std=c++11, 14, 17 and 20 (-Wall -Wextra
#                     -Wpedantic -Werror) against build/libhheap.a and runs each
#                     (part of `make check`; the headers alone: make check-headers)

CHECK_EXTRA += check-cxx
DEPS_PKGS   += g++ clang

CXX_TESTS  := cxx_headers cxx_hpp
CXX_WARN   := -Wall -Wextra -Wpedantic -Werror
CXX_HDRS   := include/hheap.hpp include/hheap.h $(wildcard include/hheap/*.h) tests/cxx/cxx_check.h

# build/test/cxx/<test>-<compiler>-<std>
CXX_BINS := $(foreach t,$(CXX_TESTS),$(foreach c,g++ clang++,$(foreach s,$(CXX_STDS),$(BUILD)/test/cxx/$(t)-$(c)-$(s))))

define CXX_RULE
$(BUILD)/test/cxx/$(1)-$(2)-$(3): tests/cxx/$(1).cpp $$(CXX_HDRS) $$(BUILD)/libhheap.a
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo '  CXX     $$< ($(2) -std=$(3))')
	$$(Q)$(2) -std=$(3) $$(CXX_WARN) -O1 -g -Iinclude -pthread -o $$@ $$< $$(BUILD)/libhheap.a $$(LDLIBS)
endef
$(foreach t,$(CXX_TESTS),$(foreach c,g++ clang++,$(foreach s,$(CXX_STDS),$(eval $(call CXX_RULE,$(t),$(c),$(s))))))

.PHONY: check-cxx
check-cxx: $(CXX_BINS)
	@echo "== C++: every header in one translation unit, and hheap.hpp's tests (g++, clang++; $(CXX_STDS))"
	@for b in $(CXX_BINS); do $$b > $$b.log 2>&1 || { cat $$b.log; echo "check-cxx: $$b failed"; exit 1; }; done
	@for t in $(CXX_TESTS); do tail -n1 $(BUILD)/test/cxx/$$t-clang++-c++20.log; done
