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
 * With --fifo, the lock is instead baton's waiting line built from the same
 * kernel locks baton uses (OFD byte-range locks on one file), without anything
 * else of baton's: under a META byte, take the next ticket byte (or the free
 * slot when nobody waits); wait for the immediate predecessor's ticket only;
 * at the head, wait for the slot byte; release the ticket once holding. No
 * metadata document, no fencing token, no holder identity, no checks for a
 * deleted lock file. It measures what strict FIFO order itself costs against
 * flock(2), which lets a releasing process take the lock straight back.
 *
 *   gcc -O2 -o flock_ref flock_ref.c
 *   flock_ref --lockfile F --counter FILE --iterations M --hold-us H --out FILE [--gate] [--fifo]
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
                    "--hold-us H --out FILE [--gate] [--fifo]\n");
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

/* --fifo: the byte layout of baton's lock files (docs/src/design/locking.md). */
#define META_BYTE (1ULL << 40)
#define SLOT_BYTE (1ULL << 41)
#define TICKET_BASE (1ULL << 42)
#define TICKET_END (1ULL << 47)
#define NO_TICKET UINT64_MAX

/* F_OFD_SETLK / F_OFD_SETLKW / F_OFD_GETLK on [start, start + len). Returns
 * fcntl's result; for F_OFD_GETLK, *found is the conflicting lock's start or
 * NO_TICKET. */
static int ofd(int fd, int cmd, short type, uint64_t start, uint64_t len, uint64_t *found) {
    struct flock fl = {0};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)start;
    fl.l_len = (off_t)len;
    int rc;
    while ((rc = fcntl(fd, cmd, &fl)) < 0 && errno == EINTR) {}
    if (found) *found = (rc == 0 && fl.l_type != F_UNLCK) ? (uint64_t)fl.l_start : NO_TICKET;
    return rc;
}

/* The greatest ticket held below `limit` (waiters write-lock their ticket). */
static uint64_t greatest_ticket_below(int fd, uint64_t limit) {
    uint64_t lo = TICKET_BASE, best = NO_TICKET, c;
    while (lo < limit) {
        if (ofd(fd, F_OFD_GETLK, F_RDLCK, lo, limit - lo, &c) < 0) die("F_OFD_GETLK", NULL);
        if (c == NO_TICKET) break;
        if (c < lo) c = lo;
        best = c;
        lo = c + 1;
    }
    return best;
}

static void fifo_acquire(int fd) {
    if (ofd(fd, F_OFD_SETLKW, F_WRLCK, META_BYTE, 1, NULL) < 0) die("lock META", NULL);
    uint64_t waiting = greatest_ticket_below(fd, TICKET_END);
    if (waiting == NO_TICKET && ofd(fd, F_OFD_SETLK, F_WRLCK, SLOT_BYTE, 1, NULL) == 0) {
        ofd(fd, F_OFD_SETLK, F_UNLCK, META_BYTE, 1, NULL);
        return;
    }
    uint64_t t = waiting == NO_TICKET ? TICKET_BASE : waiting + 1;
    while (ofd(fd, F_OFD_SETLK, F_WRLCK, t, 1, NULL) < 0) t++;
    ofd(fd, F_OFD_SETLK, F_UNLCK, META_BYTE, 1, NULL);
    uint64_t pred;
    while ((pred = greatest_ticket_below(fd, t)) != NO_TICKET) {
        if (ofd(fd, F_OFD_SETLKW, F_RDLCK, pred, 1, NULL) < 0) die("wait for predecessor", NULL);
        ofd(fd, F_OFD_SETLK, F_UNLCK, pred, 1, NULL);
    }
    if (ofd(fd, F_OFD_SETLKW, F_WRLCK, SLOT_BYTE, 1, NULL) < 0) die("wait for slot", NULL);
    ofd(fd, F_OFD_SETLK, F_UNLCK, t, 1, NULL);
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
    int gate = 0, fifo = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--gate")) { gate = 1; continue; }
        if (!strcmp(a, "--fifo")) { fifo = 1; continue; }
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
        if (fifo) {
            fifo_acquire(fd);
        } else {
            while (flock(fd, LOCK_EX) < 0) {
                if (errno != EINTR) die("flock", lockfile);
            }
        }
        uint64_t t1 = mono_ns();
        bump_counter(counter);
        if (hold_us > 0) {
            struct timespec rem = hold;
            while (nanosleep(&rem, &rem) < 0 && errno == EINTR) {}
        }
        uint64_t t2 = mono_ns();
        if (fifo) {
            if (ofd(fd, F_OFD_SETLK, F_UNLCK, SLOT_BYTE, 1, NULL) < 0) die("unlock slot", lockfile);
        } else if (flock(fd, LOCK_UN) < 0) {
            die("flock(LOCK_UN)", lockfile);
        }
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
