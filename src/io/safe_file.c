/* Safe file input and output: see safe_file.h for what is guaranteed and why. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE

#include "core/alloc.h"
#include "io/safe_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif
#ifndef O_NOFOLLOW
#define O_NOFOLLOW 0
#endif

static const char *errtext(int e) { return strerror(e); }

static const char *kind_of(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
           : S_ISLNK(m)  ? "a symbolic link"
                         : "not a regular file";
}

static void cap_str(uint64_t cap, char *b, size_t n) {
    if (cap >= ((uint64_t)1 << 30) && cap % ((uint64_t)1 << 30) == 0)
        snprintf(b, n, "%llu GB", (unsigned long long)(cap >> 30));
    else if (cap >= ((uint64_t)1 << 20) && cap % ((uint64_t)1 << 20) == 0)
        snprintf(b, n, "%llu MB", (unsigned long long)(cap >> 20));
    else
        snprintf(b, n, "%llu bytes", (unsigned long long)cap);
}

attn_status attn_io_open_input(const char *path, const char *what, uint64_t cap, int *fd, uint64_t *size) {
    static const char fn[] = "attn_io_open_input";
    ATTN_CHECK_NOT_NULL(fn, fd);
    *fd = -1;
    ATTN_CHECK_NOT_NULL(fn, size);
    ATTN_CHECK_NOT_NULL(fn, path);
    *size = 0;
    if (!what) what = "file";
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return attn_error(ATTN_ERR_IO, "cannot read '%s': %s", path, errtext(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        const int e = errno;
        close(f);
        return attn_error(ATTN_ERR_IO, "cannot read '%s': %s", path, errtext(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        if (S_ISDIR(sb.st_mode)) return attn_error(ATTN_ERR_IO, "cannot read '%s': %s", path, errtext(EISDIR));
        return attn_error(ATTN_ERR_IO, "cannot read '%s': it is %s, not a regular file", path, kind_of(sb.st_mode));
    }
    if (cap && (uint64_t)sb.st_size > cap) {
        close(f);
        char c[40];
        cap_str(cap, c, sizeof c);
        return attn_error(ATTN_ERR_IO, "cannot read '%s': %llu bytes, over the cap of %s for a %s file", path,
                          (unsigned long long)sb.st_size, c, what);
    }
    const int fl = fcntl(f, F_GETFL);
    if (fl >= 0) (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return ATTN_OK;
}

attn_status attn_io_read_input(const char *path, const char *what, uint64_t cap, char **buf, size_t *len) {
    static const char fn[] = "attn_io_read_input";
    ATTN_CHECK_NOT_NULL(fn, buf);
    *buf = NULL;
    ATTN_CHECK_NOT_NULL(fn, len);
    *len = 0;
    ATTN_CHECK_NOT_NULL(fn, path);
    int fd;
    uint64_t size;
    attn_status s = attn_io_open_input(path, what, cap, &fd, &size);
    if (s) return s;
    if (size > (uint64_t)SIZE_MAX - 1) {
        close(fd);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s '%s' is too large for memory", what ? what : "file", path);
    }
    char *b = attn__malloc((size_t)size + 1);
    if (!b) {
        close(fd);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "out of memory reading '%s' (%llu bytes)", path,
                          (unsigned long long)size);
    }
    size_t n = 0;
    while (n < (size_t)size) { /* a file that grows meanwhile is read up to its size at open */
        const ssize_t r = read(fd, b + n, (size_t)size - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            const int e = errno;
            attn__free(b);
            close(fd);
            return attn_error(ATTN_ERR_IO, "cannot read '%s': %s", path, errtext(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return ATTN_OK;
}

int attn_io_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

attn_status attn_io_check_target(const char *path) {
    ATTN_CHECK_NOT_NULL("attn_io_check_target", path);
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return ATTN_OK;
        return attn_error(ATTN_ERR_IO, "cannot stat output '%s': %s", path, errtext(errno));
    }
    if (!S_ISREG(sb.st_mode))
        return attn_error(ATTN_ERR_IO, "output '%s' is %s; only a regular file is replaced", path, kind_of(sb.st_mode));
    return ATTN_OK;
}

/* 64 unpredictable bits: /dev/urandom, else the clock, the process and a counter mixed. */
static uint64_t random_bits(void) {
    static uint64_t counter;
    uint64_t x = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        const ssize_t r = read(fd, &x, sizeof x);
        close(fd);
        if (r == (ssize_t)sizeof x) return x;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 17) ^
        ++counter * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return x;
}

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return attn__strdup(".");
    if (slash == path) return attn__strdup("/");
    char *d = attn__malloc((size_t)(slash - path) + 1);
    if (d) {
        memcpy(d, path, (size_t)(slash - path));
        d[slash - path] = '\0';
    }
    return d;
}

/* The pid in a temporary's name "BASE.tmp-PID-HEX16" (the scheme of attn_io_out_begin), or 0 when
 * name is not one of path's temporaries. */
static long temporary_pid(const char *name, const char *base) {
    const size_t bl = strlen(base);
    if (strncmp(name, base, bl) || strncmp(name + bl, ".tmp-", 5)) return 0;
    const char *p = name + bl + 5;
    long pid = 0;
    for (; *p >= '0' && *p <= '9' && pid < 100000000; p++) pid = pid * 10 + (*p - '0');
    if (*p != '-' || p == name + bl + 5) return 0;
    size_t hex = 0;
    for (p++; (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'); p++) hex++;
    return hex == 16 && *p == '\0' ? pid : 0;
}

/* Remove what writers of path that died before their rename left (SIGKILL, power loss): only
 * files its naming scheme proves are temporaries of path, whose process no longer exists (a
 * live or unknown process, or this one, keeps its file). Best effort: errors are ignored. */
static void remove_stale_temporaries(const char *path, const char *dir) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    DIR *d = opendir(dir);
    if (!d) return;
    const int dfd = dirfd(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const long pid = temporary_pid(e->d_name, base);
        if (pid <= 0 || pid == (long)getpid()) continue;
        struct stat sb;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode)) unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

attn_status attn_io_out_begin(attn_io_out *o, const char *path) {
    ATTN_CHECK_NOT_NULL("attn_io_out_begin", o);
    o->fd = -1;
    o->tmp = o->path = NULL;
    if (!path || !*path) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "output path is empty");
    attn_status s = attn_io_check_target(path);
    if (s) return s;
    const size_t pl = strlen(path);
    o->path = attn__strdup(path);
    o->tmp = attn__malloc(pl + 48);
    if (!o->path || !o->tmp) {
        attn_io_out_abort(o);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    char *dir = dir_of(path);
    if (!dir) { /* an allocation that fails fails the call, as every other one does */
        attn_io_out_abort(o);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    remove_stale_temporaries(path, dir);
    attn__free(dir);
    for (int tries = 0; tries < 64; tries++) {
        /* the pid proves whose it is (remove_stale_temporaries), the random part keeps it unguessable */
        snprintf(o->tmp, pl + 48, "%s.tmp-%ld-%016llx", path, (long)getpid(), (unsigned long long)random_bits());
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (o->fd >= 0) return ATTN_OK;
        if (errno != EEXIST) break;
    }
    const int e = errno;
    s = attn_error(ATTN_ERR_IO, "cannot create a temporary file next to '%s': %s", path, errtext(e));
    attn__free(o->tmp);
    o->tmp = NULL; /* nothing was created */
    attn_io_out_abort(o);
    return s;
}

attn_status attn_io_out_write(attn_io_out *o, const void *buf, size_t n) {
    ATTN_CHECK_NOT_NULL("attn_io_out_write", o);
    if (n) ATTN_CHECK_NOT_NULL("attn_io_out_write", buf);
    if (o->fd < 0) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_io_out_write: the output is not open");
    const char *p = buf;
    while (n) {
        const ssize_t r = write(o->fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return attn_error(ATTN_ERR_IO, "cannot write '%s': %s", o->tmp, errtext(errno));
        p += r;
        n -= (size_t)r;
    }
    return ATTN_OK;
}

void attn_io_out_abort(attn_io_out *o) {
    if (!o) return;
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->tmp) unlink(o->tmp);
    attn__free(o->tmp);
    attn__free(o->path);
    o->tmp = o->path = NULL;
}

attn_status attn_io_out_commit(attn_io_out *o) {
    ATTN_CHECK_NOT_NULL("attn_io_out_commit", o);
    if (o->fd < 0 || !o->path) {
        attn_io_out_abort(o);
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_io_out_commit: the output is not open");
    }
    attn_status s = ATTN_OK;
    /* the folder's name before the rename: running out of memory after it would report a failure
     * for a file that did replace PATH */
    char *dir = dir_of(o->path);
    if (!dir) {
        attn_io_out_abort(o);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (fsync(o->fd) != 0) s = attn_error(ATTN_ERR_IO, "cannot fsync '%s': %s", o->tmp, errtext(errno));
    const int c = close(o->fd);
    o->fd = -1;
    if (!s && c != 0) s = attn_error(ATTN_ERR_IO, "cannot close '%s': %s", o->tmp, errtext(errno));
    if (!s) s = attn_io_check_target(o->path); /* something else may have appeared there meanwhile */
    if (!s && rename(o->tmp, o->path) != 0)
        s = attn_error(ATTN_ERR_IO, "cannot rename '%s' to '%s': %s", o->tmp, o->path, errtext(errno));
    if (s) {
        attn__free(dir);
        attn_io_out_abort(o);
        return s;
    }
    attn__free(o->tmp);
    o->tmp = NULL; /* renamed: nothing to remove */
    const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        s = attn_error(ATTN_ERR_IO, "cannot open directory '%s': %s", dir, errtext(errno));
    } else {
        if (fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP)
            s = attn_error(ATTN_ERR_IO, "cannot fsync directory '%s': %s", dir, errtext(errno));
        close(dfd);
    }
    attn__free(dir);
    attn_io_out_abort(o);
    return s;
}

char *attn_io_path_join(const char *dir, const char *name) {
    const size_t a = strlen(dir), b = strlen(name);
    char *p = attn__malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

int attn_io_is_regular(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ---- advisory locks ---- */

/* The pid written in the lock file (0 when unreadable). */
static long lock_holder(int fd) {
    char buf[32];
    const ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
    if (r <= 0) return 0;
    buf[r] = '\0';
    return strtol(buf, NULL, 10);
}

attn_status attn_io_lock_acquire(attn_io_lock *l, const char *path) {
    ATTN_CHECK_NOT_NULL("attn_io_lock_acquire", l);
    l->fd = -1;
    l->path = NULL;
    ATTN_CHECK_NOT_NULL("attn_io_lock_acquire", path);
    const size_t pl = strlen(path);
    if (!(l->path = attn__malloc(pl + 6))) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(l->path, path, pl);
    memcpy(l->path + pl, ".lock", 6);
    /* a holder unlinks the file when it releases: a lock taken on a file no longer at the path
     * proves nothing, so it is taken again on the new one */
    for (int tries = 0; tries < 16; tries++) {
        const int fd = open(l->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) {
            attn_status s = attn_error(ATTN_ERR_IO, "cannot create the lock file '%s': %s", l->path, errtext(errno));
            attn_io_lock_release(l);
            return s;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            const long pid = lock_holder(fd);
            close(fd);
            attn_status s =
                e == EWOULDBLOCK
                    ? attn_error(ATTN_ERR_IO,
                                 "'%s' is in use: another process (pid %ld) holds its lock '%s'; wait for it to end, "
                                 "or stop it (its checkpoint is written on SIGTERM)",
                                 path, pid, l->path)
                    : attn_error(ATTN_ERR_IO, "cannot lock '%s': %s", l->path, errtext(e));
            attn_io_lock_release(l);
            return s;
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(l->path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            char pid[32];
            const int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) { /* the pid is a courtesy */
            }
            l->fd = fd;
            return ATTN_OK;
        }
        close(fd);
    }
    attn_status s = attn_error(ATTN_ERR_IO, "cannot lock '%s': it keeps being replaced", l->path);
    attn_io_lock_release(l);
    return s;
}

void attn_io_lock_release(attn_io_lock *l) {
    if (!l) return;
    if (l->fd >= 0) {
        unlink(l->path); /* before the unlock: a waiter that then locks this file sees it gone */
        close(l->fd);
    }
    l->fd = -1;
    attn__free(l->path);
    l->path = NULL;
}
