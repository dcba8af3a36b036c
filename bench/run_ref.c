/* run_ref: the system calls of `baton run --lock L -- CMD ARGS...` on an
 * uncontended lock, in a small C program: the floor of baton's design.
 *
 *   run_ref DIR CMD ARGS...
 *
 * A diagnostic for bench/run.py, not a lock tool: no waiting line (the lock
 * must be free), no error recovery. It makes the calls baton makes for its
 * guarantees, in baton's order (strace of baton run, bench/README.md "Where
 * the time goes"), and nothing else:
 *   - the baton dir vetted (stat, symlink check of each component, locks/
 *     made, network filesystems refused: statfs); subreaper for leftovers;
 *   - under the META byte: the document read, the line looked at, the slot
 *     taken, the deleted-file marker and path check, the holder's identity
 *     (/proc/self/stat start time, boot id, PID namespace and its init's start
 *     time, host name), the record written with its fencing token;
 *   - forwarded signals (handlers + a self-pipe), blocked across fork;
 *   - the command in its own process group with PDEATHSIG, started only after
 *     the parent recorded the group (/proc/PID/stat start time) under META
 *     (go byte on a pipe); exec errors back through a CLOEXEC pipe;
 *   - the wait on a pidfd and the self-pipe; the group checked for leftovers;
 *   - the release: record removed under META, borrowers' byte, slot unlocked.
 * What it leaves out is what baton's implementation adds: the Rust runtime,
 * argument parsing (clap), the dynamic libraries and size of the binary, the
 * JSON (a fixed document of the same size is written instead).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define META (1ULL << 40)
#define SLOT (2ULL << 40)
#define TICKETS (4ULL << 40)
#define BORROW (SLOT + (1ULL << 32))
#define MARKER 339882776837086ULL

static void die(const char *what) {
    fprintf(stderr, "run_ref: %s: %s\n", what, strerror(errno));
    exit(125);
}

static int ofd(int fd, int cmd, short type, unsigned long long start, unsigned long long len) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)start,
                       .l_len = (off_t)len};
    return fcntl(fd, cmd, &fl);
}

/* Reads a small /proc file whole, as baton does (growing reads). */
static size_t slurp(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    fstat(fd, &st);
    size_t n = 0;
    ssize_t r;
    while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
    close(fd);
    buf[n] = 0;
    return n;
}

static int sig_pipe[2];
static void on_signal(int sig) {
    char b = (char)sig;
    ssize_t r = write(sig_pipe[1], &b, 1);
    (void)r;
}

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void write_doc(int fd, size_t len) {
    char doc[512];
    memset(doc, ' ', sizeof doc);
    int n = snprintf(doc, sizeof doc, "{\"format\":1,\"name\":\"L\",\"max\":1,\"token\":%ld}",
                     (long)time(NULL));
    doc[n] = ' ';
    if (pwrite(fd, doc, len, 0) < 0) die("write the record");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: run_ref DIR CMD ARGS...\n");
        return 125;
    }
    const char *dir = argv[1];
    char path[PATH_MAX], buf[4096];
    struct stat st;

    /* The baton dir: vetted, locks/ made, not on a network filesystem. */
    if (stat(dir, &st) < 0) die("stat the baton dir");
    if (lstat(dir, &st) < 0) die("lstat the baton dir");
    readlink("/tmp", buf, sizeof buf);
    readlink(dir, buf, sizeof buf);
    snprintf(path, sizeof path, "%s/locks", dir);
    if (mkdir(path, 0700) < 0 && errno != EEXIST) die("mkdir locks");
    if (lstat(path, &st) < 0) die("stat locks");
    uint64_t run_id;
    if (getrandom(&run_id, sizeof run_id, 0) < 0) die("getrandom");
    struct statfs sfs;
    if (statfs(dir, &sfs) < 0) die("statfs");
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) die("subreaper");

    /* The lock. */
    snprintf(path, sizeof path, "%s/locks/L.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) die("open the lock file");
    struct stat mine;
    if (fstat(fd, &mine) < 0) die("fstat");
    if (ofd(fd, F_OFD_SETLK, F_WRLCK, META, 1) < 0) die("META");
    if (pread(fd, buf, sizeof buf, 0) < 0) die("read the record");
    struct flock probe = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)TICKETS,
                          .l_len = (off_t)(1ULL << 62)};
    if (fcntl(fd, F_OFD_GETLK, &probe) < 0) die("look at the line");
    if (ofd(fd, F_OFD_SETLK, F_WRLCK, SLOT, 1) < 0) {
        fprintf(stderr, "run_ref: the lock is busy (run_ref does not wait)\n");
        return 75;
    }
    if (ofd(fd, F_OFD_SETLK, F_RDLCK, MARKER, 1) < 0) die("marker");
    struct stat now;
    if (lstat(path, &now) < 0 || now.st_ino != mine.st_ino) die("the lock file was replaced");
    /* The holder's identity. */
    getpid();
    readlink("/proc/self/ns/pid", buf, sizeof buf);
    slurp("/proc/1/stat", buf, sizeof buf);
    slurp("/proc/self/stat", buf, sizeof buf);
    slurp("/proc/sys/kernel/random/boot_id", buf, sizeof buf);
    struct utsname un;
    uname(&un);
    getuid();
    write_doc(fd, 389);
    ofd(fd, F_OFD_SETLK, F_UNLCK, META, 1);

    /* Forwarded signals. */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sig_pipe) < 0) die("socketpair");
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    for (size_t i = 0; i < 4; i++) sigaction(forwarded[i], &sa, NULL);
    getpgrp();

    /* The command: own group, PDEATHSIG, started after the group is recorded. */
    int go[2], err[2];
    if (pipe2(go, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) die("pipe");
    sigset_t fwd, old;
    sigemptyset(&fwd);
    for (size_t i = 0; i < 4; i++) sigaddset(&fwd, forwarded[i]);
    sigprocmask(SIG_BLOCK, &fwd, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        for (size_t i = 0; i < 4; i++) sigaction(forwarded[i], &dfl, NULL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(125);
        close(go[1]);
        char b;
        if (read(go[0], &b, 1) != 1) _exit(125);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[2], argv + 2);
        int e = errno;
        ssize_t r = write(err[1], &e, sizeof e);
        (void)r;
        _exit(127);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(go[0]);
    close(err[1]);
    setpgid(pid, pid);
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    slurp(path, buf, sizeof buf);
    ofd(fd, F_OFD_SETLKW, F_WRLCK, META, 1);
    pread(fd, buf, sizeof buf, 0);
    write_doc(fd, 478);
    ofd(fd, F_OFD_SETLK, F_UNLCK, META, 1);
    if (write(go[1], "\1", 1) != 1) die("start the command");
    close(go[1]);
    int e;
    if (read(err[0], &e, sizeof e) == (ssize_t)sizeof e) {
        errno = e;
        die("exec");
    }
    close(err[0]);

    /* The wait. */
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    struct pollfd pfd[2] = {{.fd = pidfd, .events = POLLIN}, {.fd = sig_pipe[0], .events = POLLIN}};
    int status = 0;
    for (; pidfd >= 0;) { /* no pidfd (valgrind): waitpid only */
        if (poll(pfd, 2, -1) < 0 && errno != EINTR) die("poll");
        if (pfd[1].revents & POLLIN) {
            char s;
            if (read(sig_pipe[0], &s, 1) == 1) kill(-pid, s);
        }
        if (pfd[0].revents & POLLIN) break;
    }
    waitpid(pid, &status, 0);
    kill(-pid, 0);
    siginfo_t si;
    waitid(P_ALL, 0, &si, WNOHANG | WEXITED | WNOWAIT);
    if (pidfd >= 0) close(pidfd);
    close(sig_pipe[0]);
    close(sig_pipe[1]);

    /* The release. */
    ofd(fd, F_OFD_SETLKW, F_WRLCK, META, 1);
    pread(fd, buf, sizeof buf, 0);
    write_doc(fd, 87);
    if (ftruncate(fd, 87) < 0) die("truncate");
    ofd(fd, F_OFD_SETLK, F_UNLCK, META, 1);
    ofd(fd, F_OFD_SETLKW, F_WRLCK, BORROW, 1);
    ofd(fd, F_OFD_SETLK, F_UNLCK, SLOT, 1);
    close(fd);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}
