/* io/safe_file.h: inputs are regular files under a cap, opened without blocking (a FIFO fails at
 * once); outputs go through a fresh, unpredictably named temporary file next to the target that
 * is renamed over it, never over a device, FIFO, folder or symbolic link; two outputs in progress
 * on one path never share a temporary file; a failed output leaves the old file and no temporary;
 * the temporaries of writers that died are removed by the next output, no other file; the advisory
 * lock is held by one holder at a time and removed on release. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* mknod, S_IFCHR, makedev */
#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "io/safe_file.h"

static char dir[] = "/tmp/attn_test_safe.XXXXXX";

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static int entries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A pid that no process has: a child's, after it was reaped. */
static long dead_pid(void) {
    const pid_t c = fork();
    if (c == 0) _exit(0);
    int st;
    waitpid(c, &st, 0);
    return (long)c;
}

/* Writers killed before their rename left PATH.tmp-PID-HEX: the next output to PATH removes those
 * of dead processes, and keeps a live process's, other names, and other targets' temporaries. */
static void stale_temporaries(const char *a) {
    char dead[700], live[700], other[700], odd[700], b_dead[700];
    snprintf(dead, sizeof dead, "%s.tmp-%ld-0123456789abcdef", a, dead_pid());
    snprintf(live, sizeof live, "%s.tmp-%ld-0123456789abcdef", a, (long)getppid());
    snprintf(other, sizeof other, "%s.tmp-0123456789abcdef", a); /* no pid: nothing proves it is ours */
    snprintf(odd, sizeof odd, "%s.tmp-%ld-0123456789abcdefX", a, dead_pid());
    snprintf(b_dead, sizeof b_dead, "%s.other.tmp-%ld-0123456789abcdef", a, dead_pid());
    const char *const all[] = {dead, live, other, odd, b_dead};
    for (int i = 0; i < 5; i++) put(all[i], "junk");
    const int before = entries();
    attn_io_out o;
    CHECK_OK(attn_io_out_begin(&o, a));
    CHECK(access(dead, F_OK) != 0, "a dead writer's temporary '%s' was left", dead);
    for (int i = 1; i < 5; i++) CHECK(access(all[i], F_OK) == 0, "'%s' was removed", all[i]);
    CHECK(o.tmp && strstr(o.tmp, ".tmp-") && atol(strstr(o.tmp, ".tmp-") + 5) == (long)getpid(),
          "the temporary '%s' does not carry this pid", o.tmp ? o.tmp : "");
    CHECK_OK(attn_io_out_write(&o, "second", 6));
    CHECK_OK(attn_io_out_commit(&o));
    CHECK(entries() == before - 1, "%d entries (want %d)", entries(), before - 1);
    for (int i = 1; i < 5; i++) unlink(all[i]);
}

/* One holder at a time (a second open file description is refused, naming the holder's pid), the
 * lock file removed on release, and the lock taken again afterwards. */
static void locks(const char *a) {
    attn_io_lock l1, l2;
    char lockfile[700];
    snprintf(lockfile, sizeof lockfile, "%s.lock", a);
    CHECK_OK(attn_io_lock_acquire(&l1, a));
    CHECK(access(lockfile, F_OK) == 0, "no lock file '%s'", lockfile);
    CHECK_STATUS(attn_io_lock_acquire(&l2, a), ATTN_ERR_IO);
    char want[64];
    snprintf(want, sizeof want, "(pid %ld)", (long)getpid());
    CHECK(strstr(attn_last_error(), "is in use") && strstr(attn_last_error(), want), "lock message: %s",
          attn_last_error());
    CHECK(l2.fd == -1 && l2.path == NULL, "a refused lock holds something");
    /* a child process is refused too */
    const pid_t c = fork();
    if (c == 0) {
        attn_io_lock l3;
        _exit(attn_io_lock_acquire(&l3, a) == ATTN_ERR_IO ? 0 : 1);
    }
    int st = 1;
    waitpid(c, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "another process got the lock");
    attn_io_lock_release(&l1);
    CHECK(access(lockfile, F_OK) != 0, "the lock file stays after release");
    CHECK_OK(attn_io_lock_acquire(&l2, a));
    attn_io_lock_release(&l2);
    attn_io_lock_release(NULL);
    CHECK_STATUS(attn_io_lock_acquire(&l1, "/nonexistent-dir/x"), ATTN_ERR_IO);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char a[600], b[600], fifo[600], link[600], sub[600];
    path_in(a, sizeof a, "a.txt");
    path_in(b, sizeof b, "b.txt");
    path_in(fifo, sizeof fifo, "fifo");
    path_in(link, sizeof link, "link");
    path_in(sub, sizeof sub, "sub");

    /* input: a regular file, whole; a FIFO, a device, a folder and an oversized file fail at once */
    put(a, "hello");
    char *buf = NULL;
    size_t len = 0;
    CHECK_OK(attn_io_read_input(a, "config", 16, &buf, &len));
    CHECK(buf && len == 5 && !strcmp(buf, "hello"), "read back '%s' (%zu)", buf ? buf : "(null)", len);
    free(buf);
    CHECK_STATUS(attn_io_read_input(a, "config", 4, &buf, &len), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "over the cap of 4 bytes for a config file") != NULL, "cap message: %s",
          attn_last_error());
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    CHECK_STATUS(attn_io_read_input(fifo, "data", 0, &buf, &len), ATTN_ERR_IO); /* would block before */
    CHECK(strstr(attn_last_error(), "a FIFO, not a regular file") != NULL, "FIFO message: %s", attn_last_error());
    CHECK_STATUS(attn_io_read_input("/dev/zero", "data", 0, &buf, &len), ATTN_ERR_IO);
    CHECK_STATUS(attn_io_read_input(dir, "data", 0, &buf, &len), ATTN_ERR_IO);

    /* same file: by device and inode, through a link too */
    CHECK(symlink(a, link) == 0, "symlink");
    CHECK(attn_io_same_file(a, link) == 1, "a link is the same file");
    CHECK(attn_io_same_file(a, b) == 0, "a missing file is not the same file");

    /* output: replaced atomically, no temporary left; two in progress use two temporary files */
    attn_io_out o1, o2;
    CHECK_OK(attn_io_out_begin(&o1, a));
    CHECK_OK(attn_io_out_begin(&o2, a));
    CHECK(o1.tmp && o2.tmp && strcmp(o1.tmp, o2.tmp) != 0, "two writers share a temporary file");
    CHECK(o1.tmp && strncmp(o1.tmp, a, strlen(a)) == 0 && strlen(o1.tmp) > strlen(a) + 8,
          "temporary '%s' not next to the target with a random suffix", o1.tmp ? o1.tmp : "");
    CHECK_OK(attn_io_out_write(&o1, "first", 5));
    CHECK_OK(attn_io_out_write(&o2, "second", 6));
    CHECK_OK(attn_io_out_commit(&o1));
    CHECK_OK(attn_io_out_commit(&o2));
    CHECK_OK(attn_io_read_input(a, "data", 0, &buf, &len));
    CHECK(buf && !strcmp(buf, "second"), "the last commit wins whole: '%s'", buf ? buf : "");
    free(buf);
    CHECK(entries() == 3, "%d entries (want a.txt, fifo, link): a temporary file left behind", entries());
    /* an aborted output leaves the old file and nothing else */
    CHECK_OK(attn_io_out_begin(&o1, a));
    CHECK_OK(attn_io_out_write(&o1, "third", 5));
    attn_io_out_abort(&o1);
    CHECK_OK(attn_io_read_input(a, "data", 0, &buf, &len));
    CHECK(buf && !strcmp(buf, "second"), "an aborted output changed the file: '%s'", buf ? buf : "");
    free(buf);
    CHECK(entries() == 3, "an aborted output left a file behind");

    /* never over a FIFO, a device, a folder or a symbolic link (which stays a link to its file) */
    CHECK_STATUS(attn_io_out_begin(&o1, fifo), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "is a FIFO; only a regular file is replaced") != NULL, "%s", attn_last_error());
    /* a character device of our own (root only; never a real one such as /dev/null, which a
     * regression would replace) */
    char dev[600];
    path_in(dev, sizeof dev, "dev");
    if (mknod(dev, S_IFCHR | 0600, makedev(1, 3)) == 0) {
        CHECK_STATUS(attn_io_out_begin(&o1, dev), ATTN_ERR_IO);
        CHECK(strstr(attn_last_error(), "character device") != NULL, "%s", attn_last_error());
        unlink(dev);
    } else {
        printf("  skipped: the character-device case needs root (mknod)\n");
    }
    CHECK(mkdir(sub, 0700) == 0, "mkdir");
    CHECK_STATUS(attn_io_out_begin(&o1, sub), ATTN_ERR_IO);
    CHECK_STATUS(attn_io_out_begin(&o1, link), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "is a symbolic link") != NULL, "%s", attn_last_error());
    /* a link planted at the target after the output began is not followed or replaced */
    CHECK_OK(attn_io_out_begin(&o1, b));
    CHECK(symlink(a, b) == 0, "symlink b");
    CHECK_OK(attn_io_out_write(&o1, "x", 1));
    CHECK_STATUS(attn_io_out_commit(&o1), ATTN_ERR_IO);
    struct stat sb;
    CHECK(lstat(b, &sb) == 0 && S_ISLNK(sb.st_mode), "the planted link was replaced");
    CHECK_OK(attn_io_read_input(a, "data", 0, &buf, &len));
    CHECK(buf && !strcmp(buf, "second"), "the link's target changed: '%s'", buf ? buf : "");
    free(buf);
    /* a missing folder fails at begin */
    char nodir[700];
    snprintf(nodir, sizeof nodir, "%s/nodir/x", dir);
    CHECK_STATUS(attn_io_out_begin(&o1, nodir), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "cannot create a temporary file next to") != NULL, "%s", attn_last_error());

    stale_temporaries(a);
    locks(a);

    unlink(a), unlink(b), unlink(fifo), unlink(link), rmdir(sub);
    CHECK(rmdir(dir) == 0, "the test folder is not empty");
    return test_summary("test_safe_file");
}
