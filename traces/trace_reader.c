/* Streaming step-trace reader: decompresses with zlib (gzread also passes
 * plain text through), splits lines, parses and validates each one as it
 * comes, so that a simulator can replay a trace larger than memory and every
 * error names its line. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "traces/trace_private.h"

/* Longest line accepted: bounds memory on garbage input; an explicit mesh
 * order of 2^20 devices still fits. */
#define MAX_LINE_BYTES (64u << 20)

#define MAX_TOKENS 32

struct PsTraceReader {
  char *path;              /* as given, for messages */
  gzFile gz;               /* NULL when reading memory */
  const char *mem;
  gsize mem_len, mem_off;
  char chunk[65536];
  gsize chunk_len, chunk_off;
  gboolean eof;
  GString *line;           /* current line without '\n' */
  guint64 line_no;
  uLong crc;               /* over every byte before the end line */
  PsTraceHeader header;
  TrChecker checker;
  gboolean checker_ready;
  gboolean finished;
  PsTraceEvent event;
  char *name;              /* owned name of `event` */
  /* tokens of the current line: NUL-separated copy and byte offsets */
  char *tokbuf;
  guint n_tok;
  char *tok[MAX_TOKENS];
  gsize tok_off[MAX_TOKENS];
};

static gboolean
fail_at (PsTraceReader *r, GError **error, PsErrorCode code, gsize offset,
         const char *fmt, ...) G_GNUC_PRINTF (5, 6);

/* Reports at byte `offset` of the current line (G_MAXSIZE: no column). */
static gboolean
fail_at (PsTraceReader *r, GError **error, PsErrorCode code, gsize offset,
         const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  ps_set_error_at (error, code, r->path, (int) MIN (r->line_no, (guint64) G_MAXINT),
                   offset == G_MAXSIZE ? 0 : (int) MIN (offset + 1, (gsize) G_MAXINT),
                   "%s", msg);
  return FALSE;
}

/* ---- lines ------------------------------------------------------------------------ */

static gboolean
refill (PsTraceReader *r, GError **error)
{
  r->chunk_off = 0;
  r->chunk_len = 0;
  if (!r->gz)
    {
      gsize n = MIN (sizeof r->chunk, r->mem_len - r->mem_off);
      memcpy (r->chunk, r->mem + r->mem_off, n);
      r->mem_off += n;
      r->chunk_len = n;
      r->eof = n == 0;
      return TRUE;
    }
  int n = gzread (r->gz, r->chunk, sizeof r->chunk);
  int errnum = Z_OK;
  const char *zmsg = gzerror (r->gz, &errnum);
  /* zlib prefixes its message with the descriptor ("<fd:3>: "), which
   * says nothing to the user and is not deterministic */
  if (zmsg && g_str_has_prefix (zmsg, "<fd:") && strstr (zmsg, ": "))
    zmsg = strstr (zmsg, ": ") + 2;
  if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END))
    {
      if (errnum == Z_ERRNO)
        ps_set_error_at (error, PS_ERROR_IO, r->path, 0, 0, "read error: %s",
                         g_strerror (errno));
      else if (errnum == Z_BUF_ERROR)
        ps_set_error_at (error, PS_ERROR_CORRUPT, r->path, 0, 0,
                         "truncated compressed data (%s)", zmsg);
      else
        ps_set_error_at (error, PS_ERROR_CORRUPT, r->path, 0, 0,
                         "corrupt compressed data (%s)", zmsg);
      return FALSE;
    }
  r->chunk_len = (gsize) n;
  r->eof = n == 0;
  return TRUE;
}

/* Reads the next line into r->line. Returns 1, 0 at end of input, -1 on error. */
static int
next_line (PsTraceReader *r, GError **error)
{
  g_string_truncate (r->line, 0);
  for (;;)
    {
      if (r->chunk_off == r->chunk_len)
        {
          if (r->eof)
            break;
          if (!refill (r, error))
            return -1;
          if (r->eof)
            break;
        }
      const char *start = r->chunk + r->chunk_off;
      gsize avail = r->chunk_len - r->chunk_off;
      const char *nl = memchr (start, '\n', avail);
      gsize take = nl ? (gsize) (nl - start) : avail;
      /* Checked per piece, so /dev/zero fails at its first block instead of
       * after 64 MiB of one line. */
      if (memchr (start, '\0', take))
        {
          r->line_no++;
          fail_at (r, error, PS_ERROR_PARSE, G_MAXSIZE, "NUL byte in a text line "
                   "(not a step trace?)");
          return -1;
        }
      if (r->line->len + take > MAX_LINE_BYTES)
        {
          r->line_no++;
          fail_at (r, error, PS_ERROR_PARSE, G_MAXSIZE, "line longer than %u bytes",
                   MAX_LINE_BYTES);
          return -1;
        }
      g_string_append_len (r->line, start, (gssize) take);
      r->chunk_off += take + (nl ? 1 : 0);
      if (nl)
        {
          r->line_no++;
          return 1;
        }
    }
  if (r->line->len > 0)
    {
      r->line_no++;
      fail_at (r, error, PS_ERROR_CORRUPT, G_MAXSIZE,
               "truncated trace: last line has no newline");
      return -1;
    }
  return 0;
}

static void
add_crc (PsTraceReader *r)
{
  r->crc = crc32 (r->crc, (const Bytef *) r->line->str, (uInt) r->line->len);
  r->crc = crc32 (r->crc, (const Bytef *) "\n", 1);
}

/* Splits the current line at runs of blanks. */
static gboolean
tokenize (PsTraceReader *r, GError **error)
{
  g_free (r->tokbuf);
  r->tokbuf = g_strndup (r->line->str, r->line->len);
  r->n_tok = 0;
  char *p = r->tokbuf;
  for (;;)
    {
      while (*p == ' ' || *p == '\t')
        *p++ = '\0';
      if (!*p)
        break;
      if (r->n_tok == MAX_TOKENS)
        return fail_at (r, error, PS_ERROR_PARSE, (gsize) (p - r->tokbuf),
                        "too many fields");
      r->tok[r->n_tok] = p;
      r->tok_off[r->n_tok++] = (gsize) (p - r->tokbuf);
      while (*p && *p != ' ' && *p != '\t')
        {
          if (*p == '\r')
            return fail_at (r, error, PS_ERROR_PARSE, (gsize) (p - r->tokbuf),
                            "carriage return (lines end with \\n alone, not \\r\\n)");
          if ((unsigned char) *p < 0x20 || (unsigned char) *p >= 0x7f)
            return fail_at (r, error, PS_ERROR_PARSE, (gsize) (p - r->tokbuf),
                            "unexpected byte 0x%02x", (unsigned char) *p);
          p++;
        }
    }
  return TRUE;
}

/* Next line that is not a comment, tokenized; 0 at end of input. */
static int
next_record (PsTraceReader *r, GError **error)
{
  for (;;)
    {
      int rc = next_line (r, error);
      if (rc <= 0)
        return rc;
      if (r->line->str[0] == '#')
        {
          add_crc (r);
          continue;
        }
      if (!tokenize (r, error))
        return -1;
      if (r->n_tok == 0)
        {
          fail_at (r, error, PS_ERROR_PARSE, G_MAXSIZE, "empty line");
          return -1;
        }
      return 1;
    }
}

/* ---- values --------------------------------------------------------------------------- */

static gboolean
parse_u64 (PsTraceReader *r, const char *text, gsize offset, const char *what,
           guint64 *out, GError **error)
{
  guint64 v = 0;
  const char *p = text;
  if (!g_ascii_isdigit (*p))
    return fail_at (r, error, PS_ERROR_PARSE, offset, "bad number '%s' for %s", text, what);
  for (; g_ascii_isdigit (*p); p++)
    {
      guint d = (guint) (*p - '0');
      if (v > (G_MAXUINT64 - d) / 10)
        return fail_at (r, error, PS_ERROR_PARSE, offset, "number '%s' for %s does not "
                        "fit 64 bits", text, what);
      v = v * 10 + d;
    }
  if (*p)
    return fail_at (r, error, PS_ERROR_PARSE, offset, "bad number '%s' for %s", text, what);
  *out = v;
  return TRUE;
}

/* "AxBxC..." into dims; n_want 0 means any count up to max. */
static gboolean
parse_dims (PsTraceReader *r, const char *text, gsize offset, const char *what,
            guint max, guint64 *dims, guint *n, GError **error)
{
  g_auto (GStrv) parts = g_strsplit (text, "x", -1);
  guint count = g_strv_length (parts);
  if (count > max)
    return fail_at (r, error, PS_ERROR_PARSE, offset, "%s has more than %u dimensions",
                    what, max);
  gsize off = offset;
  for (guint i = 0; i < count; i++)
    {
      if (!parse_u64 (r, parts[i], off, what, &dims[i], error))
        return FALSE;
      off += strlen (parts[i]) + 1;
    }
  *n = count;
  return TRUE;
}

static gboolean
expect_tokens (PsTraceReader *r, guint n, const char *form, GError **error)
{
  if (r->n_tok != n)
    return fail_at (r, error, PS_ERROR_PARSE,
                    r->n_tok > n ? r->tok_off[n] : r->line->len,
                    r->n_tok > n ? "unexpected field '%s' (expected '%s')"
                                 : "missing field%s (expected '%s')",
                    r->n_tok > n ? r->tok[n] : "", form);
  return TRUE;
}

/* key=value fields from token `first` on. Each known key may appear once;
 * values[i] is NULL when absent, offsets give the value's column. */
typedef struct {
  const char *const *keys;
  guint n;
  const char *values[16];
  gsize value_off[16];
  gsize key_off[16];
} Fields;

static gboolean
parse_fields (PsTraceReader *r, guint first, Fields *f, const char *line_kind,
              GError **error)
{
  for (guint i = 0; i < f->n; i++)
    f->values[i] = NULL;
  for (guint t = first; t < r->n_tok; t++)
    {
      char *eq = strchr (r->tok[t], '=');
      if (!eq)
        return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[t],
                        "expected key=value, got '%s'", r->tok[t]);
      *eq = '\0';
      guint k;
      for (k = 0; k < f->n; k++)
        if (strcmp (r->tok[t], f->keys[k]) == 0)
          break;
      if (k == f->n)
        return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[t],
                        "unknown field '%s' in a %s line", r->tok[t], line_kind);
      if (f->values[k])
        return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[t],
                        "field '%s' given twice", r->tok[t]);
      f->values[k] = eq + 1;
      f->key_off[k] = r->tok_off[t];
      f->value_off[k] = r->tok_off[t] + (gsize) (eq + 1 - r->tok[t]);
    }
  return TRUE;
}

static gboolean
require (PsTraceReader *r, Fields *f, guint k, const char *line_kind, GError **error)
{
  if (!f->values[k])
    return fail_at (r, error, PS_ERROR_PARSE, r->line->len,
                    "%s line without %s=", line_kind, f->keys[k]);
  return TRUE;
}

static gboolean
field_u64 (PsTraceReader *r, Fields *f, guint k, guint64 *out, GError **error)
{
  return parse_u64 (r, f->values[k], f->value_off[k], f->keys[k], out, error);
}

/* ---- header ------------------------------------------------------------------------------ */

static gboolean
header_line (PsTraceReader *r, const char *want, GError **error)
{
  int rc = next_record (r, error);
  if (rc < 0)
    return FALSE;
  if (rc == 0)
    {
      ps_set_error_at (error, PS_ERROR_CORRUPT, r->path, 0, 0,
                       "truncated trace: ends before the '%s' line", want);
      return FALSE;
    }
  if (strcmp (r->tok[0], want) != 0)
    return fail_at (r, error, PS_ERROR_PARSE, 0, "expected the '%s' line, got '%s'",
                    want, r->tok[0]);
  add_crc (r);
  return TRUE;
}

static gboolean
read_header (PsTraceReader *r, GError **error)
{
  PsTraceHeader *h = &r->header;
  guint64 v;

  int rc = next_record (r, error);
  if (rc < 0)
    return FALSE;
  if (rc == 0)
    {
      ps_set_error_at (error, PS_ERROR_CORRUPT, r->path, 0, 0, "empty file, not a step "
                       "trace");
      return FALSE;
    }
  if (strcmp (r->tok[0], "pstrace") != 0)
    return fail_at (r, error, PS_ERROR_PARSE, 0, "not a step trace (expected 'pstrace %d')",
                    PS_TRACE_FORMAT_VERSION);
  add_crc (r);
  if (!expect_tokens (r, 2, "pstrace VERSION", error)
      || !parse_u64 (r, r->tok[1], r->tok_off[1], "version", &v, error))
    return FALSE;
  if (v < PS_TRACE_FORMAT_VERSION_MIN || v > PS_TRACE_FORMAT_VERSION)
    return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[1], "unsupported trace version "
                    "%" G_GUINT64_FORMAT " (this podsim reads versions %d to %d)", v,
                    PS_TRACE_FORMAT_VERSION_MIN, PS_TRACE_FORMAT_VERSION);
  h->version = (guint) v;

  if (!header_line (r, "program", error) || !expect_tokens (r, 2, "program NAME", error))
    return FALSE;
  h->program = g_strdup (r->tok[1]);
  if (!tr_decode_name (h->program))
    return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[1], "bad %%XX escape in name");

  if (!header_line (r, "devices", error) || !expect_tokens (r, 2, "devices N", error)
      || !parse_u64 (r, r->tok[1], r->tok_off[1], "devices", &h->n_devices, error))
    return FALSE;
  if (h->n_devices == 0 || h->n_devices > PS_TRACE_MAX_DEVICES)
    return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[1], "device count %"
                    G_GUINT64_FORMAT " outside 1..%u", h->n_devices, PS_TRACE_MAX_DEVICES);

  if (!header_line (r, "mesh", error) || !expect_tokens (r, 3, "mesh DIMS order=ORDER", error))
    return FALSE;
  guint64 dims[PS_TRACE_MAX_RANK];
  if (!parse_dims (r, r->tok[1], r->tok_off[1], "mesh", PS_TRACE_MAX_RANK, dims,
                   &h->mesh.rank, error))
    return FALSE;
  guint64 n = 1;
  for (guint i = 0; i < h->mesh.rank; i++)
    {
      if (dims[i] == 0 || dims[i] > PS_TRACE_MAX_DEVICES)
        return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[1], "mesh dimension %u is %"
                        G_GUINT64_FORMAT, i, dims[i]);
      h->mesh.dims[i] = (gint64) dims[i];
      n = n * dims[i] > G_MAXUINT32 ? G_MAXUINT32 + (guint64) 1 : n * dims[i];
    }
  if (n != h->n_devices)
    return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[1], "mesh %s holds %"
                    G_GUINT64_FORMAT " devices but the trace has %" G_GUINT64_FORMAT,
                    r->tok[1], n, h->n_devices);
  if (!g_str_has_prefix (r->tok[2], "order="))
    return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[2], "expected order=ORDER");
  {
    g_autofree char *why = NULL;
    gsize at = 0;
    if (!tr_parse_order (r->tok[2] + 6, &h->mesh, &why, &at))
      return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[2] + 6 + at, "%s", why);
    if (h->mesh.order == PS_TRACE_ORDER_LIST)
      {
        guint64 count = 1;
        for (const char *p = r->tok[2]; *p; p++)
          count += *p == ',';
        if (count != n)
          return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[2] + 6, "order list has %"
                          G_GUINT64_FORMAT " ids for %" G_GUINT64_FORMAT " devices",
                          count, n);
      }
    why = tr_check_header (h);
    if (why)
      return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[2] + 6, "%s", why);
  }

  rc = next_record (r, error);
  if (rc < 0)
    return FALSE;
  if (rc > 0 && strcmp (r->tok[0], "slice") == 0)
    {
      add_crc (r);
      if (!expect_tokens (r, 2, "slice HINT", error))
        return FALSE;
      h->slice = g_strdup (r->tok[1]);
      if (!tr_decode_name (h->slice))
        return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[1], "bad %%XX escape in slice");
      rc = next_record (r, error);
      if (rc < 0)
        return FALSE;
    }
  if (rc == 0)
    {
      ps_set_error_at (error, PS_ERROR_CORRUPT, r->path, 0, 0,
                       "truncated trace: ends before the 'totals' line");
      return FALSE;
    }
  if (strcmp (r->tok[0], "totals") != 0)
    return fail_at (r, error, PS_ERROR_PARSE, 0, "expected the 'totals' line, got '%s'",
                    r->tok[0]);
  add_crc (r);
  static const char *const keys[] = { "events", "flops", "read_bytes", "write_bytes",
                                      "collective_bytes", "peak_bytes" };
  Fields f = { keys, G_N_ELEMENTS (keys) };
  guint64 *dst[] = { &h->totals.n_events, &h->totals.flops, &h->totals.read_bytes,
                     &h->totals.write_bytes, &h->totals.collective_bytes,
                     &h->totals.peak_bytes };
  if (!parse_fields (r, 1, &f, "totals", error))
    return FALSE;
  for (guint k = 0; k < f.n; k++)
    if (!require (r, &f, k, "totals", error) || !field_u64 (r, &f, k, dst[k], error))
      return FALSE;
  return TRUE;
}

/* ---- events ------------------------------------------------------------------------------ */

static gboolean
take_name (PsTraceReader *r, Fields *f, guint k, GError **error)
{
  g_free (r->name);
  r->name = g_strdup (f->values[k]);
  if (!tr_decode_name (r->name))
    return fail_at (r, error, PS_ERROR_PARSE, f->value_off[k], "bad %%XX escape in name");
  r->event.name = r->name;
  return TRUE;
}

static gboolean
take_dtype (PsTraceReader *r, Fields *f, guint k, PsTraceDtype *out, GError **error)
{
  if (!ps_trace_dtype_from_name (f->values[k], out))
    return fail_at (r, error, PS_ERROR_PARSE, f->value_off[k], "unknown dtype '%s'",
                    f->values[k]);
  return TRUE;
}

static gboolean
parse_compute (PsTraceReader *r, GError **error)
{
  PsTraceCompute *c = &r->event.compute;
  enum { NAME, DTYPE, PRECISION, FLOPS, READ, WRITE, VECTOR, MXU, WINDOW };
  static const char *const keys[] = { "name", "dtype", "precision", "flops",
                                      "read_bytes", "write_bytes", "vector_ops", "mxu",
                                      "window" };
  Fields f = { keys, G_N_ELEMENTS (keys) };
  if (r->n_tok < 2)
    return fail_at (r, error, PS_ERROR_PARSE, r->line->len, "compute line without a kind");
  guint i;
  for (i = 0; i < PS_TRACE_OP_COUNT; i++)
    if (strcmp (r->tok[1], ps_trace_op_kind_name ((PsTraceOpKind) i)) == 0)
      break;
  if (i == PS_TRACE_OP_COUNT)
    return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[1], "unknown compute kind '%s' "
                    "(expected matmul, conv, elementwise, reduce, data-movement or other)",
                    r->tok[1]);
  c->op = (PsTraceOpKind) i;
  if (!parse_fields (r, 2, &f, "compute", error))
    return FALSE;
  for (guint k = NAME; k <= WRITE; k++)
    if (k != PRECISION && !require (r, &f, k, "compute", error))
      return FALSE;
  if (!take_name (r, &f, NAME, error) || !take_dtype (r, &f, DTYPE, &c->dtype, error)
      || !field_u64 (r, &f, FLOPS, &c->flops, error)
      || !field_u64 (r, &f, READ, &c->read_bytes, error)
      || !field_u64 (r, &f, WRITE, &c->write_bytes, error)
      || (f.values[VECTOR] && !field_u64 (r, &f, VECTOR, &c->vector_ops, error)))
    return FALSE;
  c->precision = PS_TRACE_PRECISION_DEFAULT;
  if (f.values[PRECISION])
    {
      const char *p = f.values[PRECISION];
      if (strcmp (p, "default") == 0)
        c->precision = PS_TRACE_PRECISION_DEFAULT;
      else if (strcmp (p, "high") == 0)
        c->precision = PS_TRACE_PRECISION_HIGH;
      else if (strcmp (p, "highest") == 0)
        c->precision = PS_TRACE_PRECISION_HIGHEST;
      else
        return fail_at (r, error, PS_ERROR_PARSE, f.value_off[PRECISION], "unknown "
                        "precision '%s' (expected default, high or highest)", p);
    }
  if (f.values[MXU])
    {
      guint64 d[4];
      guint n;
      if (!parse_dims (r, f.values[MXU], f.value_off[MXU], "mxu", 4, d, &n, error))
        return FALSE;
      if (n != 4)
        return fail_at (r, error, PS_ERROR_PARSE, f.value_off[MXU], "mxu needs 4 dims "
                        "BATCHxMxKxN, got '%s'", f.values[MXU]);
      c->has_mxu = TRUE;
      c->mxu_batch = d[0];
      c->mxu_m = d[1];
      c->mxu_k = d[2];
      c->mxu_n = d[3];
    }
  if (f.values[WINDOW])
    {
      if (c->op != PS_TRACE_OP_CONV)
        return fail_at (r, error, PS_ERROR_PARSE, f.key_off[WINDOW], "window= on a %s event "
                        "(only conv has a window)", r->tok[1]);
      if (!field_u64 (r, &f, WINDOW, &c->mxu_window, error))
        return FALSE;
      if (c->mxu_window == 0)
        return fail_at (r, error, PS_ERROR_PARSE, f.value_off[WINDOW], "window must be positive");
    }
  return TRUE;
}

static gboolean
parse_loop (PsTraceReader *r, GError **error)
{
  enum { TRIPS, NAME };
  static const char *const keys[] = { "trips", "name" };
  Fields f = { keys, G_N_ELEMENTS (keys) };
  if (!parse_fields (r, 1, &f, "loop", error))
    return FALSE;
  return require (r, &f, TRIPS, "loop", error) && require (r, &f, NAME, "loop", error)
         && field_u64 (r, &f, TRIPS, &r->event.trips, error) && take_name (r, &f, NAME, error);
}

static gboolean
parse_collective (PsTraceReader *r, GError **error)
{
  PsTraceCollective *c = &r->event.collective;
  enum { NAME, DTYPE, IN, OUT, GROUPS, PAIRS, ASYNC };
  static const char *const keys[] = { "name", "dtype", "in_bytes", "out_bytes",
                                      "groups", "pairs", "async" };
  Fields f = { keys, G_N_ELEMENTS (keys) };
  if (r->n_tok < 2)
    return fail_at (r, error, PS_ERROR_PARSE, r->line->len, "collective line without a kind");
  guint i;
  for (i = 0; i < PS_TRACE_COLLECTIVE_COUNT; i++)
    if (strcmp (r->tok[1], ps_trace_collective_kind_name ((PsTraceCollectiveKind) i)) == 0)
      break;
  if (i == PS_TRACE_COLLECTIVE_COUNT)
    return fail_at (r, error, PS_ERROR_PARSE, r->tok_off[1], "unknown collective kind "
                    "'%s' (expected all-reduce, all-gather, reduce-scatter, all-to-all or "
                    "collective-permute)", r->tok[1]);
  c->kind = (PsTraceCollectiveKind) i;
  if (!parse_fields (r, 2, &f, "collective", error))
    return FALSE;
  gboolean permute = c->kind == PS_TRACE_COLLECTIVE_PERMUTE;
  guint where = permute ? PAIRS : GROUPS, other = permute ? GROUPS : PAIRS;
  for (guint k = NAME; k <= OUT; k++)
    if (!require (r, &f, k, "collective", error))
      return FALSE;
  if (f.values[other])
    return fail_at (r, error, PS_ERROR_PARSE, f.key_off[other], "%s takes %s=, not %s=",
                    r->tok[1], keys[where], keys[other]);
  if (!require (r, &f, where, "collective", error)
      || !take_name (r, &f, NAME, error) || !take_dtype (r, &f, DTYPE, &c->dtype, error)
      || !field_u64 (r, &f, IN, &c->in_bytes, error)
      || !field_u64 (r, &f, OUT, &c->out_bytes, error))
    return FALSE;
  if (f.values[ASYNC])
    {
      if (!field_u64 (r, &f, ASYNC, &c->async_id, error))
        return FALSE;
      if (c->async_id == 0)
        return fail_at (r, error, PS_ERROR_PARSE, f.value_off[ASYNC], "async id must be "
                        "positive");
    }
  g_autofree char *why = NULL;
  gsize at = 0;
  if (permute)
    {
      if (!tr_parse_pairs (f.values[PAIRS], &c->pairs, &why, &at))
        return fail_at (r, error, PS_ERROR_PARSE, f.value_off[PAIRS] + at, "%s", why);
      why = tr_check_pairs (&c->pairs, &r->header);
      if (why)
        return fail_at (r, error, PS_ERROR_INVALID, f.value_off[PAIRS],
                        "pairs do not fit the mesh: %s", why);
    }
  else
    {
      if (!tr_parse_groups (f.values[GROUPS], &c->groups, &why, &at))
        return fail_at (r, error, PS_ERROR_PARSE, f.value_off[GROUPS] + at, "%s", why);
      why = tr_groups_resolve (&c->groups, &r->header);
      if (why)
        return fail_at (r, error, PS_ERROR_INVALID, f.value_off[GROUPS],
                        "groups do not fit the mesh: %s", why);
    }
  return TRUE;
}

static gboolean
parse_end (PsTraceReader *r, GError **error)
{
  static const char *const keys[] = { "events", "crc32" };
  Fields f = { keys, G_N_ELEMENTS (keys) };
  guint64 n;
  if (!parse_fields (r, 1, &f, "end", error) || !require (r, &f, 0, "end", error)
      || !require (r, &f, 1, "end", error) || !field_u64 (r, &f, 0, &n, error))
    return FALSE;
  if (n != r->checker.sums.n_events)
    return fail_at (r, error, PS_ERROR_INVALID, f.value_off[0], "end line counts %"
                    G_GUINT64_FORMAT " events but the trace has %" G_GUINT64_FORMAT,
                    n, r->checker.sums.n_events);
  const char *hex = f.values[1];
  if (strlen (hex) != 8 || strspn (hex, "0123456789abcdefABCDEF") != 8)
    return fail_at (r, error, PS_ERROR_PARSE, f.value_off[1], "crc32 must be 8 hex "
                    "digits, got '%s'", hex);
  gulong want = strtoul (hex, NULL, 16);
  if (want != r->crc)
    return fail_at (r, error, PS_ERROR_CORRUPT, f.value_off[1], "checksum mismatch: "
                    "crc32 of the lines before is %08lx (file corrupt?)",
                    (unsigned long) r->crc);
  g_autofree char *why = tr_checker_finish (&r->checker, TRUE);
  if (why)
    return fail_at (r, error, PS_ERROR_INVALID, G_MAXSIZE, "%s", why);
  /* Nothing may follow; reading to the end also lets zlib check the gzip
   * trailer (CRC and length). */
  int rc = next_line (r, error);
  if (rc < 0)
    return FALSE;
  if (rc > 0)
    return fail_at (r, error, PS_ERROR_PARSE, 0, "data after the end line");
  return TRUE;
}

gboolean
ps_trace_reader_next (PsTraceReader *r, const PsTraceEvent **event, GError **error)
{
  g_return_val_if_fail (r != NULL && event != NULL, FALSE);
  *event = NULL;
  if (r->finished)
    return TRUE;
  tr_event_clear (&r->event);
  memset (&r->event, 0, sizeof r->event);
  g_clear_pointer (&r->name, g_free);

  int rc = next_record (r, error);
  if (rc < 0)
    return FALSE;
  if (rc == 0)
    {
      ps_set_error_at (error, PS_ERROR_CORRUPT, r->path, 0, 0, "truncated trace: no end "
                       "line after %" G_GUINT64_FORMAT " events (line %" G_GUINT64_FORMAT
                       ")", r->checker.sums.n_events, r->line_no);
      return FALSE;
    }
  const char *what = r->tok[0];
  if (strcmp (what, "end") == 0)
    {
      if (!parse_end (r, error))
        return FALSE;
      r->finished = TRUE;
      return TRUE;
    }
  add_crc (r);
  gboolean ok;
  if (strcmp (what, "compute") == 0)
    {
      r->event.kind = PS_TRACE_EVENT_COMPUTE;
      ok = parse_compute (r, error);
    }
  else if (strcmp (what, "collective") == 0)
    {
      r->event.kind = PS_TRACE_EVENT_COLLECTIVE;
      ok = parse_collective (r, error);
    }
  else if (strcmp (what, "done") == 0)
    {
      r->event.kind = PS_TRACE_EVENT_DONE;
      ok = expect_tokens (r, 2, "done ID", error)
           && parse_u64 (r, r->tok[1], r->tok_off[1], "async id", &r->event.async_id, error);
    }
  else if (strcmp (what, "memory") == 0)
    {
      r->event.kind = PS_TRACE_EVENT_MEMORY;
      ok = expect_tokens (r, 2, "memory live_bytes=N", error);
      if (ok && !g_str_has_prefix (r->tok[1], "live_bytes="))
        ok = fail_at (r, error, PS_ERROR_PARSE, r->tok_off[1], "expected live_bytes=N");
      ok = ok && parse_u64 (r, r->tok[1] + 11, r->tok_off[1] + 11, "live_bytes",
                            &r->event.live_bytes, error);
    }
  else if (strcmp (what, "loop") == 0)
    {
      r->event.kind = PS_TRACE_EVENT_LOOP;
      ok = parse_loop (r, error);
    }
  else if (strcmp (what, "endloop") == 0)
    {
      r->event.kind = PS_TRACE_EVENT_END_LOOP;
      ok = expect_tokens (r, 1, "endloop", error);
    }
  else
    return fail_at (r, error, PS_ERROR_PARSE, 0, "unknown event '%s' (expected compute, "
                    "collective, done, memory, loop, endloop or end)", what);
  if (!ok)
    return FALSE;
  const char *key = NULL;
  g_autofree char *why = tr_checker_event (&r->checker, &r->event, &key);
  if (why)
    {
      gsize at = G_MAXSIZE;
      if (r->event.kind == PS_TRACE_EVENT_DONE)
        at = r->tok_off[1];
      for (guint t = 1; key && t < r->n_tok; t++)
        if (g_str_has_prefix (r->tok[t], key)
            && (r->tok[t][strlen (key)] == '\0' || r->tok[t][strlen (key)] == '='))
          at = r->tok_off[t]; /* parse_fields may have cut the token at '=' */
      return fail_at (r, error, PS_ERROR_INVALID, at, "%s", why);
    }
  *event = &r->event;
  return TRUE;
}

/* ---- open and close ---------------------------------------------------------------------- */

static PsTraceReader *
reader_new (const char *path)
{
  PsTraceReader *r = g_new0 (PsTraceReader, 1);
  r->path = g_strdup (path);
  r->line = g_string_new (NULL);
  r->crc = crc32 (0L, Z_NULL, 0);
  return r;
}

static PsTraceReader *
reader_start (PsTraceReader *r, GError **error)
{
  if (!read_header (r, error))
    {
      ps_trace_reader_free (r);
      return NULL;
    }
  tr_checker_init (&r->checker, &r->header);
  r->checker_ready = TRUE;
  return r;
}

PsTraceReader *
ps_trace_reader_open (const char *path, GError **error)
{
  g_return_val_if_fail (path != NULL, NULL);
  gboolean is_stdin = strcmp (path, "-") == 0;
  PsTraceReader *r = reader_new (is_stdin ? "<stdin>" : path);
  int fd = is_stdin ? dup (0) : open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    {
      ps_set_error_at (error, PS_ERROR_IO, r->path, 0, 0, "cannot open: %s",
                       g_strerror (errno));
      ps_trace_reader_free (r);
      return NULL;
    }
  r->gz = gzdopen (fd, "rb");
  if (!r->gz)
    {
      close (fd);
      ps_set_error_at (error, PS_ERROR_IO, r->path, 0, 0, "cannot open: out of memory");
      ps_trace_reader_free (r);
      return NULL;
    }
  gzbuffer (r->gz, 1 << 17);
  return reader_start (r, error);
}

const PsTraceHeader *
ps_trace_reader_header (const PsTraceReader *r)
{
  return &r->header;
}

guint64
ps_trace_reader_line (const PsTraceReader *r)
{
  return r->line_no;
}

void
ps_trace_reader_free (PsTraceReader *r)
{
  if (!r)
    return;
  if (r->gz)
    gzclose (r->gz);
  if (r->checker_ready)
    tr_checker_clear (&r->checker);
  tr_event_clear (&r->event);
  tr_header_clear (&r->header);
  g_free (r->name);
  g_free (r->tokbuf);
  g_string_free (r->line, TRUE);
  g_free (r->path);
  g_free (r);
}

/* ---- whole traces ------------------------------------------------------------------------- */

static PsTrace *
read_all (PsTraceReader *r, GError **error)
{
  if (!r)
    return NULL;
  PsTrace *t = ps_trace_new (NULL);
  tr_header_clear (&t->header);
  tr_header_copy (&t->header, &r->header);
  for (;;)
    {
      const PsTraceEvent *e;
      if (!ps_trace_reader_next (r, &e, error))
        {
          ps_trace_free (t);
          ps_trace_reader_free (r);
          return NULL;
        }
      if (!e)
        break;
      switch (e->kind)
        {
        case PS_TRACE_EVENT_COMPUTE:
          ps_trace_add_compute (t, e->name, &e->compute);
          break;
        case PS_TRACE_EVENT_COLLECTIVE:
          ps_trace_add_collective (t, e->name, &e->collective);
          break;
        case PS_TRACE_EVENT_DONE:
          ps_trace_add_done (t, e->async_id);
          break;
        case PS_TRACE_EVENT_MEMORY:
          ps_trace_add_memory (t, e->live_bytes);
          break;
        case PS_TRACE_EVENT_LOOP:
          ps_trace_add_loop (t, e->name, e->trips);
          break;
        case PS_TRACE_EVENT_END_LOOP:
          ps_trace_add_end_loop (t);
          break;
        default:
          g_assert_not_reached ();
        }
    }
  ps_trace_reader_free (r);
  return t;
}

PsTrace *
ps_trace_read (const char *path, GError **error)
{
  return read_all (ps_trace_reader_open (path, error), error);
}

PsTrace *
ps_trace_parse (const char *name, const char *text, gsize len, GError **error)
{
  PsTraceReader *r = reader_new (name);
  r->mem = text;
  r->mem_len = len;
  return read_all (reader_start (r, error), error);
}
