# mk/binned.mk -- binned allocator: the LD_PRELOAD shim, its checks, the benchmark.
#
#   make build/libhheap_malloc.so    the shim (part of `make`)
#   make check-binned-wrong          tests/wrong/binned_*.c must be reported by memcheck
#   make check-shim                  unmodified programs give the same output on the shim
#   make bench-binned                hh_b* vs glibc in-process; the same workloads on
#                                    glibc, mimalloc, jemalloc, tcmalloc and our shim

LIB_EXCLUDE += src/binned/binned_shim.c
ALL_EXTRA   += $(BUILD)/libhheap_malloc.so
INSTALL_LIBS += $(BUILD)/libhheap_malloc.so
CHECK_EXTRA += check-binned-wrong check-shim
DEPS_PKGS   += libmimalloc-dev libjemalloc-dev libgoogle-perftools-dev git python3
CLEAN_EXTRA +=

BINNED_SHIM_SRCS := $(filter-out src/binned/binned_shim.c,$(wildcard src/binned/*.c)) $(wildcard src/common/*.c)
BINNED_SHIM_OBJS := $(BINNED_SHIM_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/src/binned/binned_shim.o

$(BUILD)/libhheap_malloc.so: $(BINNED_SHIM_OBJS)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) -shared -Wl,-soname,libhheap_malloc.so -o $@ $^ -pthread

# ---------------------------------------------------------------------------
# Must-be-caught programs: each reads or writes a freed binned block; memcheck
# must report it (exit 99) -- a clean run means the tracking is broken -- and
# its control build (-DHH_WRONG_CONTROL: the access while the block is live)
# must run clean, which shows that the report comes from the bug.
BINNED_WRONG     := $(patsubst tests/wrong/%.c,$(BUILD)/test/wrong/%,$(wildcard tests/wrong/binned_*.c))
BINNED_WRONG_CTL := $(patsubst tests/wrong/%.c,$(BUILD)/test/wrong/ctl_%,$(wildcard tests/wrong/binned_*.c))

# Linked as every must-be-caught program is (the client requests live in the
# test library; the public headers have none).
$(BUILD)/test/wrong/binned_%: tests/wrong/binned_%.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(call WRONG_MC_LINK)

$(BUILD)/test/wrong/ctl_binned_%: tests/wrong/binned_%.c $(BUILD)/test/libhheap-test.a
	@mkdir -p $(dir $@)
	$(Q)$(call WRONG_MC_LINK,-DHH_WRONG_CONTROL=1)

# The link and the runner (WRONG_MC_LINK, WRONG_MC_CHECK) are mk/reliability.mk's.
.PHONY: check-binned-wrong check-shim bench-binned
check-binned-wrong: $(BINNED_WRONG) $(BINNED_WRONG_CTL)
	@echo "== binned: must-be-caught programs under memcheck"
	$(call WRONG_MC_CHECK,$(BINNED_WRONG),$(BINNED_WRONG_CTL),Invalid read\|Invalid write)

# ---------------------------------------------------------------------------
# The shim under real programs: same stdout and exit status with and without it.
$(BUILD)/test/stress_binned_mt: tests/stress_binned_mt.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O2 -g -pthread -o $@ $< $(LDLIBS)

# Each case runs twice, plain and with LD_PRELOAD; stdout and exit status must
# match, and the shim must report nothing (a misuse it reports while the
# program goes on would change neither).
define BINNED_SHIM_SCRIPT
shim=$$(readlink -f $$BUILD/libhheap_malloc.so)
tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT
fails=0
same() {
  name=$$1; shift
  ( cd "$$tmp" && "$$@" ) >"$$tmp/plain.out" 2>"$$tmp/plain.err"; rc1=$$?
  ( cd "$$tmp" && LD_PRELOAD=$$shim "$$@" ) >"$$tmp/shim.out" 2>"$$tmp/shim.err"; rc2=$$?
  if [ $$rc1 -eq $$rc2 ] && cmp -s "$$tmp/plain.out" "$$tmp/shim.out" && [ -s "$$tmp/plain.out" ] && \
     ! grep -q '^hheap' "$$tmp/shim.err"; then
    echo "  same output: $$name ($$(wc -c <"$$tmp/shim.out") bytes, exit $$rc2)"
  else
    echo "  DIFFERENT: $$name (exit $$rc1 vs $$rc2)"; head -5 "$$tmp/shim.err"; fails=$$((fails+1))
  fi
}
LD_PRELOAD=$$shim true || { echo "  the shim does not load"; exit 1; }
# A short program's libc calls from the shim (lazy binding: only those made):
# it maps (it initialised) but reads no clock and calls no sysconf -- each
# would fault a 64 KiB window of libc's text into every process.
# (Lazy binding only: under LD_BIND_NOW, or a shim linked with -z now, every
# symbol binds at load and the case is skipped.)
if readelf -d "$$shim" 2>/dev/null | grep -q "BIND_NOW\|FLAGS_1.*NOW"; then echo "  (the shim binds at load: its libc calls are not seen)";
else atload=$$(env -u LD_BIND_NOW LD_DEBUG=bindings LD_PRELOAD=$$shim echo x 2>&1 | grep -F "binding file $$shim " | grep -oE "symbol .(clock_gettime|sysconf|mmap)." | sort -u | tr -d "\`'" | tr '\n' ' ')
  if [ "$$atload" = "symbol mmap " ]; then echo "  echo x under the shim: mmap, no clock_gettime, no sysconf";
  else echo "  echo x under the shim calls: $$atload(want mmap alone)"; fails=$$((fails+1)); fi; fi
inuse=$$(LD_PRELOAD=$$shim python3 -c 'import ctypes; l=ctypes.CDLL(None); l.malloc.restype=ctypes.c_void_p; l.hh_busable.restype=ctypes.c_size_t; print("yes" if l.hh_busable(ctypes.c_void_p(l.malloc(100))) == 112 else "no")')
[ "$$inuse" = yes ] && echo "  malloc in python3 is served by the shim (hh_busable(malloc(100)) == 112)" || { echo "  the shim is not serving malloc"; exit 1; }
same "python3 json/dict/list churn" python3 -c 'import json; d={str(i):[j*i for j in range(i%60)] for i in range(30000)}; s=json.dumps(d,sort_keys=True); e=json.loads(s); print(len(s), sum(len(v) for v in e.values()), sorted(e)[:3])'
seq 1 300000 | awk '{print ($$1*7919)%100003, "k"$$1}' >"$$tmp/in.txt"
same "sort -n of 300000 lines" sort -n -k1,1 -s in.txt
printf '#include <stdio.h>\n#include <stdlib.h>\nstatic int cmp(const void*a,const void*b){return *(const int*)a-*(const int*)b;}\nint main(void){int v[1000];for(int i=0;i<1000;i++)v[i]=(i*7919)%%1009;qsort(v,1000,sizeof v[0],cmp);long s=0;for(int i=0;i<1000;i++)s+=(long)v[i]*i;printf("%%ld\\n",s);return 0;}\n' >"$$tmp/prog.c"
same "$$CC -O2 -S prog.c" $$CC -O2 -S -o - prog.c
same "$$CC -O2 prog.c && ./prog" sh -c "$$CC -O2 -o prog prog.c && ./prog"
cat >"$$tmp/edge.c" <<'EOF_EDGE'
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
extern void *__libc_malloc(size_t);
static volatile int stop;
static void *spin(void *a) { (void)a; while (!stop) { void *p = malloc(64); free(p); } return NULL; }
int main(void) {
  void *f = __libc_malloc(32); free(f);                       /* another allocator's pointer */
  char *r = realloc(strcpy(__libc_malloc(16), "kept"), 4096); /* ... reallocated: forwarded */
  pthread_t t[2]; for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, spin, NULL);
  int ok = 0; for (int i = 0; i < 20; i++) { pid_t p = fork(); if (p == 0) { void *x = malloc(100); free(x); _exit(0); }
    int st; waitpid(p, &st, 0); ok += WIFEXITED(st) && WEXITSTATUS(st) == 0; }
  stop = 1; for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  void *a = NULL; int e = posix_memalign(&a, 4096, 100); void *b = aligned_alloc(64, 128), *v = valloc(10);
  printf("%s forks %d align %d %d %d usable %d\n", r, ok, e == 0 && ((size_t)a & 4095) == 0, ((size_t)b & 63) == 0,
         ((size_t)v & 4095) == 0, malloc_usable_size(b) >= 128);
  free(a); free(b); free(v); return 0; }
EOF_EDGE
same "foreign pointers, fork under threads, aligned calls" sh -c "$$CC -O1 -w -o edge edge.c -pthread && ./edge"
cat >"$$tmp/aligned.c" <<'EOF_ALIGNED'
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static const char *en(int e) { return e == 0 ? "0" : e == EINVAL ? "EINVAL" : e == ENOMEM ? "ENOMEM" : "other"; }
int main(void) {
  static const size_t al[] = { 0, 1, 8, 24, 48, 4096, (size_t)2 << 20, (size_t)4 << 20, (size_t)8 << 20, (size_t)64 << 20, (size_t)3 << 62 };
  for (unsigned i = 0; i < sizeof al / sizeof al[0]; i++) {
    size_t a = al[i], eff = 1;
    while (eff < a && eff < ((size_t)1 << 62)) eff <<= 1;
    void *p = NULL; int e = posix_memalign(&p, a, 100);
    printf("posix_memalign(%zu) %s %d\n", a, en(e), e == 0 && (uintptr_t)p % eff == 0);
    if (e == 0) free(p);
    errno = 0; p = aligned_alloc(a, 100);
    printf("aligned_alloc(%zu) %s %s\n", a, p ? "ok" : "NULL", p ? ((uintptr_t)p % eff == 0 ? "aligned" : "MISALIGNED") : en(errno));
    if (p) { memset(p, 1, 100); free(p); }
    errno = 0; p = memalign(a, 100);
    printf("memalign(%zu) %s %s\n", a, p ? "ok" : "NULL", p ? ((uintptr_t)p % eff == 0 ? "aligned" : "MISALIGNED") : en(errno));
    if (p) { memset(p, 1, 100); free(p); }
  }
  void *p = NULL;
  printf("posix_memalign(4096, huge) %s\n", en(posix_memalign(&p, 4096, SIZE_MAX - 100)));
  errno = 0; p = memalign(64, SIZE_MAX - 10); printf("memalign(64, huge) %s %s\n", p ? "ok" : "NULL", en(errno));
  errno = 0; p = aligned_alloc(64, SIZE_MAX - 10); printf("aligned_alloc(64, huge) %s %s\n", p ? "ok" : "NULL", en(errno));
  return 0; }
EOF_ALIGNED
same "posix_memalign/aligned_alloc/memalign as glibc (alignments to 64 MiB, 24, errno)" sh -c "$$CC -O1 -w -o aligned aligned.c && ./aligned"
printf '#include <stdlib.h>\nint main(void) { int x; void *p = malloc(10); free(p); free(p); free(&x); return malloc(77) == NULL; }\n' >"$$tmp/misuse.c"
$$CC -O0 -w -o "$$tmp/misuse" "$$tmp/misuse.c"
diag=$$(cd "$$tmp" && HHEAP_VERBOSE=1 HHEAP_SHOW_STATS=1 HHEAP_LEAK_REPORT=1 LD_PRELOAD=$$shim ./misuse 2>&1 >/dev/null)
quiet=$$(cd "$$tmp" && LD_PRELOAD=$$shim ./misuse 2>&1 >/dev/null)
if echo "$$diag" | grep -q "libhheap_malloc.so active in pid" && echo "$$diag" | grep -q "double free" && \
   echo "$$diag" | grep -q "foreign pointer" && echo "$$diag" | grep -q "binned statistics at exit" && \
   echo "$$diag" | grep -q "leak report: 1 blocks, 80 bytes" && [ "$$(echo "$$quiet" | grep -c .)" = 1 ] && \
   echo "$$quiet" | grep -q "double free"; then
  echo "  shim options: HHEAP_VERBOSE, HHEAP_SHOW_STATS, HHEAP_LEAK_REPORT report; without them one line (the double free)"
else echo "  SHIM OPTIONS WRONG:"; echo "$$diag" | head -8; echo "quiet: $$quiet"; fails=$$((fails+1)); fi
same "git --version" git --version
git init -q "$$tmp/repo" && for i in 1 2 3 4 5; do echo "line $$i" >>"$$tmp/repo/f.txt"; git -C "$$tmp/repo" add f.txt;   GIT_AUTHOR_DATE="2020-01-0$$i 10:00:00 +0000" GIT_COMMITTER_DATE="2020-01-0$$i 10:00:00 +0000"   git -C "$$tmp/repo" -c user.name=t -c user.email=t@t commit -q -m "commit $$i"; done
same "git log -p in a temp repo" git -C repo log -p --stat
same "threaded cross-thread free program" $$(readlink -f $$BUILD/test/stress_binned_mt) 7 100000 4
[ $$fails -eq 0 ] || { echo "check-shim: $$fails case(s) differ"; exit 1; }
endef
export BINNED_SHIM_SCRIPT

check-shim: $(BUILD)/libhheap_malloc.so $(BUILD)/test/stress_binned_mt
	@echo "== binned: unmodified programs on libhheap_malloc.so"
	@BUILD=$(BUILD) CC="$(CC)" sh -c "$$BINNED_SHIM_SCRIPT"

# ---------------------------------------------------------------------------
$(BUILD)/bench/bench_binned: bench/bench_binned.c bench/bench_util.h $(BUILD)/libhheap.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(WARN) -O2 -g -pthread -o $@ $< $(BUILD)/libhheap.a $(LDLIBS)

bench-binned: $(BUILD)/bench/bench_binned $(BUILD)/libhheap_malloc.so
	@peer() { dpkg -L $$1 2>/dev/null | grep -E "/$$2[^/]*\.so(\.[0-9]+)*$$" | head -1; }; \
	 $(BUILD)/bench/bench_binned \
	   shim=$(BUILD)/libhheap_malloc.so \
	   shim-huge=$(BUILD)/libhheap_malloc.so \
	   mimalloc=$$(peer libmimalloc2.0 libmimalloc) \
	   jemalloc=$$(peer libjemalloc2 libjemalloc) \
	   tcmalloc=$$(peer libtcmalloc-minimal4 libtcmalloc_minimal)
