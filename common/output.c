/* Outputs that behave like files: see output.h. */
#include "config.h"

#include "common/output.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

static gboolean
io_error (GError **error, const char *what, const char *path, int e)
{
  g_set_error (error, PS_ERROR, PS_ERROR_IO, "cannot %s %s: %s", what, path, g_strerror (e));
  return FALSE;
}

static gboolean
write_all (int fd, const char *data, gsize len, const char *path, GError **error)
{
  while (len > 0)
    {
      ssize_t n = write (fd, data, len);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return io_error (error, "write", path, n < 0 ? errno : EIO);
      data += n;
      len -= (gsize) n;
    }
  return TRUE;
}

/* The file a path finally names: symlinks followed (also a dangling one,
 * which then creates its target), so the rename replaces the target and
 * keeps the link. At most 40 links, as the kernel allows. */
static char *
resolve (const char *path)
{
  char *p = g_strdup (path);
  for (int i = 0; i < 40; i++)
    {
      GStatBuf st;
      if (g_lstat (p, &st) != 0 || !S_ISLNK (st.st_mode))
        break;
      char *link = g_file_read_link (p, NULL);
      if (!link)
        break;
      if (!g_path_is_absolute (link))
        {
          g_autofree char *dir = g_path_get_dirname (p);
          char *joined = g_build_filename (dir, link, NULL);
          g_free (link);
          link = joined;
        }
      g_free (p);
      p = link;
    }
  return p;
}

struct PsOutputFile {
  char *path;                /* as the user gave it, for errors */
  char *tmp, *target;        /* a regular file: the temporary and what it replaces; else NULL */
  int fd;                    /* -1: standard output */
  mode_t mode;
  int spool;                 /* whole only: pieces for stdout or a device, kept until commit; else -1 */
};

PsOutputFile *
ps_output_file_begin (const char *path, GError **error)
{
  PsOutputFile *o = g_new0 (PsOutputFile, 1);
  o->path = g_strdup (strcmp (path, "-") == 0 ? "standard output" : path);
  o->fd = -1;
  o->spool = -1;
  if (strcmp (path, "-") == 0)
    return o;
  struct stat st;
  gboolean exists = stat (path, &st) == 0;
  if (exists && S_ISDIR (st.st_mode))
    {
      io_error (error, "write", path, EISDIR);
      ps_output_file_abort (o);
      return NULL;
    }
  if (exists && !S_ISREG (st.st_mode))
    {
      /* A device, FIFO or socket: written through like a redirection. */
      o->fd = open (path, O_WRONLY | O_CLOEXEC);
      if (o->fd < 0)
        {
          io_error (error, "open", path, errno);
          ps_output_file_abort (o);
          return NULL;
        }
      return o;
    }
  o->target = resolve (path);
  g_autofree char *dir = g_path_get_dirname (o->target);
  g_autofree char *base = g_path_get_basename (o->target);
  g_autofree char *name = g_strdup_printf (".%s.podsim-XXXXXX", base);
  o->tmp = g_build_filename (dir, name, NULL);
  o->fd = g_mkstemp_full (o->tmp, O_WRONLY | O_CLOEXEC, 0666);
  if (o->fd < 0)
    {
      io_error (error, "create", path, errno);
      g_clear_pointer (&o->tmp, g_free);
      ps_output_file_abort (o);
      return NULL;
    }
  /* mkstemp makes 0600: give the file the mode a plain create (or the
   * file it replaces) would have. */
  if (exists)
    o->mode = st.st_mode & 07777;
  else
    {
      mode_t mask = umask (022);
      umask (mask);
      o->mode = 0666 & ~mask;
    }
  return o;
}

PsOutputFile *
ps_output_file_begin_whole (const char *path, GError **error)
{
  PsOutputFile *o = ps_output_file_begin (path, error);
  if (!o || o->tmp)
    return o;
  /* Standard output or a device cannot be renamed into place: the pieces
   * go to an unlinked file in the temporary directory (disk, not memory:
   * the output may be larger than memory) and are written at commit. */
  g_autofree char *name = g_build_filename (g_get_tmp_dir (), "podsim-spool-XXXXXX", NULL);
  o->spool = g_mkstemp_full (name, O_RDWR | O_CLOEXEC, 0600);
  if (o->spool < 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_IO, "cannot create a temporary file in %s for %s: %s",
                   g_get_tmp_dir (), o->path, g_strerror (errno));
      ps_output_file_abort (o);
      return NULL;
    }
  g_unlink (name);
  return o;
}

/* The spool's bytes, from its start, to the real output. */
static gboolean
unspool (PsOutputFile *o, GError **error)
{
  char buf[65536];
  if (lseek (o->spool, 0, SEEK_SET) != 0)
    return io_error (error, "write", o->path, errno);
  for (;;)
    {
      ssize_t n = read (o->spool, buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return io_error (error, "write", o->path, errno);
      if (n == 0)
        return TRUE;
      if (o->fd < 0 ? fwrite (buf, 1, (size_t) n, stdout) != (size_t) n
                    : !write_all (o->fd, buf, (gsize) n, o->path, error))
        return o->fd < 0 ? io_error (error, "write", o->path, errno) : FALSE;
    }
}

gboolean
ps_output_file_put (PsOutputFile *o, const char *data, gsize len, GError **error)
{
  if (o->spool >= 0)
    {
      /* The spool lives in $TMPDIR, not where the user pointed: a full
       * temporary directory must say so, or "cannot write standard
       * output" sends the user to the wrong disk. */
      g_autofree char *what = g_strdup_printf ("the copy of %s kept in %s until it is complete",
                                               o->path, g_get_tmp_dir ());
      return write_all (o->spool, data, len, what, error);
    }
  if (o->fd < 0)
    {
      if (fwrite (data, 1, len, stdout) != len)
        return io_error (error, "write", o->path, errno);
      return TRUE;
    }
  return write_all (o->fd, data, len, o->path, error);
}

gboolean
ps_output_file_commit (PsOutputFile *o, GError **error)
{
  gboolean ok = o->spool < 0 || unspool (o, error);
  if (ok && o->fd < 0)
    ok = fflush (stdout) == 0 || io_error (error, "write", o->path, errno);
  else if (ok)
    {
      if (o->tmp && fchmod (o->fd, o->mode) != 0)
        ok = io_error (error, "write", o->path, errno);
      if (close (o->fd) != 0 && ok)
        ok = io_error (error, "write", o->path, errno);
      o->fd = -1;
      if (ok && o->tmp && g_rename (o->tmp, o->target) != 0)
        ok = io_error (error, "write", o->path, errno);
      if (ok)
        g_clear_pointer (&o->tmp, g_free);
    }
  ps_output_file_abort (o);
  return ok;
}

void
ps_output_file_abort (PsOutputFile *o)
{
  if (!o)
    return;
  if (o->fd >= 0)
    close (o->fd);
  if (o->spool >= 0)
    close (o->spool);
  if (o->tmp)
    g_unlink (o->tmp);
  g_free (o->tmp);
  g_free (o->target);
  g_free (o->path);
  g_free (o);
}

gboolean
ps_output_write (const char *path, const char *data, gsize len, GError **error)
{
  PsOutputFile *o = ps_output_file_begin (path, error);
  if (!o)
    return FALSE;
  if (!ps_output_file_put (o, data, len, error))
    {
      ps_output_file_abort (o);
      return FALSE;
    }
  return ps_output_file_commit (o, error);
}

FILE *
ps_output_stream_open (const char *path, gboolean append, GError **error)
{
  if (strcmp (path, "-") == 0)
    return stdout;
  /* Not truncated before the lock is held: a second writer must not cut
   * the first one's rows before it is refused. */
  int fd = open (path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : 0), 0666);
  if (fd < 0)
    {
      io_error (error, "open", path, errno);
      return NULL;
    }
  struct stat st;
  gboolean regular = fstat (fd, &st) == 0 && S_ISREG (st.st_mode);
  if (regular && flock (fd, LOCK_EX | LOCK_NB) != 0)
    {
      int e = errno;
      close (fd);
      if (e == EWOULDBLOCK)
        g_set_error (error, PS_ERROR, PS_ERROR_IO, "%s is being written by another podsim (it holds the lock)",
                     path);
      else
        io_error (error, "lock", path, e);
      return NULL;
    }
  if (regular && !append && ftruncate (fd, 0) != 0)
    {
      io_error (error, "write", path, errno);
      close (fd);
      return NULL;
    }
  FILE *f = fdopen (fd, append ? "a" : "w");
  if (!f)
    {
      io_error (error, "open", path, errno);
      close (fd);
    }
  return f;
}

gboolean
ps_output_stream_put (FILE *f, const char *path, const char *text, GError **error)
{
  if (fputs (text, f) == EOF || fflush (f) != 0)
    return io_error (error, "write", strcmp (path, "-") == 0 ? "standard output" : path, errno);
  return TRUE;
}

gboolean
ps_output_stream_close (FILE *f, const char *path, GError **error)
{
  const char *name = strcmp (path, "-") == 0 ? "standard output" : path;
  if (f == stdout)
    return fflush (f) == 0 || io_error (error, "write", name, errno);
  /* The lock goes with the descriptor. */
  return fclose (f) == 0 || io_error (error, "write", name, errno);
}

struct PsOutputDir {
  char *dir, *stage;
  GPtrArray *names;          /* char*, files written into stage */
  gboolean committed;
};

PsOutputDir *
ps_output_dir_begin (const char *dir, GError **error)
{
  GStatBuf st;
  if (g_stat (dir, &st) == 0 && !S_ISDIR (st.st_mode))
    {
      io_error (error, "write", dir, ENOTDIR);
      return NULL;
    }
  g_autofree char *parent = g_path_get_dirname (dir);
  g_autofree char *base = g_path_get_basename (dir);
  if (g_mkdir_with_parents (parent, 0755) != 0)
    {
      io_error (error, "create", dir, errno);
      return NULL;
    }
  g_autofree char *name = g_strdup_printf (".%s.podsim-XXXXXX", base);
  char *stage = g_build_filename (parent, name, NULL);
  if (!g_mkdtemp_full (stage, 0755))
    {
      io_error (error, "create", dir, errno);
      g_free (stage);
      return NULL;
    }
  PsOutputDir *d = g_new0 (PsOutputDir, 1);
  d->dir = g_strdup (dir);
  d->stage = stage;
  d->names = g_ptr_array_new_with_free_func (g_free);
  return d;
}

char *
ps_output_dir_file (PsOutputDir *d, const char *name)
{
  g_ptr_array_add (d->names, g_strdup (name));
  return g_build_filename (d->stage, name, NULL);
}

gboolean
ps_output_dir_commit (PsOutputDir *d, GError **error)
{
  /* A new directory appears whole, by one rename. */
  if (!g_file_test (d->dir, G_FILE_TEST_EXISTS))
    {
      if (g_rename (d->stage, d->dir) != 0)
        return io_error (error, "write", d->dir, errno);
      d->committed = TRUE;
      return TRUE;
    }
  /* An existing one (it may hold other files) gets each file by rename:
   * nothing is left half written. */
  for (guint i = 0; i < d->names->len; i++)
    {
      g_autofree char *from = g_build_filename (d->stage, (char *) d->names->pdata[i], NULL);
      g_autofree char *to = g_build_filename (d->dir, (char *) d->names->pdata[i], NULL);
      if (g_rename (from, to) != 0)
        return io_error (error, "write", to, errno);
    }
  g_rmdir (d->stage);
  d->committed = TRUE;
  return TRUE;
}

void
ps_output_dir_name_error (const PsOutputDir *d, GError *e)
{
  if (!e)
    return;
  char *at = strstr (e->message, d->stage);
  if (!at)
    return;
  char *m = g_strdup_printf ("%.*s%s%s", (int) (at - e->message), e->message, d->dir, at + strlen (d->stage));
  g_free (e->message);
  e->message = m;
}

void
ps_output_dir_free (PsOutputDir *d)
{
  if (!d)
    return;
  if (!d->committed)
    {
      for (guint i = 0; i < d->names->len; i++)
        {
          g_autofree char *p = g_build_filename (d->stage, (char *) d->names->pdata[i], NULL);
          g_unlink (p);
        }
      g_rmdir (d->stage);
    }
  g_ptr_array_free (d->names, TRUE);
  g_free (d->dir);
  g_free (d->stage);
  g_free (d);
}
