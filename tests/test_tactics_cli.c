/* test_tactics_cli.c: fi-cache on stored tactics, end to end: ls --tactics (text and
 * JSON), show, stats, verify, export --to and import (tactics travel with kernels and
 * merge), clear --tactics, the --help texts; and the schema change: a version 3 user cache
 * moved aside and refilled, a version 3 system layer not used. Rows are planted with
 * fi_admin_tactic_put: measuring a tactic needs a GPU. */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_ops.h"
#include "ft.h"
#include "test_tactics_util.h"

static const char *tool_path(void) {
  static char p[512];
  const char *b = getenv("FI_BUILD");
  snprintf(p, sizeof p, "%s/fi-cache", b && b[0] ? b : "build");
  return p;
}

/* Runs fi-cache with the NULL-terminated arguments; its stdout (and stderr after it) into
 * out. The exit status, or -1. */
static int cli(char *out, size_t n, ...) {
  char *argv[32];
  int argc = 0;
  argv[argc++] = "fi-cache";
  va_list ap;
  va_start(ap, n);
  for (char *a; argc < 31 && (a = va_arg(ap, char *)) != NULL;) argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  char tmp[] = "/tmp/fi_tactics_cli_XXXXXX";
  int fd = mkstemp(tmp);
  if (fd < 0) return -1;
  unlink(tmp);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    unsetenv("FI_CACHE_SYSTEM_PATH");
    execv(tool_path(), argv);
    _exit(127);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  ssize_t got = pread(fd, out, n - 1, 0);
  out[got > 0 ? got : 0] = 0;
  close(fd);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char out[1 << 16];

FT_TEST(cli_round_trip) {
  if (access(tool_path(), X_OK) != 0) FT_SKIP("%s is not built", tool_path());
  tt_dir dirs;
  tt_dir_begin(&dirs);
  const char *a = dirs.a, *c = dirs.b, *ship = dirs.ship;
  fi_runtime *rt = tt_rt(a, NULL);
  FT_REQUIRE(rt);
  FT_REQUIRE(tt_put(rt, "batch_decode", "dtype=bf16;heads=32/8;head_dim=128", 512, &TT_H100, "warps=4;split=2", 1,
                    12.5, 15, "warps=2;split=2", 13) == FI_OK, "%s", fi_last_error());
  FT_REQUIRE(tt_put(rt, "moe_gemm", "dtype=bf16;experts=128", 16384, &TT_H100, "tile=128", 0, 0, 0, NULL, 0) == FI_OK);
  fi_runtime_destroy(rt);

  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "ls", "--tactics", NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "batch_decode");
  FT_CHECK_STR_HAS(out, "warps=4;split=2");
  FT_CHECK_STR_HAS(out, "NVIDIA H100 80GB HBM3, 132, cuda-12.4");
  FT_CHECK_STR_HAS(out, "invalid"); /* the moe_gemm row: its only tactic found invalid */
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "ls", "--tactics", "--op", "moe_gemm", "--json", NULL), 0);
  FT_CHECK(strstr(out, "\"op\":\"moe_gemm\"") && !strstr(out, "batch_decode") && strstr(out, "\"invalid\":\"tile=128\"") &&
               strstr(out, "\"bucket\":16384") && strstr(out, "\"valid\":false"),
           "%s", out);
  /* show, by a prefix of the hash ls printed. */
  char *hash = strstr(out, "\"hash\":\"");
  FT_REQUIRE(hash, "%s", out);
  char prefix[13];
  snprintf(prefix, sizeof prefix, "%.10s", hash + 8);
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "show", prefix, NULL), 0, "%s", out);
  FT_CHECK(strstr(out, "op: moe_gemm\n") && strstr(out, "state: invalid\n") && strstr(out, "bucket: 16384\n"), "%s", out);
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "show", "--tactics", prefix, NULL), 0, "%s", out);
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "show", "--tactics", "--source", prefix, NULL), 2, "%s", out);
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "stats", "--json", NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "\"tactics\":{\"user\":2,\"system\":0}");
  FT_CHECK_STR_HAS(out, "\"tactic_lookups\":{\"hits\":0,\"misses\":0}");
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "verify", NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "of which tactics: 2 rows, 0 bad");

  /* export --to carries them; import merges them into another cache, once. */
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "export", "--to", ship, NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "exported 2 tactics");
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "export", "--to", ship, "--op", "moe_gemm", NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "exported 1 tactics");
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", a, "export", "--to", ship, NULL), 0, "%s", out);
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", c, "import", ship, NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "tactics: imported 2, merged 0, present 0, refused 0");
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", c, "import", ship, NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "tactics: imported 0, merged 0, present 2, refused 0");
  /* A faster measurement here, then the shipped file again: merged, the faster kept. */
  rt = tt_rt(c, NULL);
  FT_REQUIRE(rt);
  FT_REQUIRE(tt_put(rt, "batch_decode", "dtype=bf16;heads=32/8;head_dim=128", 512, &TT_H100, "warps=8;split=1", 1,
                    11, 15, NULL, 0) == FI_OK);
  fi_runtime_destroy(rt);
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", c, "import", ship, NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "tactics: imported 0, merged 1, present 1, refused 0");
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", c, "ls", "--tactics", "--json", NULL), 0, "%s", out);
  FT_CHECK(strstr(out, "\"params\":\"warps=8;split=1\"") && strstr(out, "\"runner_up\":\"warps=4;split=2\""), "%s", out);
  /* A tampered shipped row is refused by import, and named. */
  FT_REQUIRE(chmod(ship, 0600) == 0 && raw_exec(ship, "UPDATE tactics SET time_us = 1 WHERE op = 'batch_decode'") == SQLITE_OK);
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", c, "import", ship, NULL), 1, "%s", out);
  FT_CHECK_STR_HAS(out, "tactics: imported 0, merged 0, present 1, refused 1");
  FT_CHECK_STR_HAS(out, "checksum mismatch");

  /* clear --tactics: the tactics of one op, then all; kernels are left alone. */
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", c, "clear", "--tactics", "--op", "moe_gemm", NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "removed 1 tactics");
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", c, "clear", "--tactics", "--op", "no_such_op", NULL), 2, "%s", out);
  FT_CHECK_EQ_INT(cli(out, sizeof out, "--cache", c, "clear", NULL), 0, "%s", out);
  FT_CHECK_STR_HAS(out, "removed 1 tactics");
  FT_CHECK_EQ_INT(raw_int(c, "SELECT count(*) FROM tactics"), 0);
  /* --help says what --tactics does. */
  const char *cmds[] = {"ls", "show", "clear", "export", "import", "verify", "stats"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    FT_CHECK_EQ_INT(cli(out, sizeof out, cmds[i], "--help", NULL), 0);
    FT_CHECK(strstr(out, "tactic"), "%s --help says nothing of tactics: %s", cmds[i], out);
  }
  td_end(dirs.dir);
}

/* Version 3 (before the tactics table): a user cache is moved aside and starts again (a
 * cache refills); a system layer is not used (export it again), as older versions were. */
FT_TEST(schema_3_files) {
  char err[512];
  tt_dir dirs;
  tt_dir_begin(&dirs);
  const char *v3 = dirs.a, *sys3 = dirs.ship, *user = dirs.b;
  const char *to_v3 = "DROP TABLE tactics; UPDATE meta SET v = '3' WHERE k = 'schema_version'";
  for (int i = 0; i < 2; i++) {
    cache_store *s = NULL;
    FT_REQUIRE(cache_store_open(i ? sys3 : v3, CACHE_OPEN_ROLLBACK, &s, err, sizeof err) == CACHE_OK, "%s", err);
    cache_store_close(s);
    FT_REQUIRE(raw_exec(i ? sys3 : v3, to_v3) == SQLITE_OK);
  }
  FT_REQUIRE(chmod(sys3, 0644) == 0);
  cache_store *s = NULL;
  FT_CHECK(cache_store_open(v3, 0, &s, err, sizeof err) == CACHE_ERR_CORRUPT && strstr(err, "older schema"),
           "version 3 opened: %s", err);
  fi_runtime *rt = tt_rt(v3, NULL);
  fi_admin_stats st;
  fi_stats ps = {.struct_size = sizeof ps};
  FT_REQUIRE(rt && fi_admin_stats_get(rt, &st) == FI_OK, "%s", fi_last_error());
  FT_CHECK(!st.fallback && fi_runtime_stats(rt, &ps) == FI_OK && ps.repairs == 1, "fallback %d repairs %lld",
           st.fallback, (long long)ps.repairs);
  FT_CHECK(tt_put(rt, "batch_decode", "s=1", 1, &TT_H100, "warps=1", 1, 1, 1, NULL, 0) == FI_OK, "%s",
           fi_last_error());
  fi_runtime_destroy(rt);
  FT_CHECK_EQ_INT(raw_int(v3, "SELECT v FROM meta WHERE k = 'schema_version'"), CACHE_SCHEMA_VERSION);
  /* The system layer of version 3: ignored with a warning; the user cache works. */
  rt = tt_rt(user, sys3);
  FT_REQUIRE(rt);
  tt_found f;
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", "s=1", 1, &TT_H100, &f), "");
  FT_CHECK(tt_put(rt, "batch_decode", "s=1", 1, &TT_H100, "warps=1", 1, 1, 1, NULL, 0) == FI_OK);
  FT_CHECK_EQ_STR(tt_find(rt, "batch_decode", "s=1", 1, &TT_H100, &f), "warps=1");
  FT_CHECK_EQ_STR(f.layer, "user");
  fi_runtime_destroy(rt);
  td_end(dirs.dir);
}
