// peak_rss CMD [ARG...]: runs CMD and prints, as the last line of standard
// error, "peak_rss: N KiB": the most resident memory CMD's process held at
// any moment (wait4's ru_maxrss). Exits with CMD's status (128 + the signal
// that ended it).
//
// A Python wrapper cannot measure this: subprocess starts the child with
// vfork, and exec records the parent's high-water mark in the child's
// ru_maxrss, so every child would report at least the interpreter's ~30 MB.
// This process is small, and fork gives the child its own copy of it.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: peak_rss CMD [ARG...]\n");
    return 2;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("peak_rss: fork");
    return 2;
  }
  if (pid == 0) {
    execvp(argv[1], argv + 1);
    fprintf(stderr, "peak_rss: cannot run '%s': %s\n", argv[1], strerror(errno));
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("peak_rss: wait4");
      return 2;
    }
  }
  fflush(stdout);
  fprintf(stderr, "peak_rss: %ld KiB\n", ru.ru_maxrss);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
