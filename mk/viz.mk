# mk/viz.mk -- heap-map pictures: hh-viz, hh-demo, the demo target and its checks.
#
#   make build/hh-viz build/hh-demo   the tools (part of `make`)
#   make demo            installs what is missing (make deps), runs hh-demo with its
#                        defaults and writes everything under out/demo/:
#                        demo.hhmap, frames/frame_NNNNNN.png, timeline.png, plot.png, index.html
#   make check-demo      (part of `make check`) the render test (known colours at known
#                        pixels), a 60-frame demo with every output verified, hh-viz
#                        options and damaged dumps, and hh-demo + hh-viz under memcheck
#   make check-flipbook  (part of `make check`) index.html in headless Chromium: frames
#                        shown by URL and by the arrow keys, no console error, two
#                        screenshots (chromium: installed by make deps)
#
# cairo is linked only into the tools, never into libhheap.

ALL_EXTRA    += $(BUILD)/hh-viz $(BUILD)/hh-demo
INSTALL_BINS += $(BUILD)/hh-viz $(BUILD)/hh-demo
CHECK_EXTRA  += check-demo check-flipbook
DEPS_PKGS    += libcairo2-dev libfontconfig-dev libpng-dev zlib1g-dev fonts-dejavu-core chromium python3
CLEAN_EXTRA  += out/demo out/check-demo out/check-demo.log out/check-flipbook

VIZ_CAIRO   = $(shell pkg-config --libs cairo fontconfig libpng zlib 2>/dev/null || echo -lcairo -lfontconfig -lpng -lz)
VIZ_CFLAGS  = $(WARN) $(CFLAGS) -pthread $(shell pkg-config --cflags cairo fontconfig libpng zlib 2>/dev/null)
VIZ_COMMON  := viz/viz_paint.c viz/viz_frame.c viz/viz_panel.c viz/viz_timeline.c viz/viz_plot.c \
               viz/viz_render.c viz/viz_html.c viz/viz_png.c
VIZ_HEADERS := viz/viz_draw.h viz/viz_draw_internal.h viz/viz_render.h $(wildcard include/hheap/*.h) include/hheap.h tools/hh_cli.h

$(BUILD)/hh-viz: viz/hh_viz.c $(VIZ_COMMON) $(VIZ_HEADERS) $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(CPPFLAGS) $(VIZ_CFLAGS) -Itools -o $@ viz/hh_viz.c $(VIZ_COMMON) $(BUILD)/libhheap.a $(VIZ_CAIRO) $(LDLIBS)

$(BUILD)/hh-demo: viz/hh_demo.c $(VIZ_COMMON) $(VIZ_HEADERS) $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(CPPFLAGS) $(VIZ_CFLAGS) -Itools -o $@ viz/hh_demo.c $(VIZ_COMMON) $(BUILD)/libhheap.a $(VIZ_CAIRO) $(LDLIBS)

# The render test: draws a small dump and checks sizes and colours at known pixels.
$(BUILD)/test/viz_render_test: tests/viz_render_test.c $(VIZ_COMMON) $(VIZ_HEADERS) $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(VIZ_CFLAGS) -Iviz -Werror -o $@ tests/viz_render_test.c $(VIZ_COMMON) $(BUILD)/libhheap.a $(VIZ_CAIRO) $(LDLIBS)

.PHONY: demo check-demo check-flipbook
demo: deps
	@$(MAKE) --no-print-directory $(BUILD)/hh-demo $(BUILD)/hh-viz   # after deps: cairo must be installed first
	@rm -rf out/demo/frames
	$(BUILD)/hh-demo --out out/demo

# CI-sized: 60 frames on a small heap, every output verified.
check-demo: $(BUILD)/hh-demo $(BUILD)/hh-viz $(BUILD)/test/viz_render_test
	@echo "== viz: render test, short demo, hh-viz on its dump and on damaged dumps"
	@$(BUILD)/test/viz_render_test
	@rm -rf out/check-demo && mkdir -p out && $(BUILD)/hh-demo --frames 60 --heap-mib 2 --moves 8 --seed 7 --outro 15 --out out/check-demo --quiet > out/check-demo.log 2>&1 \
	  || { cat out/check-demo.log; echo "check-demo: hh-demo failed"; exit 1; }
	@for f in out/check-demo/demo.hhmap out/check-demo/timeline.png out/check-demo/plot.png out/check-demo/index.html \
	          out/check-demo/frames/frame_000000.png out/check-demo/frames/frame_000059.png; do \
	  [ -s $$f ] || { echo "check-demo: missing $$f"; exit 1; }; done
	@n=$$(ls out/check-demo/frames | wc -l); [ $$n -eq 60 ] || { echo "check-demo: $$n frame pictures, want 60"; exit 1; }
	@grep -q 'frames/frame_' out/check-demo/index.html && grep -c '^\[' out/check-demo/index.html | grep -qx 60 \
	  || { echo "check-demo: index.html lacks its 60 frames"; exit 1; }
	@grep -q "defrag moves" out/check-demo.log || { cat out/check-demo.log; echo "check-demo: no summary table"; exit 1; }
	@grep -Eq "final holes +\| +0 \(0 B\)" out/check-demo.log \
	  || { cat out/check-demo.log; echo "check-demo: the heap is not compact after the level's end (15 steps of 8 moves)"; exit 1; }
	@$(BUILD)/hh-viz --quiet --no-progress --every 10 --frames 10:40 --width 640 --out out/check-demo/sub out/check-demo/demo.hhmap
	@n=$$(ls out/check-demo/sub/frames | wc -l); [ $$n -eq 4 ] || { echo "check-demo: --every 10 --frames 10:40 drew $$n, want 4"; exit 1; }
	@head -c 5000 out/check-demo/demo.hhmap > out/check-demo/cut.hhmap; \
	  $(BUILD)/hh-viz --quiet --no-frames --out out/check-demo/cut out/check-demo/cut.hhmap 2> out/check-demo/cut.err; \
	  rc=$$?; [ $$rc -eq 3 ] || { echo "check-demo: a damaged dump gave exit $$rc, want 3"; exit 1; }; \
	  grep -q "truncated" out/check-demo/cut.err || { cat out/check-demo/cut.err; echo "check-demo: truncation not reported"; exit 1; }
	@printf 'not a dump' > out/check-demo/bad.hhmap; \
	  if $(BUILD)/hh-viz --quiet --out out/check-demo/bad out/check-demo/bad.hhmap 2> out/check-demo/bad.err; then \
	    echo "check-demo: hh-viz accepted garbage"; exit 1; fi; grep -q "not a .hhmap file" out/check-demo/bad.err \
	  || { cat out/check-demo/bad.err; echo "check-demo: bad magic not reported"; exit 1; }
	@$(VALGRIND) $(BUILD)/hh-demo --frames 30 --heap-mib 2 --seed 5 --no-render --quiet --out out/check-demo/vg > /dev/null \
	  || { echo "check-demo: hh-demo under memcheck failed"; exit 1; }
	@$(VALGRIND) $(BUILD)/hh-viz --quiet --no-progress --every 10 --out out/check-demo/vg out/check-demo/vg/demo.hhmap \
	  || { echo "check-demo: hh-viz under memcheck failed"; exit 1; }
	@echo "  demo: 60 frames checked, dump + $$(ls out/check-demo/frames | wc -l) pictures + timeline + plot + index.html;" \
	      "hh-demo and hh-viz clean under memcheck"

# Headless Chromium (Debian's chromium, --headless --no-sandbox: root, no display)
# driven over the DevTools protocol by tests/flipbook/check_flipbook.py: frames 5
# and 17 by URL, arrow-key navigation, no console error or failed load, two
# screenshots that differ; the second must show the heap map's colours.
check-flipbook: $(BUILD)/hh-demo $(BUILD)/test/viz_render_test
	@command -v chromium >/dev/null 2>&1 || $(MAKE) --no-print-directory deps DEPS_PKGS=chromium
	@echo "== viz: index.html in headless Chromium"
	@rm -rf out/check-flipbook && $(BUILD)/hh-demo --frames 30 --heap-mib 2 --seed 3 --out out/check-flipbook --quiet >/dev/null
	@timeout 120 python3 tests/flipbook/check_flipbook.py --browser "$$(command -v chromium)" --first 5 --second 17 \
	  --shots out/check-flipbook/shots out/check-flipbook/index.html
	@$(BUILD)/test/viz_render_test --probe-screenshot out/check-flipbook/shots/frame_17.png \
	  || { echo "check-flipbook: the screenshot does not show the heap map"; exit 1; }
