/*
 * anyswe-exec: the one program anyswe runs inside every sandbox, on every runtime.
 *
 * Built statically on the host from this file and bind-mounted read-only at /.anyswe/bin/anyswe-exec,
 * it gives docker and apptainer the same semantics whatever the image holds (no sh, timeout or
 * runuser needed from the image's PATH):
 *
 *   anyswe-exec [-S] [-e ENVFILE] [-a ARGSFILE] [-C DIR] [-u USER] [-t SECS] [-k SECS] -- ARGV...
 *       run ARGV in DIR as USER with a timeout; exit codes as a shell gives them on both runtimes:
 *       the command's own, 128+N for a death by signal N, 127 command not found, 126 not executable
 *       (or DIR / USER unusable: a message on stderr names it), 124 timed out (the whole process
 *       group is killed: TERM, then KILL after the grace).
 *       ENVFILE and ARGSFILE hold NUL-separated KEY=VALUE entries / arguments (so neither values
 *       nor a megabyte of arguments go through a runtime's command line); both are deleted once read.
 *       -S removes what apptainer adds to every process's environment (APPTAINER_*, SINGULARITY_*,
 *       its prompt, its library path entry, PWD, TERM) and sets HOSTNAME as docker does.
 *       Root keeps its /etc/group groups, and no capability is inheritable or ambient: as under docker.
 *   anyswe-exec [-u USER] --write PATH MODE     stdin -> PATH (parents created), mode MODE (octal)
 *   anyswe-exec [-u USER] --read PATH           PATH -> stdout
 *       file modes exit with the errno of the failure (2 not found, 13 permission denied,
 *       20 not a directory, 21 is a directory) and say which path on stderr.
 *   anyswe-exec --init      (or no argument at all as PID 1: apptainer's --boot runs /sbin/init so)
 *       the sandbox's PID 1. Nothing inside can end it: it ignores every signal sent from inside its
 *       PID namespace (the kernel already drops SIGKILL and SIGSTOP from there), so an agent's
 *       `kill -TERM 1`, or a test suite killing PID 1, cannot turn its own failure into a lost
 *       sandbox. TERM, INT, HUP or QUIT from outside (the runtime's stop: the sender has no pid in
 *       this namespace) end it with 128+N, as tini does; SIGKILL from outside ends it too. It reaps
 *       every orphan (SIGCHLD ignored: the kernel reaps them). It is not dumpable, so no process
 *       inside can ptrace it (nor read or write its memory) without CAP_SYS_PTRACE.
 *   anyswe-exec --forward PORT SOCKET
 *       in the background, relay every TCP connection to 127.0.0.1:PORT to the unix socket SOCKET
 *       (a host service bind-mounted in): the one way out of a sandbox with no network. Returns
 *       once it listens.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_GROUPS 256

static void die(int code, const char *what, const char *detail) {
    fprintf(stderr, "anyswe-exec: %s: %s\n", what, detail);
    exit(code);
}

/* The whole content of a file (NUL-terminated too), or NULL with errno set. */
static char *slurp(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { close(fd); free(buf); return NULL; }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Split a NUL-separated buffer into a NULL-terminated vector. */
static char **split0(char *buf, size_t len, size_t *count) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) if (buf[i] == '\0') n++;
    if (len && buf[len - 1] != '\0') n++;
    char **out = calloc(n + 1, sizeof(char *));
    size_t k = 0;
    char *p = buf;
    while (p < buf + len) {
        out[k++] = p;
        p += strlen(p) + 1;
    }
    *count = k;
    return out;
}

static void load_env(const char *path) {
    size_t len, n;
    char *buf = slurp(path, &len);
    if (!buf) die(126, path, strerror(errno));
    unlink(path);
    char **entries = split0(buf, len, &n);
    for (size_t i = 0; i < n; i++) {
        char *eq = strchr(entries[i], '=');
        if (!eq || eq == entries[i]) die(126, path, "malformed environment entry");
        *eq = '\0';
        setenv(entries[i], eq + 1, 1);
    }
}

/* Field `index` (0-based) of a colon-separated line, copied into out. */
static int field(const char *line, int index, char *out, size_t size) {
    const char *p = line;
    for (int i = 0; i < index; i++) {
        p = strchr(p, ':');
        if (!p) return 0;
        p++;
    }
    size_t n = strcspn(p, ":\n");
    if (n >= size) n = size - 1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 1;
}

struct account { uid_t uid; gid_t gid; char home[4096]; char name[256]; };

/* Look USER up in /etc/passwd by name or number, without NSS (the binary is static). */
static int find_user(const char *user, struct account *acc) {
    FILE *f = fopen("/etc/passwd", "re");
    char line[8192], name[256], num[32];
    int numeric = user[0] && strspn(user, "0123456789") == strlen(user);
    if (f) {
        while (fgets(line, sizeof line, f)) {
            if (!field(line, 0, name, sizeof name) || !field(line, 2, num, sizeof num)) continue;
            if (numeric ? strcmp(num, user) == 0 : strcmp(name, user) == 0) {
                acc->uid = (uid_t)strtoul(num, NULL, 10);
                field(line, 3, num, sizeof num);
                acc->gid = (gid_t)strtoul(num, NULL, 10);
                field(line, 5, acc->home, sizeof acc->home);
                snprintf(acc->name, sizeof acc->name, "%s", name);
                fclose(f);
                return 1;
            }
        }
        fclose(f);
    }
    if (!numeric) return 0;
    /* A uid with no passwd entry: docker runs it with gid 0 and HOME=/. */
    acc->uid = (uid_t)strtoul(user, NULL, 10);
    acc->gid = 0;
    snprintf(acc->home, sizeof acc->home, "/");
    acc->name[0] = '\0';
    return 1;
}

/* The primary group plus every /etc/group entry that lists the user, as docker --user sets them. */
static size_t groups_of(const struct account *acc, gid_t *groups) {
    size_t n = 0;
    groups[n++] = acc->gid;
    FILE *f = fopen("/etc/group", "re");
    if (!f || !acc->name[0]) { if (f) fclose(f); return n; }
    char line[65536], members[65000], num[32];
    while (fgets(line, sizeof line, f) && n < MAX_GROUPS) {
        if (!field(line, 2, num, sizeof num) || !field(line, 3, members, sizeof members)) continue;
        for (char *m = strtok(members, ","); m; m = strtok(NULL, ",")) {
            if (strcmp(m, acc->name) == 0) { groups[n++] = (gid_t)strtoul(num, NULL, 10); break; }
        }
    }
    fclose(f);
    return n;
}

static void become(const char *user) {
    struct account acc;
    gid_t groups[MAX_GROUPS];
    if (!find_user(user, &acc)) die(126, user, "no such user in /etc/passwd");
    size_t n = groups_of(&acc, groups);
    if (setgroups(n, groups) != 0 || setgid(acc.gid) != 0 || setuid(acc.uid) != 0)
        die(126, user, strerror(errno));
    setenv("HOME", acc.home[0] ? acc.home : "/", 1);
}

/* Docker gives no inheritable or ambient capabilities; apptainer's --add-caps sets both. */
static void docker_like_caps(void) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &header, data) == 0) {
        data[0].inheritable = data[1].inheritable = 0;
        syscall(SYS_capset, &header, data);
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

/* Root's supplementary groups from /etc/group, as docker sets them (apptainer leaves none). */
static void own_groups(void) {
    struct account acc;
    gid_t groups[MAX_GROUPS];
    char uid[32];
    if (getuid() != 0) return;
    snprintf(uid, sizeof uid, "%u", (unsigned)getuid());
    if (!find_user(uid, &acc)) return;
    size_t n = groups_of(&acc, groups);
    setgroups(n, groups);
}

static void scrub_runtime_env(void) {
    extern char **environ;
    char name[256];
    for (size_t i = 0; environ[i];) {
        size_t n = strcspn(environ[i], "=");
        if (n < sizeof name && (strncmp(environ[i], "APPTAINER_", 10) == 0 || strncmp(environ[i], "SINGULARITY_", 12) == 0)) {
            memcpy(name, environ[i], n);
            name[n] = '\0';
            unsetenv(name);
            continue;
        }
        i++;
    }
    const char *prompt = getenv("PS1");
    if (prompt && strstr(prompt, "Apptainer")) unsetenv("PS1");
    const char *command = getenv("PROMPT_COMMAND");
    if (command && strstr(command, "Apptainer")) unsetenv("PROMPT_COMMAND");
    unsetenv("PWD");
    unsetenv("TERM");
    const char *libs = getenv("LD_LIBRARY_PATH");
    if (libs) {
        char *kept = strdup(libs), *out = calloc(strlen(libs) + 1, 1);
        for (char *part = strtok(kept, ":"); part; part = strtok(NULL, ":")) {
            if (strcmp(part, "/.singularity.d/libs") == 0) continue;
            if (*out) strcat(out, ":");
            strcat(out, part);
        }
        if (*out) setenv("LD_LIBRARY_PATH", out, 1); else unsetenv("LD_LIBRARY_PATH");
    }
    char host[256];
    if (!getenv("HOSTNAME") && gethostname(host, sizeof host) == 0) setenv("HOSTNAME", host, 1);
}

static int mkparents(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        int e = errno;
        *p = '/';
        if (r != 0 && e != EEXIST) { errno = e; return -1; }
    }
    return 0;
}

static int write_mode(const char *path, const char *mode) {
    char *parents = strdup(path);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) die(EISDIR, path, "Is a directory");
    if (mkparents(parents) != 0) die(errno, path, strerror(errno));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (mode_t)strtoul(mode, NULL, 8));
    if (fd < 0) die(errno, path, strerror(errno));
    char buf[65536];
    for (;;) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die(errno, "stdin", strerror(errno));
        if (r == 0) break;
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(fd, buf + off, (size_t)(r - off));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) die(errno, path, strerror(errno));
            off += w;
        }
    }
    if (fchmod(fd, (mode_t)strtoul(mode, NULL, 8)) != 0 && errno != EPERM) die(errno, path, strerror(errno));
    if (close(fd) != 0) die(errno, path, strerror(errno));
    return 0;
}

static int read_mode(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) die(EISDIR, path, "Is a directory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die(errno, path, strerror(errno));
    char buf[65536];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die(errno, path, strerror(errno));
        if (r == 0) break;
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(1, buf + off, (size_t)(r - off));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) die(errno, "stdout", strerror(errno));
            off += w;
        }
    }
    return 0;
}

/* Copy both ways between a and b until both directions have ended. */
static void relay(int a, int b) {
    struct pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    int open_dirs = 2;
    char buf[65536];
    while (open_dirs > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int to = i == 0 ? b : a;
            ssize_t r = read(fds[i].fd, buf, sizeof buf);
            if (r <= 0) {
                shutdown(to, SHUT_WR);
                fds[i].fd = -1;
                open_dirs--;
                continue;
            }
            for (ssize_t off = 0; off < r;) {
                ssize_t w = write(to, buf + off, (size_t)(r - off));
                if (w < 0 && errno == EINTR) continue;
                if (w < 0) return;
                off += w;
            }
        }
    }
}

static void serve_connection(int client, const char *socket_path) {
    struct sockaddr_un addr = {0};
    addr.sun_family = AF_UNIX;
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path);
    int upstream = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (upstream >= 0 && connect(upstream, (struct sockaddr *)&addr, sizeof addr) == 0) relay(client, upstream);
    _exit(0);
}

static int forward_mode(const char *port, const char *socket_path) {
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)strtoul(port, NULL, 10));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 128) != 0)
        die(1, "listen on 127.0.0.1", strerror(errno));
    pid_t daemon = fork();
    if (daemon < 0) die(1, "fork", strerror(errno));
    if (daemon > 0) return 0; /* listening already: the caller may connect as soon as we return */
    setsid();
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    signal(SIGCHLD, SIG_IGN); /* connection handlers reap themselves */
    signal(SIGHUP, SIG_IGN);
    for (;;) {
        int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0) continue;
        pid_t handler = fork();
        if (handler == 0) {
            close(listener);
            serve_connection(client, socket_path);
        }
        close(client);
    }
}

static volatile sig_atomic_t forwarded = 0;
static pid_t child = -1;

static void forward(int sig) {
    forwarded = sig;
    if (child > 0) kill(-child, sig);
}

/* A stop request from the runtime: the sender lives outside this PID namespace, so it has no pid here. */
static void stop_from_outside(int sig, siginfo_t *info, void *unused) {
    (void)unused;
    if (info->si_pid == 0 && (info->si_code == SI_USER || info->si_code == SI_QUEUE || info->si_code == SI_TKILL))
        _exit(128 + sig);
}

static _Noreturn void init_mode(void) {
    /* Not dumpable: ptrace (PTRACE_ATTACH, then PTRACE_CONT with SIGKILL ends any process, PID 1
     * included), /proc/1/mem, process_vm_writev and pidfd_getfd then need CAP_SYS_PTRACE, which
     * neither runtime gives a sandbox's root (docker's default set and apptainer's --add-caps lack
     * it). Without this, root inside could end PID 1 and pass its own failure off as a lost sandbox. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    struct sigaction stop = {0};
    stop.sa_sigaction = stop_from_outside;
    stop.sa_flags = SA_SIGINFO;
    sigfillset(&stop.sa_mask);
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT) sigaction(sig, &stop, NULL);
        else signal(sig, SIG_IGN); /* SIGCHLD ignored: exiting orphans are reaped by the kernel */
    }
    for (;;) pause();
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wait for the child until `deadline` (0: forever); 1 if it ended (status set), 0 on deadline. */
static int wait_until(double deadline, int *status) {
    for (;;) {
        pid_t r = waitpid(child, status, deadline > 0 ? WNOHANG : 0);
        if (r == child) return 1;
        if (r < 0 && errno != EINTR) return 1;
        if (deadline > 0) {
            if (now() >= deadline) return 0;
            struct timespec nap = {0, 20 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
    }
}

static int run(char **argv, double timeout, double grace) {
    struct sigaction sa = {0};
    sa.sa_handler = forward;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    child = fork();
    if (child < 0) die(126, "fork", strerror(errno));
    if (child == 0) {
        setpgid(0, 0);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        execvp(argv[0], argv);
        int e = errno;
        fprintf(stderr, "anyswe-exec: %s: %s\n", argv[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    setpgid(child, child);
    int status = 0;
    int ended = wait_until(timeout > 0 ? now() + timeout : 0, &status);
    if (!ended) {
        kill(-child, SIGTERM);
        if (!wait_until(now() + grace, &status)) {
            kill(-child, SIGKILL);
            wait_until(0, &status);
        }
        kill(-child, SIGKILL); /* stragglers of the group */
        return 124;
    }
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

int main(int argc, char **argv) {
    const char *dir = NULL, *user = NULL, *envfile = NULL, *argsfile = NULL;
    double timeout = 0, grace = 5;
    int i = 1;
    if ((argc == 1 && getpid() == 1) || (argc == 2 && strcmp(argv[1], "--init") == 0)) init_mode();
    docker_like_caps();
    own_groups();
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) { i++; break; }
        if (strcmp(a, "-S") == 0) { scrub_runtime_env(); continue; }
        if (strcmp(a, "--write") == 0 && i + 2 < argc) {
            if (user) become(user);
            return write_mode(argv[i + 1], argv[i + 2]);
        }
        if (strcmp(a, "--forward") == 0 && i + 2 < argc) return forward_mode(argv[i + 1], argv[i + 2]);
        if (strcmp(a, "--read") == 0 && i + 1 < argc) {
            if (user) become(user);
            return read_mode(argv[i + 1]);
        }
        if (i + 1 >= argc) die(126, a, "missing value");
        if (strcmp(a, "-C") == 0) dir = argv[++i];
        else if (strcmp(a, "-u") == 0) user = argv[++i];
        else if (strcmp(a, "-t") == 0) timeout = strtod(argv[++i], NULL);
        else if (strcmp(a, "-k") == 0) grace = strtod(argv[++i], NULL);
        else if (strcmp(a, "-e") == 0) envfile = argv[++i];
        else if (strcmp(a, "-a") == 0) argsfile = argv[++i];
        else die(126, a, "unknown option");
    }
    char **cmd = argv + i;
    size_t n = (size_t)(argc - i);
    /* Both files are read as the caller (root), before privileges are dropped. */
    if (envfile) load_env(envfile);
    if (argsfile) {
        size_t len;
        char *buf = slurp(argsfile, &len);
        if (!buf) die(126, argsfile, strerror(errno));
        unlink(argsfile);
        cmd = split0(buf, len, &n);
    }
    if (n == 0) die(126, "command", "empty");
    if (user) become(user);
    if (dir && chdir(dir) != 0) {
        fprintf(stderr, "anyswe-exec: cannot change directory to %s: %s\n", dir, strerror(errno));
        return 126;
    }
    return run(cmd, timeout, grace);
}
