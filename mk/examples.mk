# mk/examples.mk -- example programs under examples/, built by `make` so that
# they cannot rot, and run by `make check`.
#
#   make example-gpu-pool   runs examples/gpu_pool (a mesh pool on a virtual heap,
#                           600 frames) and renders its heap map with hh-viz:
#                           out/gpu_pool/gpu_pool.hhmap, out/gpu_pool/viz/{frames/,
#                           timeline.png, plot.png, index.html}
#   make check-examples     (part of `make check`) a 120-frame run that must end with
#                           every mesh intact, under memcheck too, and hh-viz on its map

EXAMPLES     := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
ALL_EXTRA    += $(EXAMPLES)
CHECK_EXTRA  += check-examples
CLEAN_EXTRA  += out/gpu_pool out/check-examples

$(BUILD)/examples/%: examples/%.c $(wildcard include/*.h include/hheap/*.h) $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC      $<')
	$(Q)$(CC) $(CPPFLAGS) $(WARN) $(CFLAGS) -pthread -o $@ $< $(BUILD)/libhheap.a $(LDLIBS)

.PHONY: example-gpu-pool check-examples
example-gpu-pool: $(BUILD)/examples/gpu_pool $(BUILD)/hh-viz
	@rm -rf out/gpu_pool
	$(BUILD)/examples/gpu_pool --out out/gpu_pool
	$(BUILD)/hh-viz -o out/gpu_pool/viz out/gpu_pool/gpu_pool.hhmap

check-examples: $(BUILD)/examples/gpu_pool $(BUILD)/hh-viz
	@echo "== examples: gpu_pool (120 frames, plain and under memcheck), hh-viz on its map"
	@rm -rf out/check-examples && mkdir -p out/check-examples
	@$(CC) $(CPPFLAGS) $(WARN) -Werror -O1 -g -pthread -o out/check-examples/gpu_pool examples/gpu_pool.c \
	  $(BUILD)/libhheap.a $(LDLIBS)
	@out/check-examples/gpu_pool --frames 120 --seed 3 --out out/check-examples
	@$(VALGRIND) out/check-examples/gpu_pool --frames 40 --seed 4 --out out/check-examples/mc > /dev/null
	@$(BUILD)/hh-viz --quiet --no-progress -w 640 --every 20 -o out/check-examples/viz out/check-examples/gpu_pool.hhmap
	@for f in timeline.png plot.png index.html frames/frame_000000.png; do \
	  [ -s out/check-examples/viz/$$f ] || { echo "check-examples: hh-viz wrote no $$f"; exit 1; }; done
