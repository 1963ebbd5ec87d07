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

/* ---- the path of a cache file, checked from the root ----
 * Code from a cache file runs in the host process, so every directory on
 * the way to it, the file and its sidecars must be beyond the reach of
 * other users: whoever can write a directory can replace what is in it.
 * The walk opens each component relative to the directory descriptor
 * before it, without following links (O_NOFOLLOW), and judges what it
 * opened (fstat on that descriptor), so nothing can be swapped between a
 * check and the open. A link is followed by hand, and only when it is
 * owned by this user or root. Once every directory of the resolved path
 * is writable only by this user or root (or is sticky and the next entry
 * is this user's, which others cannot rename or remove), nobody else can
 * change what the path names, and SQLite may open it by that path. */

static int owner_ok(uid_t uid, int flags) {
  return uid == geteuid() || (uid == 0 && (flags & CACHE_PATH_ROOT_OK));
}

static int writable_by_others(const struct stat *st, int flags) {
  return (st->st_mode & S_IWOTH) || ((st->st_mode & S_IWGRP) && !(flags & CACHE_PATH_GROUP_OK));
}

/* One file or directory that exists: refuse what another user could write. */
static int perm_check(const char *what, const char *p, const struct stat *st, int is_dir,
                      int flags, char *err, size_t errlen) {
  uid_t me = geteuid();
  unsigned mode = (unsigned)(st->st_mode & 07777);
  if (st->st_uid != me && !((is_dir || (flags & CACHE_PATH_ROOT_OK)) && st->st_uid == 0)) {
    cache_seterr(err, errlen, "%s %s is owned by uid %u, not by this user (uid %u)%s", what, p,
                 (unsigned)st->st_uid, (unsigned)me, is_dir ? " or root" : "");
    return CACHE_ERR;
  }
  if (st->st_mode & S_IWOTH) {
    cache_seterr(err, errlen, "%s %s is writable by every user (mode %04o)", what, p, mode);
    return CACHE_ERR;
  }
  if ((st->st_mode & S_IWGRP) && !(flags & CACHE_PATH_GROUP_OK)) {
    cache_seterr(err, errlen,
                 "%s %s is group-writable (mode %04o) and no shared cache was asked for", what,
                 p, mode);
    return CACHE_ERR;
  }
  return CACHE_OK;
}

typedef struct walk {
  char *resolved; /* absolute path of the directory dfd, without links */
  size_t len, cap;
  int dfd;
  struct stat st; /* what dfd is, taken when it was opened */
} walk;

static int walk_push(walk *w, const char *name) {
  size_t n = strlen(name);
  if (w->len + n + 2 > w->cap) return -1;
  if (w->len > 1 || w->resolved[0] != '/') w->resolved[w->len++] = '/';
  memcpy(w->resolved + w->len, name, n + 1);
  w->len += n;
  return 0;
}

static void walk_pop(walk *w) {
  char *slash = strrchr(w->resolved, '/');
  if (!slash || slash == w->resolved) {
    w->resolved[1] = '\0';
    w->len = 1;
  } else {
    *slash = '\0';
    w->len = (size_t)(slash - w->resolved);
  }
}

static int walk_root(walk *w, char *err, size_t errlen) {
  if (w->dfd >= 0) close(w->dfd);
  w->dfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (w->dfd < 0) {
    cache_seterr(err, errlen, "cannot open /: %s", strerror(errno));
    return CACHE_ERR;
  }
  strcpy(w->resolved, "/");
  w->len = 1;
  if (fstat(w->dfd, &w->st) != 0 || !owner_ok(w->st.st_uid, CACHE_PATH_ROOT_OK) ||
      writable_by_others(&w->st, 0)) {
    cache_seterr(err, errlen, "the root directory can be written by other users");
    return CACHE_ERR;
  }
  return CACHE_OK;
}

/* Appends the components of `rest` to the pending list (a stack of
 * strings, last component on top) so that links expand in place. */
typedef struct pending {
  char *buf;   /* components separated by NULs, in walking order from `pos` */
  size_t pos, end, cap;
} pending;

static int pending_prepend(pending *pd, const char *path) {
  size_t n = strlen(path) + 1;
  if (n > pd->pos) return -1;
  pd->pos -= n;
  memcpy(pd->buf + pd->pos, path, n);
  /* '/' separates components: make each a string of its own. */
  for (size_t i = pd->pos; i < pd->pos + n - 1; i++)
    if (pd->buf[i] == '/') pd->buf[i] = '\0';
  return 0;
}

/* The next non-empty component, or NULL at the end. */
static const char *pending_next(pending *pd) {
  while (pd->pos < pd->end) {
    const char *c = pd->buf + pd->pos;
    pd->pos += strlen(c) + 1;
    if (c[0]) return c;
  }
  return NULL;
}

static int pending_empty(pending *pd) {
  for (size_t i = pd->pos; i < pd->end; i++)
    if (pd->buf[i]) return 0;
  return 1;
}

/* Components still to walk (after links expand, more may come). */
static int pending_count(pending *pd) {
  int n = 0;
  for (size_t i = pd->pos; i < pd->end; i++)
    if (pd->buf[i] && (i == pd->pos || !pd->buf[i - 1])) n++;
  return n;
}

int cache_path_secure(const char *path, int flags, mode_t dir_mode, mode_t file_mode,
                      char **resolved, char *err, size_t errlen) {
  if (resolved) *resolved = NULL;
  if (!path || !*path) {
    cache_seterr(err, errlen, "cache path is empty");
    return CACHE_ERR;
  }
  if (strlen(path) >= PATH_MAX) {
    cache_seterr(err, errlen, "%s: path too long", path);
    return CACHE_ERR;
  }
  if ((dir_mode | file_mode) & 002 || (((dir_mode | file_mode) & 020) && !(flags & CACHE_PATH_GROUP_OK))) {
    cache_seterr(err, errlen, "%s: refusing to create it writable by other users", path);
    return CACHE_ERR;
  }
  walk w = {.resolved = malloc(PATH_MAX + 2), .cap = PATH_MAX + 2, .dfd = -1};
  pending pd = {malloc(4 * PATH_MAX), 4 * PATH_MAX, 4 * PATH_MAX, 4 * PATH_MAX};
  char *target = malloc(PATH_MAX + 1);
  int rc = CACHE_ERR, links = 0;
  if (!w.resolved || !pd.buf || !target) {
    cache_seterr(err, errlen, "out of memory");
    goto out;
  }
  if (pending_prepend(&pd, path) != 0 || walk_root(&w, err, errlen) != CACHE_OK) goto out;
  if (path[0] != '/') {
    /* Relative: the working directory's own path is walked first. */
    if (!getcwd(target, PATH_MAX) || pending_prepend(&pd, target) != 0) {
      cache_seterr(err, errlen, "%s: cannot read the working directory", path);
      goto out;
    }
  }
  const char *c;
  while ((c = pending_next(&pd)) != NULL) {
    if (strcmp(c, ".") == 0) continue;
    int last = pending_empty(&pd);
    struct stat dst = w.st, st;
    if (strcmp(c, "..") == 0) {
      int up = openat(w.dfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (up < 0) {
        cache_seterr(err, errlen, "cannot open %s/..: %s", w.resolved, strerror(errno));
        goto out;
      }
      close(w.dfd);
      w.dfd = up;
      walk_pop(&w);
      if (fstat(w.dfd, &w.st) != 0) {
        cache_seterr(err, errlen, "cannot check %s: %s", w.resolved, strerror(errno));
        goto out;
      }
      continue;
    }
    int exists = fstatat(w.dfd, c, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (!exists && errno != ENOENT) {
      cache_seterr(err, errlen, "cannot check %s/%s: %s", w.resolved, c, strerror(errno));
      goto out;
    }
    /* The directory the file lives in holds its -wal and -journal too:
     * nobody else may write it, sticky or not. Above it a sticky
     * directory (/tmp) is fine where the next entry is ours. */
    if (writable_by_others(&dst, flags)) {
      int sticky = !last && (dst.st_mode & S_ISVTX);
      if (sticky && exists && !owner_ok(st.st_uid, flags | CACHE_PATH_ROOT_OK)) {
        cache_seterr(err, errlen, "%s/%s is owned by uid %u, in %s that every user can write",
                     w.resolved, c, (unsigned)st.st_uid, w.resolved);
        goto out;
      }
      if (!(sticky && (exists || (flags & CACHE_PATH_CREATE)))) {
        int world = (dst.st_mode & S_IWOTH) != 0;
        cache_seterr(err, errlen, "directory %s is %s (mode %04o)%s", w.resolved,
                     world ? "writable by every user" : "group-writable",
                     (unsigned)(dst.st_mode & 07777),
                     world ? (last ? ": another user could plant a -wal or -journal beside the file"
                                   : "")
                           : " and no shared cache was asked for");
        goto out;
      }
    }
    if (exists && S_ISLNK(st.st_mode)) {
      if (!owner_ok(st.st_uid, flags | CACHE_PATH_ROOT_OK)) {
        cache_seterr(err, errlen, "link %s/%s is owned by uid %u, not by this user or root",
                     w.resolved, c, (unsigned)st.st_uid);
        goto out;
      }
      if (++links > 40) {
        cache_seterr(err, errlen, "%s: too many levels of links", path);
        goto out;
      }
      ssize_t n = readlinkat(w.dfd, c, target, PATH_MAX);
      if (n <= 0 || n >= PATH_MAX) {
        cache_seterr(err, errlen, "cannot read the link %s/%s", w.resolved, c);
        goto out;
      }
      target[n] = '\0';
      if (pending_prepend(&pd, target) != 0) {
        cache_seterr(err, errlen, "%s: links expand too far", path);
        goto out;
      }
      if (target[0] == '/' && walk_root(&w, err, errlen) != CACHE_OK) goto out;
      continue;
    }
    if (walk_push(&w, c) != 0) {
      cache_seterr(err, errlen, "%s: path too long", path);
      goto out;
    }
    if (!last) {
      if (!exists) {
        if (!(flags & CACHE_PATH_CREATE)) {
          rc = CACHE_OK; /* nothing there yet: it will be created private */
          goto out;
        }
        /* Only the file's own directory gets the cache's mode; a missing
         * directory above it is created for this user alone, reachable
         * by the group where the cache is shared. */
        mode_t m = pending_count(&pd) == 1 ? dir_mode : (dir_mode & 0750);
        if (mkdirat(w.dfd, c, 0700) != 0 && errno != EEXIST) {
          cache_seterr(err, errlen, "cannot create directory %s: %s", w.resolved, strerror(errno));
          goto out;
        }
        int nd = openat(w.dfd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nd >= 0 && fstat(nd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0777) != m)
          (void)fchmod(nd, m); /* mkdir's mode went through the process umask */
        if (nd >= 0) close(nd);
      }
      int nd = openat(w.dfd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (nd < 0) {
        cache_seterr(err, errlen, "%s: %s", w.resolved,
                     errno == ENOTDIR ? "not a directory" : strerror(errno));
        goto out;
      }
      close(w.dfd);
      w.dfd = nd;
      /* Its owner could change it at any time: this user or root only.
       * Who else may write it is judged when stepping into it. */
      if (fstat(w.dfd, &w.st) != 0 || !owner_ok(w.st.st_uid, CACHE_PATH_ROOT_OK)) {
        cache_seterr(err, errlen, "directory %s is owned by uid %u, not by this user (uid %u) or root",
                     w.resolved, (unsigned)w.st.st_uid, (unsigned)geteuid());
        goto out;
      }
      continue;
    }
    /* The file itself: created exclusively where missing, else opened
     * without following a link, and judged by what was opened. */
    int fd = -1;
    if (!exists && (flags & CACHE_PATH_CREATE)) {
      fd = openat(w.dfd, c, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd >= 0 && fchmod(fd, file_mode) != 0) {
        cache_seterr(err, errlen, "chmod %s: %s", w.resolved, strerror(errno));
        close(fd);
        goto out;
      }
      if (fd < 0 && errno != EEXIST) {
        cache_seterr(err, errlen, "cannot create %s: %s", w.resolved, strerror(errno));
        goto out;
      }
    }
    if (fd < 0) fd = openat(w.dfd, c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) {
        rc = CACHE_OK; /* nothing there yet */
        goto done;
      }
      cache_seterr(err, errlen, "cannot open %s: %s", w.resolved,
                   errno == ELOOP ? "a link appeared" : strerror(errno));
      goto out;
    }
    int fst = fstat(fd, &st);
    close(fd);
    if (fst != 0 || !S_ISREG(st.st_mode)) {
      cache_seterr(err, errlen, "%s is not a regular file", w.resolved);
      goto out;
    }
    if (perm_check("cache file", w.resolved, &st, 0, flags, err, errlen) != CACHE_OK) goto out;
    if (!(flags & CACHE_PATH_NO_SIDECARS)) {
      char side[NAME_MAX + 16];
      for (int i = 0; i < 3; i++) {
        snprintf(side, sizeof side, "%s%s", c, sidecar_suffix[i]);
        if (fstatat(w.dfd, side, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(st.st_mode)) {
          cache_seterr(err, errlen, "%s%s is not a regular file", w.resolved, sidecar_suffix[i]);
          goto out;
        }
        snprintf(target, PATH_MAX, "%s%s", w.resolved, sidecar_suffix[i]);
        if (perm_check("cache file", target, &st, 0, flags, err, errlen) != CACHE_OK) goto out;
      }
    }
    rc = CACHE_OK;
    goto done;
  }
  cache_seterr(err, errlen, "%s names a directory, not a file", path);
  goto out;
done:
  if (resolved && rc == CACHE_OK) {
    *resolved = strdup(w.resolved);
    if (!*resolved) {
      cache_seterr(err, errlen, "out of memory");
      rc = CACHE_ERR;
    }
  }
out:
  if (w.dfd >= 0) close(w.dfd);
  free(w.resolved);
  free(pd.buf);
  free(target);
  return rc;
}

int cache_check_permissions(const char *path, int allow_group_write, char *err, size_t errlen) {
  if (!path || !*path) {
    cache_seterr(err, errlen, "check permissions: empty path");
    return CACHE_ERR;
  }
  if (strcmp(path, ":memory:") == 0) return CACHE_OK;
  return cache_path_secure(path, allow_group_write ? CACHE_PATH_GROUP_OK : 0, 0700, 0600, NULL,
                           err, errlen);
}
