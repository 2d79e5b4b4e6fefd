/* bench_util.h -- shared timing and measuring helpers of the bench programs
 * (header-only).
 *
 * Every bench program measures a case against its baseline in the same process,
 * interleaved (A B A B ...), and prints one line per case on stdout:
 *
 *   BENCH <region> <case> <unit> <ours_median> <ours_min> <ours_max> <baseline> <base_median> <base_min> <base_max>
 *
 * <unit> is what the numbers are (ns/op, bytes, ratio ...); lower is better
 * unless the unit ends in "/s" (throughput). bench/run.py collects these lines
 * into tables and out/bench/results.json. Lines that do not start with
 * "BENCH " are free-form notes (printed as they are).
 * QUICK=1 in the environment asks for a smoke run (fewer repetitions).
 */
#ifndef HH_BENCH_UTIL_H
#define HH_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__GNUC__) || defined(__clang__)
#  define BENCH_NOINLINE __attribute__((noinline))
#else
#  define BENCH_NOINLINE
#endif

/* The workloads' generator is the tests' one (hh_rng in tests/test_rng.h):
   the same seed gives the same sequence on every run and every machine. */
#include "../tests/test_rng.h"

/* A "kB" line of /proc/self/status (key "VmRSS:" for the resident set now,
   "VmHWM:" for its peak), in bytes; 0 if the file or the line is missing. The
   kernel gives these in kB whatever the page size, so nothing here assumes one. */
static inline double bench_vm_bytes(const char *key) {
    char line[256];
    double kb = 0;
    size_t kl = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0) {
            kb = atof(line + kl);
            break;
        }
    if (f) fclose(f);
    return kb * 1024.0;
}

static inline uint64_t bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int bench_quick(void) {
    const char *q = getenv("QUICK");
    return q && *q && *q != '0';
}

/* Repetitions of each side: 7 normally, 3 with QUICK=1. */
static inline int bench_reps(void) { return bench_quick() ? 3 : 7; }

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_summary { double median, min, max; } bench_summary;

static inline bench_summary bench_summarise(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    bench_summary s = { n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v[0], v[n - 1] };
    return s;
}

static inline void bench_print(const char *region, const char *name, const char *unit, bench_summary ours,
                               const char *baseline, bench_summary base) {
    printf("BENCH %s %s %s %.6g %.6g %.6g %s %.6g %.6g %.6g\n", region, name, unit, ours.median, ours.min, ours.max,
           baseline, base.median, base.min, base.max);
    fflush(stdout);
}

/* Runs ours() and base() alternately `reps` times each (A B A B ...); each call
   returns its own figure (e.g. ns per op). Prints the BENCH line. */
static inline void bench_pair(const char *region, const char *name, const char *unit, double (*ours)(void *),
                              const char *baseline, double (*base)(void *), void *ctx, int reps) {
    double a[64], b[64];
    if (reps > 64) reps = 64;
    for (int i = 0; i < reps; i++) {
        a[i] = ours(ctx);
        b[i] = base(ctx);
    }
    bench_print(region, name, unit, bench_summarise(a, reps), baseline, bench_summarise(b, reps));
}

/* Runs `argv` (argv[0] is the program) in a child process with
   LD_PRELOAD=preload (NULL: none, any inherited LD_PRELOAD is dropped), its
   stdout captured into out (NUL-terminated, at most outlen - 1 bytes). 1 if
   the child exited with status 0. Used to run one workload binary on each
   peer allocator. */
static inline int bench_spawn(char *const argv[], const char *preload, char *out, size_t outlen) {
    extern char **environ;
    int fd[2];
    if (outlen == 0 || pipe(fd) != 0) return 0;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return 0;
    }
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        size_t n = 0;
        while (environ[n]) n++;
        char **env = calloc(n + 2, sizeof *env), pre[4096];
        if (env == NULL) _exit(127);
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0) env[k++] = environ[i];
        if (preload) {
            snprintf(pre, sizeof pre, "LD_PRELOAD=%s", preload);
            env[k++] = pre;
        }
        env[k] = NULL;
        execve(argv[0], argv, env);
        _exit(127);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got < outlen - 1 && (r = read(fd[0], out + got, outlen - 1 - got)) > 0) got += (size_t)r;
    out[got] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#endif
