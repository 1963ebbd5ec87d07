/* ft_main.c: main() for every C test program: runs the registered tests (all,
 * or those named on the command line) and prints one PASS/FAIL line each; --list names them. */
#include "ft.h"

ft_case ft_cases[FT_MAX_CASES];
int ft_ncases;
int ft_failed_now;
int ft_skipped_now;

int main(int argc, char **argv) {
  int passed = 0, failed = 0, skipped = 0;
  /* --list: the case names, one a line (scripts run each as its own process). */
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < ft_ncases; i++) printf("%s\n", ft_cases[i].name);
    return 0;
  }
  for (int i = 0; i < ft_ncases; i++) {
    if (argc > 1) {
      int want = 0;
      for (int a = 1; a < argc; a++)
        if (strcmp(argv[a], ft_cases[i].name) == 0) want = 1;
      if (!want) continue;
    }
    ft_failed_now = 0;
    ft_skipped_now = 0;
    fprintf(stderr, "RUN  %s\n", ft_cases[i].name);
    ft_cases[i].fn();
    if (ft_failed_now) {
      failed++;
      printf("FAIL %s\n", ft_cases[i].name);
    } else if (ft_skipped_now) {
      skipped++;
      printf("SKIP %s\n", ft_cases[i].name);
    } else {
      passed++;
      printf("PASS %s\n", ft_cases[i].name);
    }
    fflush(stdout);
  }
  if (passed + failed + skipped == 0) {
    printf("FAIL no test ran\n");
    return 1;
  }
  return failed ? 1 : 0;
}
