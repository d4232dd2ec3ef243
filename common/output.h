/* Outputs that behave like files: how podsim writes every file it is asked
 * to write (traces, timelines, pictures, CSV, HTML reports, sweep rows).
 *
 * A user names an output and expects what a shell redirection does: an
 * existing device or FIFO (/dev/null, /dev/stdout, a pipe) is written
 * through, never replaced; a symlink is followed and its target written;
 * only a regular file (or a new one) is written to a temporary file beside
 * it and renamed over it, so that it appears whole or not at all. Every
 * write, flush and close is checked (a full disk is an error, not a 0-byte
 * file), and errors name the output the user gave, never the temporary.
 * An output directory (--report DIR) is staged beside DIR and appears
 * complete or not at all. A streamed output (sweep -o) is locked against
 * a second writer.
 *
 * common/ is the lowest floor: GLib and POSIX only.
 */
#ifndef PS_COMMON_OUTPUT_H
#define PS_COMMON_OUTPUT_H

#include <glib.h>
#include <stdio.h>

G_BEGIN_DECLS

/* Writes `len` bytes as the output `path` ("-": standard output), as the
 * header says. PS_ERROR_IO naming `path` on any failure; a regular file
 * that existed is then unchanged. */
gboolean ps_output_write (const char *path, const char *data, gsize len, GError **error);

/* The same, written in pieces (an output too large to hold, such as
 * sweep --merge's table): begin, put any number of times, then commit
 * (which renames a regular file's temporary into place) or abort (which
 * removes it: a regular file that existed is unchanged). Standard output
 * and devices get each piece as it is put. commit and abort free `o`. */
typedef struct PsOutputFile PsOutputFile;
PsOutputFile *ps_output_file_begin (const char *path, GError **error);
/* The same, but standard output and devices too get nothing before
 * commit (the pieces wait in an unlinked file in the temporary
 * directory), so an abort leaves them no part of the output. */
PsOutputFile *ps_output_file_begin_whole (const char *path, GError **error);
gboolean ps_output_file_put (PsOutputFile *o, const char *data, gsize len, GError **error);
gboolean ps_output_file_commit (PsOutputFile *o, GError **error);
void ps_output_file_abort (PsOutputFile *o);

/* A streamed output: opened for writing (appending when `append`), locked
 * with flock so that a second podsim writing the same file is refused at
 * once (PS_ERROR_IO "... is being written by another podsim"). Not
 * atomic: rows are appended as they come. `path` "-" is standard output
 * (not locked). transfer full; close with ps_output_stream_close. */
FILE *ps_output_stream_open (const char *path, gboolean append, GError **error);
/* Writes and flushes `text`; FALSE with PS_ERROR_IO naming `path`. */
gboolean ps_output_stream_put (FILE *f, const char *path, const char *text, GError **error);
/* Closes (standard output: flushes) and checks; FALSE with PS_ERROR_IO. */
gboolean ps_output_stream_close (FILE *f, const char *path, GError **error);

/* An output directory: files are written into a staging directory beside
 * `dir` (ps_output_dir_path), then ps_output_dir_commit moves them into
 * place (a new dir is renamed whole; an existing one gets each file by
 * rename); ps_output_dir_free without commit removes the staging files. */
typedef struct PsOutputDir PsOutputDir;
PsOutputDir *ps_output_dir_begin (const char *dir, GError **error);
/* The staging path of file `name` (transfer full); writes to it are
 * recorded for commit. */
char *ps_output_dir_file (PsOutputDir *d, const char *name);
gboolean ps_output_dir_commit (PsOutputDir *d, GError **error);
/* Rewrites an error's message so it names `dir`, not the staging path. */
void ps_output_dir_name_error (const PsOutputDir *d, GError *e);
void ps_output_dir_free (PsOutputDir *d);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsOutputDir, ps_output_dir_free)

G_END_DECLS

#endif
