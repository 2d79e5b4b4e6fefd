/* hh_cli.h -- the command-line conventions of the hheap tools (hh-viz, hh-demo,
 * hh-replay), over getopt_long:
 *   --opt=value and --opt value; options and operands in any order; "--" ends
 *   the options;
 *   --help (-h): usage, every option with its default, exit 0;
 *   --version (-V): "<tool> (hheap) X.Y.Z", exit 0;
 *   errors name the option and the reason, numbers give the accepted range,
 *   and the tool exits 2 (bad usage).
 * Header-only (static inline): each tool includes it once.
 */
#ifndef HH_CLI_H
#define HH_CLI_H

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hheap/common.h"

enum { HH_CLI_MAX_OPTS = 24, HH_CLI_LONG_BASE = 256 };

typedef struct hh_cli_opt {
    const char *name;        /* long name, without "--" */
    int         short_name;  /* a letter, or 0 for none */
    const char *arg;         /* placeholder of the value ("DIR"); NULL: a flag */
    const char *help;        /* one line */
    const char *def;         /* the default, shown by --help; NULL: none shown */
} hh_cli_opt;

typedef struct hh_cli {
    const char       *prog;       /* "hh-viz" */
    const char       *operands;   /* after the options in the usage line, e.g. "DUMP.hhmap" */
    const char       *epilog;     /* printed after the options (exit statuses ...), or NULL */
    const hh_cli_opt *opts;
    int               count;
    const char       *current;    /* the option being handled, "--width", for messages */
    struct option     lopts[HH_CLI_MAX_OPTS + 3];
    char              shorts[3 * HH_CLI_MAX_OPTS + 8];
} hh_cli;

static inline void hh_cli_usage(const hh_cli *c, FILE *f) {
    const char *ops = c->operands ? c->operands : "";
    fprintf(f, "usage: %s [options]%s%s\noptions:\n", c->prog, *ops ? " " : "", ops);
    for (int i = 0; i < c->count; i++) {
        const hh_cli_opt *o = &c->opts[i];
        char head[64];
        snprintf(head, sizeof head, "%c%c%s--%s%s%s", o->short_name ? '-' : ' ', o->short_name ? o->short_name : ' ',
                 o->short_name ? ", " : "  ", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-24s %s", head, o->help);
        if (o->def) fprintf(f, " (default: %s)", o->def);
        fputc('\n', f);
    }
    fprintf(f, "  %-24s %s\n  %-24s %s\n", "-h, --help", "this text, then exit", "-V, --version",
            "the version, then exit");
    if (c->epilog) fputs(c->epilog, f);
}

static inline void hh_cli_init(hh_cli *c, const char *prog, const char *operands, const char *epilog,
                               const hh_cli_opt *opts, int count) {
    memset(c, 0, sizeof *c);
    c->prog = prog;
    c->operands = operands;
    c->epilog = epilog;
    c->opts = opts;
    c->count = count < HH_CLI_MAX_OPTS ? count : HH_CLI_MAX_OPTS;
    size_t n = 0;
    c->shorts[n++] = ':';                  /* a missing value is ':' (not '?'), and getopt prints nothing */
    for (int i = 0; i < c->count; i++) {
        int val = opts[i].short_name ? opts[i].short_name : HH_CLI_LONG_BASE + i;
        c->lopts[i] = (struct option){ opts[i].name, opts[i].arg ? required_argument : no_argument, NULL, val };
        if (opts[i].short_name) {
            c->shorts[n++] = (char)opts[i].short_name;
            if (opts[i].arg) c->shorts[n++] = ':';
        }
    }
    c->lopts[c->count] = (struct option){ "help", no_argument, NULL, 'h' };
    c->lopts[c->count + 1] = (struct option){ "version", no_argument, NULL, 'V' };
    memcpy(c->shorts + n, "hV", 3);
}

/* The option whose getopt value is val (-1: none). */
static inline int hh_cli_find(const hh_cli *c, int val) {
    for (int i = 0; i < c->count; i++)
        if ((c->opts[i].short_name ? c->opts[i].short_name : HH_CLI_LONG_BASE + i) == val) return i;
    return -1;
}

/* The next option: its index in opts, with *value its value (NULL for a flag);
   -1 when the options end (the operands are argv[optind..argc-1]). Handles
   --help and --version (exit 0) and every usage error (message, exit 2). */
static inline int hh_cli_next(hh_cli *c, int argc, char **argv, const char **value) {
    static char current[64];
    opterr = 0;
    int val = getopt_long(argc, argv, c->shorts, c->lopts, NULL);
    *value = optarg;
    if (val == -1) return -1;
    const char *given = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    if (val == 'h') { hh_cli_usage(c, stdout); exit(0); }
    if (val == 'V') { printf("%s (hheap) %d.%d.%d\n", c->prog, HH_VERSION_MAJOR, HH_VERSION_MINOR, HH_VERSION_PATCH); exit(0); }
    if (val == ':' || val == '?') {
        int i = hh_cli_find(c, optopt);
        if (val == ':' && i >= 0)
            fprintf(stderr, "%s: option --%s needs a value (%s)\n", c->prog, c->opts[i].name, c->opts[i].arg);
        else if (i >= 0 && !c->opts[i].arg)
            fprintf(stderr, "%s: option --%s takes no value (given: %s)\n", c->prog, c->opts[i].name, given);
        else if (optopt && optopt < HH_CLI_LONG_BASE && given[0] == '-' && given[1] != '-')
            fprintf(stderr, "%s: unknown option -%c\n", c->prog, optopt);
        else
            fprintf(stderr, "%s: unknown option %s\n", c->prog, given);
        fprintf(stderr, "(%s --help lists the options)\n", c->prog);
        exit(2);
    }
    int i = hh_cli_find(c, val);
    snprintf(current, sizeof current, "--%s", i >= 0 ? c->opts[i].name : "?");
    c->current = current;
    return i;
}

/* A usage error about the current option's value: "<prog>: --opt 'v': why". Exits 2. */
static inline void hh_cli_bad_value(const hh_cli *c, const char *v, const char *why) {
    fprintf(stderr, "%s: %s '%s': %s\n", c->prog, c->current ? c->current : "option", v ? v : "", why);
    exit(2);
}

/* The current option's value as a whole number in lo..hi; otherwise a usage
   error that gives the accepted range (exit 2). */
static inline unsigned long long hh_cli_uint(const hh_cli *c, const char *v, unsigned long long lo,
                                             unsigned long long hi) {
    char why[96];
    char *end = NULL;
    errno = 0;
    unsigned long long n = v && *v && *v != '-' && *v != '+' ? strtoull(v, &end, 10) : 0;
    if (!v || !*v || *v == '-' || *v == '+' || !end || *end) {
        snprintf(why, sizeof why, "not a whole number (accepted: %llu..%llu)", lo, hi);
        hh_cli_bad_value(c, v, why);
    }
    if (errno == ERANGE || n < lo || n > hi) {
        snprintf(why, sizeof why, "out of range (accepted: %llu..%llu)", lo, hi);
        hh_cli_bad_value(c, v, why);
    }
    return n;
}

/* A usage error about the operands (no option to name). Exits 2. */
static inline void hh_cli_usage_error(const hh_cli *c, const char *what) {
    const char *ops = c->operands ? c->operands : "";
    fprintf(stderr, "%s: %s\nusage: %s [options]%s%s (%s --help lists the options)\n", c->prog, what, c->prog,
            *ops ? " " : "", ops, c->prog);
    exit(2);
}

#endif /* HH_CLI_H */
