/* test_api_link.c: what libfi_runtime.so exports (fi_* only, the public functions
 * among them) and links (no vendor library: CUDA, NVRTC and HIP are dlopen'ed). */
#include <sys/stat.h>
#include <unistd.h>

#include "ft.h"

static void build_dir(char *out, size_t n) {
  const char *b = getenv("FI_BUILD");
  if (b && b[0]) {
    snprintf(out, n, "%s", b);
    return;
  }
  /* This program is <build>/tests/test_api_link: its grandparent directory. */
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = 0;
    for (int up = 0; up < 2; up++) {
      char *s = strrchr(exe, '/');
      if (s) *s = 0;
    }
    snprintf(out, n, "%s", exe);
    return;
  }
  snprintf(out, n, "build");
}

/* `tool '<build>/libfi_runtime.so' 2>&1`, opened for reading; NULL, with the failure
 * recorded, when the library is missing or the command cannot start. */
static FILE *run_on_library(const char *tool) {
  char dir[4096], lib[4200], cmd[4400];
  build_dir(dir, sizeof dir);
  snprintf(lib, sizeof lib, "%s/libfi_runtime.so", dir);
  struct stat sb;
  if (stat(lib, &sb) != 0) {
    FT_CHECK(0, "%s missing: build it (make %s)", lib, lib);
    return NULL;
  }
  snprintf(cmd, sizeof cmd, "%s '%s' 2>&1", tool, lib);
  FILE *p = popen(cmd, "r");
  FT_CHECK(p != NULL, "popen %s", cmd);
  return p;
}

FT_TEST(exports_only_fi_symbols) {
  FILE *p = run_on_library("nm -D --defined-only");
  if (!p) return;
  char line[1024];
  int nsyms = 0, bad = 0, has_rmsnorm = 0, has_create = 0, has_last_error = 0, has_prewarm = 0;
  while (fgets(line, sizeof line, p)) {
    /* "0000000000012340 T fi_rmsnorm" */
    char addr[64], type[8], name[512];
    if (sscanf(line, "%63s %7s %511s", addr, type, name) != 3) {
      FT_CHECK(0, "unexpected nm line: %s", line);
      bad++;
      continue;
    }
    nsyms++;
    char *at = strchr(name, '@');
    if (at) *at = 0; /* version suffix */
    if (strncmp(name, "fi_", 3) != 0) {
      if (bad++ < 20) FT_CHECK(0, "exported symbol '%s' (%s) is not fi_*", name, type);
    }
    has_rmsnorm |= strcmp(name, "fi_rmsnorm") == 0;
    has_create |= strcmp(name, "fi_runtime_create") == 0;
    has_last_error |= strcmp(name, "fi_last_error") == 0;
    has_prewarm |= strcmp(name, "fi_admin_prewarm") == 0;
  }
  int rc = pclose(p);
  FT_CHECK_EQ_INT(rc, 0, "nm's exit status");
  FT_CHECK(nsyms >= 10, "only %d symbols", nsyms);
  FT_CHECK(has_rmsnorm && has_create && has_last_error && has_prewarm,
           "public functions missing (rmsnorm %d create %d last_error %d prewarm %d)", has_rmsnorm,
           has_create, has_last_error, has_prewarm);
  FT_CHECK_EQ_INT(bad, 0, "symbols outside fi_*");
}

FT_TEST(links_no_vendor_library) {
  FILE *p = run_on_library("ldd");
  if (!p) return;
  char line[1024];
  int lines = 0, sqlite = 0;
  const char *vendor[] = {"libcuda", "libnvrtc", "libamdhip64", "libhiprtc", "libamd_comgr",
                          "libcudart"};
  while (fgets(line, sizeof line, p)) {
    lines++;
    sqlite |= strstr(line, "libsqlite3") != NULL;
    for (int i = 0; i < 6; i++)
      FT_CHECK(strstr(line, vendor[i]) == NULL, "links %s: %s", vendor[i], line);
    FT_CHECK(strstr(line, "not found") == NULL, "unresolved: %s", line);
  }
  int rc = pclose(p);
  FT_CHECK_EQ_INT(rc, 0, "ldd's exit status");
  FT_CHECK(lines >= 2 && sqlite, "ldd output has %d lines, sqlite %d: not what was expected", lines,
           sqlite);
}
