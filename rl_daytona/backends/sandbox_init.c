/* pid 1 of a local bwrap sandbox: set the command's resource limits, drop to the sandbox user
 * (as root: uid/gid 1000, no groups, empty bounding/inheritable/ambient capability sets,
 * no_new_privs), die with its bwrap (the switch clears that signal: it is set again), fork the command, reap every process until it exits, and exit with its
 * status (128 + signal when killed, like sh). One small exec instead of the fallback's three
 * (util-linux prlimit, setpriv and a pid-1 sh), which cost ~3 ms of CPU per command.
 *
 * usage: init [-c|-a|-f|-n=SOFT:HARD ...] [-u=UID:GID] [-t] -- COMMAND [ARG ...]
 *   c: RLIMIT_CPU, a: RLIMIT_AS, f: RLIMIT_FSIZE, n: RLIMIT_NPROC, u: switch to UID:GID,
 *   t: mount a private devpts on /dev/pts first (a staged /dev of bound device nodes has no
 *      ptys of its own; needs CAP_SYS_ADMIN in the sandbox's user namespace, dropped after)
 * Exit 125 with one line on stderr when it cannot set the sandbox up (nothing then runs);
 * 127/126 when the command is missing/not executable.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *what) {
    fprintf(stderr, "sandbox init: %s: %s\n", what, strerror(errno));
    _exit(125);
}

static void usage(const char *arg) {
    fprintf(stderr, "sandbox init: bad argument %s (usage: init [-c|-a|-f|-n|-u=A:B ...] [-t] -- COMMAND)\n", arg);
    _exit(125);
}

static int resource_of(char c) {
    switch (c) {
    case 'c': return RLIMIT_CPU;
    case 'a': return RLIMIT_AS;
    case 'f': return RLIMIT_FSIZE;
    case 'n': return RLIMIT_NPROC;
    default: return -1;
    }
}

static void drop_bounding_set(void) {
    for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
            fail("drop the capability bounding set");
}

int main(int argc, char **argv) {
    long long uid = -1, gid = -1;
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *arg = argv[i];
        char *end;
        if (strcmp(arg, "-t") == 0) {
            if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                      "newinstance,ptmxmode=0666,mode=620") != 0)
                fail("mount /dev/pts");
            continue;
        }
        if (arg[0] != '-' || arg[1] == '\0' || arg[2] != '=') usage(arg);
        errno = 0;
        unsigned long long first = strtoull(arg + 3, &end, 10);
        if (errno || end == arg + 3 || *end != ':') usage(arg);
        const char *second_at = end + 1;
        unsigned long long second = strtoull(second_at, &end, 10);
        if (errno || end == second_at || *end != '\0') usage(arg);
        if (arg[1] == 'u') {
            uid = (long long)first;
            gid = (long long)second;
            continue;
        }
        int which = resource_of(arg[1]);
        if (which < 0) usage(arg);
        struct rlimit limit = {(rlim_t)first, (rlim_t)second};
        if (setrlimit(which, &limit) != 0) fail("setrlimit");
    }
    if (i + 1 >= argc) usage("(no command after --)");
    char **command = argv + i + 1;

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail("no_new_privs");
    if (uid >= 0) {
        drop_bounding_set();  /* needs CAP_SETPCAP: before the uid switch clears it */
        if (setgroups(0, NULL) != 0) fail("setgroups");
        if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) != 0) fail("setresgid");
        if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) fail("setresuid");
    }
    /* a uid switch away from 0 empties the permitted, effective and ambient sets; the
       inheritable set is emptied here (and everything again when no switch happened) */
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct none[2];
    memset(none, 0, sizeof none);
    if (syscall(SYS_capset, &header, none) != 0) fail("capset");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        fail("clear the ambient capabilities");

    /* the uid switch cleared the parent-death signal bwrap set (--die-with-parent): set it
       again, so the sandbox dies with its bwrap even when whoever started bwrap died outright */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail("set the parent-death signal");

    pid_t child = fork();
    if (child < 0) fail("fork");
    if (child == 0) {
        execvp(command[0], command);
        int error = errno;
        fprintf(stderr, "sandbox init: %s: %s\n", command[0], strerror(error));
        _exit(error == ENOENT ? 127 : 126);
    }
    for (;;) {  /* pid 1: reap orphans too, until the command itself has exited */
        int status;
        pid_t done = wait(&status);
        if (done == child) {
            if (WIFEXITED(status)) return WEXITSTATUS(status);
            return 128 + WTERMSIG(status);
        }
        if (done < 0 && errno != EINTR) fail("wait");
    }
}
