/* cache_fs.c: the cache file as a file: creating it and its directory, moving
 * a damaged one aside, the kind of filesystem it is on, who may write it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "cache_internal.h"
#include "cache_ops.h"

static int cache_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* mkdir -p of path's parent; only directories created here get 0700, forced
 * with chmod because mkdir's mode is filtered by the umask. */
int cache_make_parent(const char *path, char *err, size_t errlen) {
  char *dir = strdup(path);
  if (!dir) {
    cache_seterr(err, errlen, "out of memory");
    return CACHE_ERR;
  }
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) {
    free(dir);
    return CACHE_OK;
  }
  *slash = '\0';
  int rc = CACHE_OK;
  for (char *p = dir + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(dir, 0700) == 0) {
      if (chmod(dir, 0700) != 0) {
        cache_seterr(err, errlen, "chmod %s: %s", dir, strerror(errno));
        rc = CACHE_ERR;
      }
    } else {
      /* EEXIST, or EACCES/EROFS on a directory that already exists. */
      int e = errno;
      if (e != EEXIST && !cache_is_dir(dir)) {
        cache_seterr(err, errlen, "cannot create directory %s: %s", dir, strerror(e));
        rc = CACHE_ERR;
      }
    }
    *p = saved;
    if (rc != CACHE_OK || saved == '\0') break;
  }
  free(dir);
  return rc;
}

/* Creates the file ourselves so that it is 0600 whatever the umask; SQLite
 * then gives its -wal and -shm files the same mode. */
int cache_create_file(const char *path, char *err, size_t errlen) {
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return CACHE_OK;
    cache_seterr(err, errlen, "cannot create %s: %s", path, strerror(errno));
    return CACHE_ERR;
  }
  int rc = CACHE_OK;
  if (fchmod(fd, 0600) != 0) {
    cache_seterr(err, errlen, "chmod %s: %s", path, strerror(errno));
    rc = CACHE_ERR;
  }
  close(fd);
  return rc;
}

static const char *const sidecar_suffix[3] = {"-wal", "-shm", "-journal"};

/* A -wal or -journal left beside a file that is not its own would be
 * replayed into it by SQLite: whoever replaces a cache file removes them. */
int cache_unlink_sidecars(const char *path, char *err, size_t errlen) {
  char side[PATH_MAX + 16];
  for (int i = 0; i < 3; i++) {
    if (snprintf(side, sizeof side, "%s%s", path, sidecar_suffix[i]) >= (int)sizeof side) {
      cache_seterr(err, errlen, "%s: path too long", path);
      return CACHE_ERR;
    }
    if (unlink(side) != 0 && errno != ENOENT) {
      cache_seterr(err, errlen, "cannot remove %s: %s", side, strerror(errno));
      return CACHE_ERR;
    }
  }
  return CACHE_OK;
}

int cache_move_aside(const char *path, char *moved, size_t movedlen, char *err, size_t errlen) {
  if (!path || !*path || !moved || movedlen == 0) {
    cache_seterr(err, errlen, "move aside: NULL or empty argument");
    return CACHE_ERR;
  }
  long long now = (long long)time(NULL);
  /* Two moves in one second (a file damaged again at once) keep both. */
  for (int i = 0;; i++) {
    int n = i == 0 ? snprintf(moved, movedlen, "%s.corrupt-%lld", path, now)
                   : snprintf(moved, movedlen, "%s.corrupt-%lld-%d", path, now, i);
    if (n < 0 || (size_t)n >= movedlen) {
      cache_seterr(err, errlen, "move aside %s: the new name does not fit", path);
      moved[0] = '\0';
      return CACHE_ERR;
    }
    struct stat st;
    if (lstat(moved, &st) != 0 && errno == ENOENT) break;
    if (i == 99) {
      cache_seterr(err, errlen, "move aside %s: %s and 99 others exist", path, moved);
      moved[0] = '\0';
      return CACHE_ERR;
    }
  }
  if (rename(path, moved) != 0) {
    cache_seterr(err, errlen, "cannot rename %s to %s: %s", path, moved, strerror(errno));
    moved[0] = '\0';
    return CACHE_ERR;
  }
  return cache_unlink_sidecars(path, err, errlen);
}

/* statfs f_type values of filesystems whose locks or shared memory are not
 * coherent between hosts, or not to be trusted with WAL's -shm. */
static const uint32_t network_magic[] = {
    0x6969u,     /* NFS */
    0x517Bu,     /* SMB */
    0xFF534D42u, /* CIFS */
    0xFE534D42u, /* SMB2 */
    0x0BD00BD0u, /* Lustre */
    0x47504653u, /* GPFS */
    0x00C36400u, /* CephFS */
    0x01021997u, /* 9p */
    0x65735546u, /* FUSE */
    0x5346414Fu, /* AFS */
    0x7461636Fu, /* OCFS2 */
    0x01161970u, /* GFS2 */
};

int cache_fs_is_network(const char *path) {
  if (!path || !*path || strcmp(path, ":memory:") == 0) return 0;
  size_t n = strlen(path);
  char *p = malloc(n + 2);
  if (!p) return 0;
  memcpy(p, path, n + 1);
  struct statfs sf;
  int found = 0;
  /* The file may not exist yet: its nearest existing parent decides. */
  for (;;) {
    if (statfs(p, &sf) == 0) {
      found = 1;
      break;
    }
    if ((errno != ENOENT && errno != ENOTDIR) || strcmp(p, "/") == 0 || strcmp(p, ".") == 0)
      break;
    char *slash = strrchr(p, '/');
    if (!slash)
      strcpy(p, ".");
    else if (slash == p)
      p[1] = '\0';
    else
      *slash = '\0';
  }
  free(p);
  if (!found) return 0;
  uint32_t type = (uint32_t)sf.f_type; /* f_type is signed on some ABIs: compare 32 bits */
  for (size_t i = 0; i < sizeof network_magic / sizeof network_magic[0]; i++)
    if (type == network_magic[i]) return 1;
  return 0;
}

/* One file or directory that exists: refuse what another user could write. */
static int perm_check(const char *what, const char *p, const struct stat *st, int is_dir,
                      int allow_group_write, char *err, size_t errlen) {
  uid_t me = geteuid();
  unsigned mode = (unsigned)(st->st_mode & 07777);
  if (st->st_uid != me && !(is_dir && st->st_uid == 0)) {
    cache_seterr(err, errlen, "%s %s is owned by uid %u, not by this user (uid %u)", what, p,
                 (unsigned)st->st_uid, (unsigned)me);
    return CACHE_ERR;
  }
  if (st->st_mode & S_IWOTH) {
    cache_seterr(err, errlen, "%s %s is writable by every user (mode %04o)", what, p, mode);
    return CACHE_ERR;
  }
  if ((st->st_mode & S_IWGRP) && !allow_group_write) {
    cache_seterr(err, errlen,
                 "%s %s is group-writable (mode %04o) and no shared cache was asked for", what,
                 p, mode);
    return CACHE_ERR;
  }
  return CACHE_OK;
}

static int check_permissions_at(const char *path, int allow_group_write, int depth, char *err,
                                size_t errlen) {
  size_t n = strlen(path);
  char *dir = malloc(n + 2);
  if (!dir) {
    cache_seterr(err, errlen, "out of memory");
    return CACHE_ERR;
  }
  memcpy(dir, path, n + 1);
  char *slash = strrchr(dir, '/');
  if (!slash)
    strcpy(dir, ".");
  else if (slash == dir)
    dir[1] = '\0';
  else
    *slash = '\0';
  struct stat st;
  int rc = CACHE_OK;
  /* Whoever can write the directory can replace the file, or plant a
   * -journal that SQLite would replay into it. */
  if (stat(dir, &st) != 0) {
    if (errno != ENOENT) {
      cache_seterr(err, errlen, "cannot check directory %s: %s", dir, strerror(errno));
      rc = CACHE_ERR;
    }
    free(dir);
    return rc; /* missing: it will be created 0700 */
  }
  if (!S_ISDIR(st.st_mode)) {
    cache_seterr(err, errlen, "%s is not a directory", dir);
    rc = CACHE_ERR;
  } else {
    rc = perm_check("directory", dir, &st, 1, allow_group_write, err, errlen);
  }
  free(dir);
  if (rc != CACHE_OK) return rc;

  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return CACHE_OK;
    cache_seterr(err, errlen, "cannot check %s: %s", path, strerror(errno));
    return CACHE_ERR;
  }
  if (S_ISLNK(st.st_mode)) {
    /* A link is as safe as what it points to; realpath leaves no link, so
     * this recurses once. */
    char *target = depth == 0 ? realpath(path, NULL) : NULL;
    if (!target) {
      cache_seterr(err, errlen, "cannot resolve the link %s: %s", path,
                   depth ? "too many levels" : strerror(errno));
      return CACHE_ERR;
    }
    rc = check_permissions_at(target, allow_group_write, depth + 1, err, errlen);
    free(target);
    return rc;
  }
  if (!S_ISREG(st.st_mode)) {
    cache_seterr(err, errlen, "%s is not a regular file", path);
    return CACHE_ERR;
  }
  if ((rc = perm_check("cache file", path, &st, 0, allow_group_write, err, errlen))) return rc;
  char side[PATH_MAX + 16];
  for (int i = 0; i < 3; i++) {
    snprintf(side, sizeof side, "%s%s", path, sidecar_suffix[i]);
    if (lstat(side, &st) != 0) continue;
    if (S_ISLNK(st.st_mode) || !S_ISREG(st.st_mode)) {
      cache_seterr(err, errlen, "%s is not a regular file", side);
      return CACHE_ERR;
    }
    if ((rc = perm_check("cache file", side, &st, 0, allow_group_write, err, errlen))) return rc;
  }
  return CACHE_OK;
}

int cache_check_permissions(const char *path, int allow_group_write, char *err, size_t errlen) {
  if (!path || !*path) {
    cache_seterr(err, errlen, "check permissions: empty path");
    return CACHE_ERR;
  }
  if (strcmp(path, ":memory:") == 0) return CACHE_OK;
  if (strlen(path) >= PATH_MAX) {
    cache_seterr(err, errlen, "%s: path too long", path);
    return CACHE_ERR;
  }
  return check_permissions_at(path, allow_group_write, 0, err, errlen);
}
