/* podsim's error domain and the helpers every floor uses to report errors a
 * user can cause.
 *
 * Errors a user can cause (a malformed file, a bad option, an unsupported op,
 * a program that does not fit) are reported as a GError in domain PS_ERROR.
 * Messages that point into a file start with "FILE:LINE:COL: " so that the
 * command line prints exactly one line and editors can jump to it.
 * g_return_val_if_fail()/g_assert() are for programmer errors only.
 *
 * common/ is the lowest floor: it includes GLib only and every other folder
 * may include it.
 */
#ifndef PS_COMMON_ERROR_H
#define PS_COMMON_ERROR_H

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

#define PS_ERROR (ps_error_quark ())
GQuark ps_error_quark (void);

typedef enum {
  PS_ERROR_PARSE,       /* malformed input text (HLO, sharding, trace, ini) */
  PS_ERROR_IO,          /* cannot open, read or write a file */
  PS_ERROR_INVALID,     /* well-formed but inconsistent (shape mismatch, ...) */
  PS_ERROR_UNSUPPORTED, /* valid input that podsim does not handle yet */
  PS_ERROR_OPTION,      /* bad command-line option value */
  PS_ERROR_NO_FIT,      /* a program that does not fit in memory */
  PS_ERROR_CORRUPT,     /* truncated or corrupt compressed file */
  PS_ERROR_LIMIT,       /* over a configured size or work limit (interpreter caps) */
} PsErrorCode;

/* Exit status for errors a user caused (bad input, bad option). */
#define PS_EXIT_USAGE 2

/* Sets *error to "FILE:LINE:COL: message". line and col are 1-based; a
 * col of 0 prints "FILE:LINE: message"; a line of 0 prints "FILE: message". */
void ps_set_error_at (GError **error, PsErrorCode code, const char *file,
                      int line, int col, const char *fmt, ...) G_GNUC_PRINTF (6, 7);

/* Computes the 1-based line and column of byte offset `offset` in `text`. */
void ps_text_position (const char *text, gsize offset, int *line, int *col);

/* Parses a byte size such as "64MiB", "1GB", "512k", "1e9" or "4096".
 * Binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones
 * (kB, KB, k, MB, M, GB, G, TB, T) powers of 1000. Returns FALSE with a
 * PS_ERROR_OPTION error naming `what` on bad input. */
gboolean ps_parse_bytes (const char *text, const char *what, guint64 *out_bytes,
                         GError **error);

/* Formats a byte count for humans ("1.50 GiB"). transfer full. */
char *ps_format_bytes (double bytes);

/* Formats a duration in seconds for humans ("12.3 ms"). transfer full. */
char *ps_format_seconds (double seconds);

/* The index of `text` in names[0..n-1]; otherwise FALSE with the
 * PS_ERROR_OPTION error "OPTION: unknown WHAT 'TEXT' (name, name, ...)". */
gboolean ps_parse_name (const char *text, const char *const *names, int n, const char *option,
                        const char *what, int *out, GError **error);

/* Greatest common divisor of two non-negative integers (gcd (0, b) = b). */
int64_t ps_gcd64 (int64_t a, int64_t b);

/* Writes `len` bytes as the output `path`: ps_output_write (output.h), which
 * renames a temporary over a regular file (a failed run never leaves a
 * partial one), writes through devices and FIFOs, follows symlinks and
 * checks every write. `-` writes standard output. */
gboolean ps_write_file_atomic (const char *path, const char *data, gsize len,
                               GError **error);

/* Whether a command shows its progress line on stderr: never with -q,
 * otherwise when stderr is a terminal, or when the environment sets
 * PODSIM_PROGRESS=1 (logs that want it, and the tests that check -q). */
gboolean ps_progress_on (gboolean quiet);
/* When on: overwrites the progress line with the formatted text, at most
 * 5 times a second (NULL: clears it, always). */
void ps_progress (gboolean on, const char *fmt, ...) G_GNUC_PRINTF (2, 3);

G_END_DECLS

#endif
