/*
 * flock_ref: the physical reference of baton's contention benchmark.
 *
 * The same loop as `baton-bench-worker lib`, on blocking flock(2) directly:
 * M times: open(lockfile); flock(fd, LOCK_EX); read the counter, +1, write
 * it back; hold H microseconds (nanosleep); flock(fd, LOCK_UN); close(fd).
 * The wait of an iteration is open + flock(LOCK_EX), measured with
 * clock_gettime(CLOCK_MONOTONIC), exactly as the library's wait covers its
 * whole acquire (which opens the lock file too).
 *
 * Output (--out): one line per iteration, "WAIT_NS HELD_NS RELEASING_NS" (the
 * wait, and the CLOCK_MONOTONIC instants the lock was held and its release
 * began), then "elapsed ELAPSED_NS START_NS END_NS". With --gate, stdin is read to EOF
 * first, so the runner can start all processes at the same instant.
 *
 *   gcc -O2 -o flock_ref flock_ref.c
 *   flock_ref --lockfile F --counter FILE --iterations M --hold-us H --out FILE [--gate]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what, const char *arg) {
    fprintf(stderr, "flock_ref: %s %s: %s\n", what, arg ? arg : "", strerror(errno));
    exit(1);
}

static void usage(void) {
    fprintf(stderr, "usage: flock_ref --lockfile F --counter FILE --iterations M "
                    "--hold-us H --out FILE [--gate]\n");
    exit(2);
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Read the counter (missing = 0), add one, write it back in place, zero-padded
 * to 20 digits, without truncating and without fsync: exactly what
 * baton-bench-worker does (truncating to zero makes ext4 flush on close). */
static void bump_counter(const char *path) {
    char buf[64];
    uint64_t n = 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) die("open", path);
    ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
    if (r < 0) die("read", path);
    buf[r] = 0;
    if (r > 0) {
        char *end;
        n = strtoull(buf, &end, 10);
        if (end == buf || (*end && *end != '\n')) {
            fprintf(stderr, "flock_ref: counter %s holds \"%s\": torn write?\n", path, buf);
            exit(1);
        }
    }
    int len = snprintf(buf, sizeof buf, "%020" PRIu64 "\n", n + 1);
    if (pwrite(fd, buf, (size_t)len, 0) != len) die("write", path);
    close(fd);
}

/* The handoff probe (same protocol as `baton-bench-worker grab`): take the
 * lock, print "held NS", wait for a line on stdin; on "release" print
 * "releasing NS" and unlock. */
static int grab(const char *lockfile) {
    int fd = open(lockfile, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) die("open", lockfile);
    if (flock(fd, LOCK_EX) != 0) die("flock", lockfile);
    printf("held %" PRIu64 "\n", mono_ns());
    fflush(stdout);
    char line[64] = {0};
    if (fgets(line, sizeof line, stdin) && !strncmp(line, "release", 7)) {
        printf("releasing %" PRIu64 "\n", mono_ns());
        fflush(stdout);
    }
    flock(fd, LOCK_UN);
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--grab")) return grab(argv[2]);
    const char *lockfile = NULL, *counter = NULL, *out = NULL;
    long long iterations = -1, hold_us = -1;
    int gate = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--gate")) { gate = 1; continue; }
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--lockfile")) lockfile = v;
        else if (!strcmp(a, "--counter")) counter = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--iterations")) iterations = atoll(v);
        else if (!strcmp(a, "--hold-us")) hold_us = atoll(v);
        else usage();
    }
    if (!lockfile || !counter || !out || iterations < 0 || hold_us < 0) usage();

    /* per iteration: wait, instant held, instant release began */
    uint64_t *rec = calloc((size_t)iterations * 3 + 1, sizeof *rec);
    if (!rec) die("calloc", NULL);
    struct timespec hold = {hold_us / 1000000, (hold_us % 1000000) * 1000};

    if (gate) {
        char sink[256];
        while (read(0, sink, sizeof sink) > 0) {}
    }

    uint64_t start = mono_ns();
    for (long long i = 0; i < iterations; i++) {
        uint64_t t0 = mono_ns();
        int fd = open(lockfile, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) die("open", lockfile);
        while (flock(fd, LOCK_EX) < 0) {
            if (errno != EINTR) die("flock", lockfile);
        }
        uint64_t t1 = mono_ns();
        bump_counter(counter);
        if (hold_us > 0) {
            struct timespec rem = hold;
            while (nanosleep(&rem, &rem) < 0 && errno == EINTR) {}
        }
        uint64_t t2 = mono_ns();
        if (flock(fd, LOCK_UN) < 0) die("flock(LOCK_UN)", lockfile);
        close(fd);
        rec[3 * i] = t1 - t0;
        rec[3 * i + 1] = t1;
        rec[3 * i + 2] = t2;
    }
    uint64_t end = mono_ns();

    FILE *f = fopen(out, "w");
    if (!f) die("fopen", out);
    for (long long i = 0; i < iterations; i++)
        fprintf(f, "%" PRIu64 " %" PRIu64 " %" PRIu64 "\n", rec[3 * i], rec[3 * i + 1],
                rec[3 * i + 2]);
    fprintf(f, "elapsed %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", end - start, start, end);
    if (fclose(f) != 0) die("fclose", out);
    free(rec);
    return 0;
}
