/* replay.c -- runs libFuzzer inputs through a harness without libFuzzer.
 *
 * Usage: replay_<name> PATH...   (a PATH may be a file or a directory of files)
 * Each file is read whole and passed to LLVMFuzzerTestOneInput once; a harness
 * check that fails aborts, so the exit status says whether every input passed.
 * `make check-fuzz-corpus` runs it over tests/fuzz/corpus_<name>/, plain and
 * under memcheck, so every committed input (seeds and past crashes) stays a
 * regression test. Files are run in name order for reproducible output. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned ran;

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) { perror(path); return 1; }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf != NULL && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (nb == NULL) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    fclose(f);
    if (buf == NULL) { fprintf(stderr, "%s: out of memory\n", path); return 1; }
    /* A copy of exactly n bytes, so a harness reading past the end is caught by memcheck. */
    uint8_t *exact = malloc(n ? n : 1);
    if (exact == NULL) { free(buf); return 1; }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    ran++;
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) { perror(path); return 1; }
    if (!S_ISDIR(st.st_mode)) return run_file(path);
    DIR *d = opendir(path);
    if (d == NULL) { perror(path); return 1; }
    char **names = NULL;
    size_t count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (count == cap) {
            char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *names);
            if (nn == NULL) break;
            names = nn;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[count] = malloc(len);
        if (names[count] == NULL) break;
        snprintf(names[count], len, "%s/%s", path, e->d_name);
        count++;
    }
    closedir(d);
    if (count) qsort(names, count, sizeof *names, cmp_names);
    int rc = 0;
    for (size_t i = 0; i < count; i++) {
        rc |= run_file(names[i]);
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    int rc = 0;
    for (int i = 1; i < argc; i++) rc |= run_path(argv[i]);
    fprintf(stderr, "replay %s: %u inputs passed%s\n", argc > 0 ? argv[0] : "", ran, rc ? " (some unreadable)" : "");
    if (ran == 0) {                                  /* an empty or misnamed corpus checked nothing */
        fprintf(stderr, "replay: no input replayed\n");
        rc = 1;
    }
    return rc;
}
