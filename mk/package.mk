# mk/package.mk -- what a user of the library installs and links: install,
# uninstall, pkg-config, CMake (add_subdirectory and find_package).
#
#   make check-install   install-lib into a fresh build dir and prefix builds no
#                        tool (no cairo needed); install (custom LIBDIR) then
#                        uninstall leaves nothing behind; a program builds from the
#                        installed hheap.pc (part of `make check`)
#   make check-cmake     tests/cmake (a C and a C++ consumer) built with CMake
#                        against add_subdirectory(<repo>), against find_package(hheap)
#                        on a `make install-lib` prefix, and on the prefix that
#                        CMake's own build of the repository installs, with the
#                        tools (part of `make check`)

CHECK_EXTRA += check-install check-cmake
DEPS_PKGS   += cmake pkg-config
CLEAN_EXTRA +=

PKG_TMP := $(BUILD)/package

.PHONY: check-install check-cmake
check-install: all
	@echo "== install-lib without the tools, install + uninstall with LIBDIR, pkg-config"
	@rm -rf $(PKG_TMP)/il $(PKG_TMP)/inst && mkdir -p $(PKG_TMP)
	@$(MAKE) -n --no-print-directory install-lib BUILD=$(PKG_TMP)/il/build PREFIX=$(CURDIR)/$(PKG_TMP)/il/prefix \
	    > $(PKG_TMP)/il-dry.log 2>&1 || { cat $(PKG_TMP)/il-dry.log; echo "check-install: make -n install-lib failed"; exit 1; }
	@grep -q 'libhheap\.a' $(PKG_TMP)/il-dry.log || { echo "check-install: make -n install-lib shows no library"; exit 1; }
	@! grep -E 'cairo|hh-viz|hh-demo|hh-replay' $(PKG_TMP)/il-dry.log || { echo "check-install: install-lib would build a tool"; exit 1; }
	@$(MAKE) --no-print-directory install-lib BUILD=$(PKG_TMP)/il/build PREFIX=$(CURDIR)/$(PKG_TMP)/il/prefix > $(PKG_TMP)/il.log 2>&1 \
	  || { cat $(PKG_TMP)/il.log; echo "check-install: install-lib failed"; exit 1; }
	@[ ! -d $(PKG_TMP)/il/prefix/bin ] && [ -f $(PKG_TMP)/il/prefix/lib/cmake/hheap/hheapConfig.cmake ] \
	  && [ -f $(PKG_TMP)/il/prefix/include/hheap.hpp ] && [ -f $(PKG_TMP)/il/prefix/lib/libhheap_malloc.so ] \
	  || { find $(PKG_TMP)/il/prefix; echo "check-install: install-lib wrote the wrong set of files"; exit 1; }
	@p=$(CURDIR)/$(PKG_TMP)/inst; $(MAKE) --no-print-directory install PREFIX=$$p/usr LIBDIR=$$p/usr/lib64 > $(PKG_TMP)/inst.log 2>&1 \
	  || { cat $(PKG_TMP)/inst.log; echo "check-install: install failed"; exit 1; }; \
	  for f in usr/bin/hh-viz usr/bin/hh-demo usr/bin/hh-replay usr/lib64/libhheap.a usr/lib64/libhheap.so.0 \
	           usr/lib64/pkgconfig/hheap.pc usr/lib64/cmake/hheap/hheapConfigVersion.cmake usr/include/hheap/heap.h; do \
	    [ -e $$p/$$f ] || { echo "check-install: $$f not installed"; exit 1; }; done; \
	  [ ! -e $$p/usr/lib ] || { echo "check-install: LIBDIR ignored (usr/lib written)"; exit 1; }; \
	  printf '#include <hheap.h>\nint main(void) { return hh_version() == HH_VERSION ? 0 : 1; }\n' > $(PKG_TMP)/pc.c; \
	  $(CC) -std=c11 -o $(PKG_TMP)/pc $(PKG_TMP)/pc.c $$(PKG_CONFIG_PATH=$$p/usr/lib64/pkgconfig pkg-config --cflags --libs hheap) \
	    && $(PKG_TMP)/pc || { echo "check-install: a program built from hheap.pc does not run"; exit 1; }; \
	  $(MAKE) --no-print-directory uninstall PREFIX=$$p/usr LIBDIR=$$p/usr/lib64 > $(PKG_TMP)/uninst.log 2>&1 \
	    || { cat $(PKG_TMP)/uninst.log; echo "check-install: uninstall failed"; exit 1; }; \
	  left=$$(find $$p -type f -o -type l); [ -z "$$left" ] || { echo "$$left"; echo "check-install: uninstall left files behind"; exit 1; }
	@echo "  install-lib: no tool built; install (LIBDIR=.../lib64) + uninstall: nothing left; pkg-config program runs"

CMAKE_T := $(PKG_TMP)/cmake
check-cmake: lib
	@echo "== CMake: a consumer via add_subdirectory, find_package on make's and CMake's installs"
	@rm -rf $(CMAKE_T) && mkdir -p $(CMAKE_T)
	@run() { log=$(CMAKE_T)/$$1.log; shift; "$$@" >>$$log 2>&1 || { cat $$log; echo "check-cmake: failed: $$*"; exit 1; }; }; \
	  consumer() { run $$1 cmake -S tests/cmake -B $(CMAKE_T)/$$1 $$2 && run $$1 cmake --build $(CMAKE_T)/$$1 -j2 \
	    && run $$1 $(CMAKE_T)/$$1/consumer_c && run $$1 $(CMAKE_T)/$$1/consumer_cpp; }; \
	  consumer sub -DHHEAP_SOURCE_DIR=$(CURDIR) && echo "  add_subdirectory: C and C++ consumers built and ran" && \
	  run make-prefix $(MAKE) --no-print-directory install-lib PREFIX=$(CURDIR)/$(CMAKE_T)/make-prefix && \
	  consumer fp-make -DCMAKE_PREFIX_PATH=$(CURDIR)/$(CMAKE_T)/make-prefix && \
	  grep -q "hheap $(VERSION) from $(CURDIR)/$(CMAKE_T)/make-prefix" $(CMAKE_T)/fp-make.log && \
	  echo "  find_package on make install-lib's prefix: built and ran" && \
	  run top cmake -S . -B $(CMAKE_T)/top && run top cmake --build $(CMAKE_T)/top -j2 && \
	  run top cmake --install $(CMAKE_T)/top --prefix $(CURDIR)/$(CMAKE_T)/cmake-prefix && \
	  { [ -x $(CMAKE_T)/cmake-prefix/bin/hh-replay ] || { echo "check-cmake: CMake did not install hh-replay"; exit 1; }; } && \
	  { ! pkg-config --exists cairo || [ -x $(CMAKE_T)/cmake-prefix/bin/hh-viz ] || { echo "check-cmake: cairo found but hh-viz not built"; exit 1; }; } && \
	  consumer fp-cmake -DCMAKE_PREFIX_PATH=$(CURDIR)/$(CMAKE_T)/cmake-prefix && \
	  grep -q "hheap $(VERSION) from $(CURDIR)/$(CMAKE_T)/cmake-prefix" $(CMAKE_T)/fp-cmake.log && \
	  echo "  find_package on CMake's install (library + tools): built and ran" && \
	  for v in 0.2 1.0; do \
	    if cmake -S tests/cmake -B $(CMAKE_T)/want-$$v -DCMAKE_PREFIX_PATH=$(CURDIR)/$(CMAKE_T)/make-prefix -DHHEAP_WANT=$$v \
	         > $(CMAKE_T)/want-$$v.log 2>&1 || ! grep -q "hheapConfig.cmake, version: $(VERSION)" $(CMAKE_T)/want-$$v.log; then \
	      cat $(CMAKE_T)/want-$$v.log; echo "check-cmake: find_package(hheap $$v) accepted $(VERSION)"; exit 1; fi; done && \
	  echo "  find_package(hheap 0.2) and (hheap 1.0) refuse $(VERSION)"
