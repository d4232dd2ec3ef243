/* The sharding text form: parser and printer (HLO_SYNTAX.md section 6).
 *
 * The parser is a small recursive-descent scanner over a byte range. It
 * skips whitespace and comments between tokens because HLO files split
 * long device lists over lines and put comments such as "/\*index=5*\/"
 * inside tuple shardings. Every error carries the byte offset of the token
 * at fault; the caller turns it into FILE:LINE:COL.
 */
#include "config.h"

#include <string.h>

#include "partitioner/ir/sharding.h"
#include "partitioner/ir/sharding_private.h"

typedef struct {
  const char *text;
  gsize len;
  gsize pos;
  gsize err_pos;
  GError *error;
} Parser;

static gboolean G_GNUC_PRINTF (3, 4)
fail (Parser *p, gsize at, const char *fmt, ...)
{
  if (p->error == NULL)
    {
      va_list ap;
      va_start (ap, fmt);
      char *msg = g_strdup_vprintf (fmt, ap);
      va_end (ap);
      p->error = g_error_new_literal (PS_ERROR, PS_ERROR_PARSE, msg);
      p->err_pos = at;
      g_free (msg);
    }
  return FALSE;
}

static void
skip_space (Parser *p)
{
  while (p->pos < p->len)
    {
      char c = p->text[p->pos];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
        p->pos++;
      else if (c == '/' && p->pos + 1 < p->len && p->text[p->pos + 1] == '*')
        {
          gsize q = p->pos + 2;
          while (q + 1 < p->len && !(p->text[q] == '*' && p->text[q + 1] == '/'))
            q++;
          if (q + 1 >= p->len)
            return;     /* unterminated: left for the caller to report */
          p->pos = q + 2;
        }
      else if (c == '/' && p->pos + 1 < p->len && p->text[p->pos + 1] == '/')
        {
          while (p->pos < p->len && p->text[p->pos] != '\n')
            p->pos++;
        }
      else
        return;
    }
}

static int
peek (Parser *p)
{
  skip_space (p);
  return p->pos < p->len ? (unsigned char) p->text[p->pos] : -1;
}

static const char *
describe_here (Parser *p)
{
  return p->pos < p->len ? "" : " (end of text)";
}

static gboolean
expect (Parser *p, char c, const char *what)
{
  if (peek (p) != c)
    return fail (p, p->pos, "expected '%c' %s%s", c, what, describe_here (p));
  p->pos++;
  return TRUE;
}

static gboolean
accept (Parser *p, char c)
{
  if (peek (p) != c)
    return FALSE;
  p->pos++;
  return TRUE;
}

/* A non-negative decimal integer. */
static gboolean
parse_int (Parser *p, const char *what, int64_t *out, gsize *at)
{
  int c = peek (p);
  *at = p->pos;
  if (c == '-')
    return fail (p, p->pos, "%s must not be negative", what);
  if (c < '0' || c > '9')
    return fail (p, p->pos, "expected %s (an integer)%s", what, describe_here (p));
  int64_t v = 0;
  while (p->pos < p->len && g_ascii_isdigit (p->text[p->pos]))
    {
      if (v > (G_MAXINT64 - 9) / 10)
        return fail (p, *at, "%s is too large", what);
      v = v * 10 + (p->text[p->pos] - '0');
      p->pos++;
    }
  *out = v;
  return TRUE;
}

/* '[' INT (',' INT)* ']' : dims that must each be >= 1. */
static gboolean
parse_dims (Parser *p, const char *what, GArray *dims)
{
  if (!expect (p, '[', what))
    return FALSE;
  do
    {
      int64_t v;
      gsize at;
      if (!parse_int (p, what, &v, &at))
        return FALSE;
      if (v < 1)
        return fail (p, at, "%s must be at least 1", what);
      if (dims->len >= PS_SHARDING_MAX_DIMS)
        return fail (p, at, "too many %s (at most %d)", what, PS_SHARDING_MAX_DIMS);
      g_array_append_val (dims, v);
    }
  while (accept (p, ','));
  return expect (p, ']', "after the dims");
}

static gboolean
checked_product (Parser *p, gsize at, GArray *dims, int64_t *out)
{
  int64_t n = 1;
  for (guint i = 0; i < dims->len; i++)
    {
      int64_t d = g_array_index (dims, int64_t, i);
      /* Divide first: multiplying could overflow before the check. */
      if (d > PS_SHARDING_MAX_DEVICES / n)
        return fail (p, at, "tile assignment has more than %" G_GINT64_FORMAT " devices",
                     PS_SHARDING_MAX_DEVICES);
      n *= d;
    }
  *out = n;
  return TRUE;
}

typedef struct {
  GArray *dims;              /* int64_t tile dims */
  int64_t *devices;          /* expanded, owned */
  gsize dims_at;
} TileAssign;

/* tile_assign ::= '[' dims ']' ( list | '<=[' dims ']' ('T(' perm ')')? ) */
static gboolean
parse_tile_assign (Parser *p, TileAssign *t)
{
  peek (p);
  t->dims_at = p->pos;
  if (!parse_dims (p, "tile dims", t->dims))
    return FALSE;
  int64_t n = 0;
  if (!checked_product (p, t->dims_at, t->dims, &n))
    return FALSE;
  if (peek (p) == '<')
    {
      gsize iota_at = p->pos;
      if (p->pos + 1 >= p->len || p->text[p->pos + 1] != '=')
        return fail (p, p->pos, "expected '<=' before the iota reshape dims");
      p->pos += 2;
      g_autoptr (GArray) rdims = g_array_new (FALSE, FALSE, sizeof (int64_t));
      gsize rdims_at = p->pos;
      if (!parse_dims (p, "iota reshape dims", rdims))
        return FALSE;
      int64_t rn = 0;
      if (!checked_product (p, rdims_at, rdims, &rn))
        return FALSE;
      if (rn != n)
        return fail (p, iota_at,
                     "iota reshape dims hold %" G_GINT64_FORMAT " devices but the tile dims"
                     " need %" G_GINT64_FORMAT, rn, n);
      int64_t perm[PS_SHARDING_MAX_DIMS];
      gboolean has_perm = FALSE;
      if (peek (p) == 'T')
        {
          gsize perm_at = p->pos;
          p->pos++;
          if (!expect (p, '(', "after 'T'"))
            return FALSE;
          guint np = 0;
          guint64 seen = 0;
          do
            {
              int64_t v;
              gsize at;
              if (!parse_int (p, "transpose dim", &v, &at))
                return FALSE;
              if (v >= (int64_t) rdims->len)
                return fail (p, at, "transpose dim %" G_GINT64_FORMAT " is out of range"
                             " (the reshape has %u dims)", v, rdims->len);
              if (seen & ((guint64) 1 << v))
                return fail (p, at, "transpose dim %" G_GINT64_FORMAT " appears twice", v);
              if (np >= rdims->len)
                return fail (p, at, "transpose has more dims than the reshape (%u)",
                             rdims->len);
              seen |= (guint64) 1 << v;
              perm[np++] = v;
            }
          while (accept (p, ','));
          if (!expect (p, ')', "after the transpose dims"))
            return FALSE;
          if (np != rdims->len)
            return fail (p, perm_at, "transpose has %u dims but the reshape has %u", np,
                         rdims->len);
          has_perm = TRUE;
        }
      t->devices = sh_expand_iota ((int) rdims->len, (int64_t *) rdims->data,
                                   has_perm ? perm : NULL);
      return TRUE;
    }
  /* Explicit list. */
  t->devices = g_new (int64_t, n);
  g_autoptr (GHashTable) seen = g_hash_table_new (g_int64_hash, g_int64_equal);
  int64_t count = 0;
  gsize list_at = p->pos;
  do
    {
      int64_t v;
      gsize at;
      if (!parse_int (p, "device id", &v, &at))
        return FALSE;
      if (count == n)
        return fail (p, at, "more device ids than the %" G_GINT64_FORMAT
                     " the tile dims need", n);
      if (g_hash_table_contains (seen, &v))
        return fail (p, at, "device %" G_GINT64_FORMAT " appears twice", v);
      t->devices[count] = v;
      g_hash_table_add (seen, &t->devices[count]);
      count++;
    }
  while (accept (p, ','));
  if (count != n)
    return fail (p, list_at, "tile dims need %" G_GINT64_FORMAT " device ids, found %"
                 G_GINT64_FORMAT, n, count);
  return TRUE;
}

/* Skips a balanced {...} (strings respected) and returns its extent. */
static gboolean
skip_braced (Parser *p, gsize *start, gsize *end)
{
  if (peek (p) != '{')
    {
      /* A bare value such as metadata=op_name is not XLA's form. */
      return fail (p, p->pos, "expected '{' after 'metadata='");
    }
  *start = p->pos;
  int depth = 0;
  while (p->pos < p->len)
    {
      char c = p->text[p->pos];
      if (c == '"')
        {
          p->pos++;
          while (p->pos < p->len && p->text[p->pos] != '"')
            {
              if (p->text[p->pos] == '\\')
                p->pos++;
              p->pos++;
            }
          if (p->pos >= p->len)
            return fail (p, *start, "unterminated string in metadata");
        }
      else if (c == '{')
        depth++;
      else if (c == '}')
        {
          depth--;
          if (depth == 0)
            {
              p->pos++;
              *end = p->pos;
              return TRUE;
            }
        }
      p->pos++;
    }
  return fail (p, *start, "unbalanced '{' in metadata");
}

static gboolean
is_word_char (char c)
{
  return g_ascii_isalnum (c) || c == '_';
}

/* single ::= '{' item* '}' */
static PsSharding *
parse_single (Parser *p)
{
  if (!expect (p, '{', "to open a sharding"))
    return NULL;
  gsize open_at = p->pos - 1;
  enum { K_NONE, K_REPL, K_MANUAL, K_UNKNOWN, K_MAXIMAL, K_DEVICES } kind = K_NONE;
  gsize kind_at = 0;
  gboolean has_device = FALSE, last_repl = FALSE, has_last_dims = FALSE;
  gsize device_at = 0, last_at = 0;
  int64_t device = 0;
  PsSubgroupKind kinds[PS_SHARDING_MAX_DIMS];
  int n_kinds = 0;
  PsShardGroupKind gkind = PS_SHARD_GROUP_NONE;
  int64_t gid = 0;
  char *metadata = NULL;
  TileAssign tile = { g_array_new (FALSE, FALSE, sizeof (int64_t)), NULL, 0 };
  PsSharding *result = NULL;

  for (;;)
    {
      int c = peek (p);
      if (c == '}')
        {
          p->pos++;
          break;
        }
      if (c < 0)
        {
          fail (p, open_at, "unterminated sharding: missing '}'");
          goto out;
        }
      gsize at = p->pos;
      if (!is_word_char ((char) c))
        {
          fail (p, at, "unexpected '%c' in sharding", c);
          goto out;
        }
      while (p->pos < p->len && is_word_char (p->text[p->pos]))
        p->pos++;
      g_autofree char *word = g_strndup (p->text + at, p->pos - at);
      int new_kind = K_NONE;
      if (strcmp (word, "replicated") == 0)
        new_kind = K_REPL;
      else if (strcmp (word, "manual") == 0)
        new_kind = K_MANUAL;
      else if (strcmp (word, "unknown") == 0)
        new_kind = K_UNKNOWN;
      else if (strcmp (word, "maximal") == 0)
        new_kind = K_MAXIMAL;
      else if (strcmp (word, "devices") == 0)
        {
          new_kind = K_DEVICES;
          if (!expect (p, '=', "after 'devices'"))
            goto out;
          if (kind == K_NONE && !parse_tile_assign (p, &tile))
            goto out;
        }
      else if (strcmp (word, "device") == 0)
        {
          if (has_device)
            {
              fail (p, at, "'device=' given twice");
              goto out;
            }
          if (!expect (p, '=', "after 'device'")
              || !parse_int (p, "device id", &device, &device_at))
            goto out;
          has_device = TRUE;
          continue;
        }
      else if (strcmp (word, "last_tile_dim_replicate") == 0)
        {
          if (last_repl || has_last_dims)
            {
              fail (p, at, "subgroup dims given twice");
              goto out;
            }
          last_repl = TRUE;
          last_at = at;
          continue;
        }
      else if (strcmp (word, "last_tile_dims") == 0)
        {
          if (last_repl || has_last_dims)
            {
              fail (p, at, "subgroup dims given twice");
              goto out;
            }
          has_last_dims = TRUE;
          last_at = at;
          if (!expect (p, '=', "after 'last_tile_dims'")
              || !expect (p, '{', "after 'last_tile_dims='"))
            goto out;
          do
            {
              peek (p);
              gsize kat = p->pos;
              while (p->pos < p->len && is_word_char (p->text[p->pos]))
                p->pos++;
              gsize klen = p->pos - kat;
              PsSubgroupKind k;
              if (klen == 6 && strncmp (p->text + kat, "manual", 6) == 0)
                k = PS_SUBGROUP_MANUAL;
              else if (klen == 10 && strncmp (p->text + kat, "replicated", 10) == 0)
                k = PS_SUBGROUP_REPLICATED;
              else
                {
                  fail (p, kat, "expected 'manual' or 'replicated' in last_tile_dims");
                  goto out;
                }
              if (n_kinds >= PS_SHARDING_MAX_DIMS)
                {
                  fail (p, kat, "too many subgroup dims");
                  goto out;
                }
              kinds[n_kinds++] = k;
            }
          while (accept (p, ','));
          if (!expect (p, '}', "after the subgroup kinds"))
            goto out;
          continue;
        }
      else if (strcmp (word, "shard_as") == 0 || strcmp (word, "shard_like") == 0)
        {
          if (gkind != PS_SHARD_GROUP_NONE)
            {
              fail (p, at, "shard group given twice");
              goto out;
            }
          gkind = word[6] == 'a' ? PS_SHARD_GROUP_AS : PS_SHARD_GROUP_LIKE;
          gsize gat;
          if (!parse_int (p, "shard group id", &gid, &gat))
            goto out;
          continue;
        }
      else if (strcmp (word, "metadata") == 0)
        {
          if (metadata != NULL)
            {
              fail (p, at, "'metadata=' given twice");
              goto out;
            }
          gsize ms = 0, me = 0;
          if (!expect (p, '=', "after 'metadata'") || !skip_braced (p, &ms, &me))
            goto out;
          metadata = g_strndup (p->text + ms, me - ms);
          continue;
        }
      else
        {
          fail (p, at, "unknown sharding item '%s'", word);
          goto out;
        }
      if (kind != K_NONE)
        {
          /* The first kind's word, within the text: the text need not end
           * in a NUL (strcspn read past it; found by tests/fuzz/fuzz_sharding). */
          gsize kend = kind_at;
          while (kend < p->len && is_word_char (p->text[kend]))
            kend++;
          fail (p, at, "sharding has two kinds ('%s' after '%.*s')", word,
                (int) (kend - kind_at), p->text + kind_at);
          goto out;
        }
      kind = new_kind;
      kind_at = at;
    }

  if (kind == K_NONE)
    {
      fail (p, open_at, "sharding names no kind (replicated, maximal, manual, unknown or"
            " devices=)");
      goto out;
    }
  if (has_device && kind != K_MAXIMAL)
    {
      fail (p, device_at, "'device=' belongs to a maximal sharding");
      goto out;
    }
  if ((last_repl || has_last_dims) && kind != K_DEVICES)
    {
      fail (p, last_at, "subgroup dims need a tiled sharding (devices=)");
      goto out;
    }
  switch (kind)
    {
    case K_REPL:
      result = ps_sharding_replicated ();
      break;
    case K_MANUAL:
      result = ps_sharding_manual ();
      break;
    case K_UNKNOWN:
      result = ps_sharding_unknown ();
      break;
    case K_MAXIMAL:
      if (!has_device)
        {
          fail (p, kind_at, "maximal sharding needs 'device=N'");
          goto out;
        }
      result = ps_sharding_maximal (device);
      break;
    case K_DEVICES:
      {
        int nd = (int) tile.dims->len;
        int n_sub = last_repl ? 1 : n_kinds;
        if (last_repl)
          kinds[0] = PS_SUBGROUP_REPLICATED;
        if (n_sub > nd)
          {
            fail (p, last_at, "%d subgroup dims but the tile assignment has only %d dims",
                  n_sub, nd);
            goto out;
          }
        result = ps_sharding_subgroup_take (nd, (int64_t *) tile.dims->data, tile.devices,
                                            n_sub, kinds);
        tile.devices = NULL;
        break;
      }
    default:
      g_assert_not_reached ();
    }
  result->group_kind = gkind;
  result->group_id = gid;
  result->metadata = metadata;
  metadata = NULL;
out:
  g_free (metadata);
  g_free (tile.devices);
  g_array_unref (tile.dims);
  return result;
}

/* sharding ::= single | '{' '}' | '{' single (',' single)* '}' */
static PsSharding *
parse_sharding (Parser *p)
{
  if (peek (p) != '{')
    {
      fail (p, p->pos, "expected '{' to open a sharding%s", describe_here (p));
      return NULL;
    }
  gsize save = p->pos;
  p->pos++;
  int c = peek (p);
  if (c == '}')
    {
      p->pos++;
      return ps_sharding_tuple (0, NULL);
    }
  if (c != '{')
    {
      p->pos = save;
      return parse_single (p);
    }
  GPtrArray *elems = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_sharding_free);
  int64_t ids = 0;
  do
    {
      gsize at = p->pos;
      PsSharding *e = parse_single (p);
      if (e == NULL)
        {
          g_ptr_array_unref (elems);
          return NULL;
        }
      g_ptr_array_add (elems, e);
      /* Each element is bounded alone; a tuple of many is bounded as a whole. */
      ids += ps_sharding_n_ids (e);
      if (ids > PS_SHARDING_MAX_MODULE_IDS)
        {
          fail (p, at, "the tuple sharding's elements hold more than %" G_GINT64_FORMAT " device ids together",
                PS_SHARDING_MAX_MODULE_IDS);
          g_ptr_array_unref (elems);
          return NULL;
        }
    }
  while (accept (p, ','));
  if (!expect (p, '}', "to close the tuple sharding"))
    {
      g_ptr_array_unref (elems);
      return NULL;
    }
  g_ptr_array_set_free_func (elems, NULL);
  PsSharding *t = ps_sharding_tuple ((int) elems->len, (PsSharding **) elems->pdata);
  g_ptr_array_unref (elems);
  return t;
}

PsSharding *
ps_sharding_parse (const char *text, gsize len, gsize *err_offset, GError **error)
{
  g_return_val_if_fail (text != NULL, NULL);
  Parser p = { text, len, 0, 0, NULL };
  /* A NUL inside a quoted metadata string would be kept, then cut short when
   * printed (found by tests/fuzz/fuzz_sharding). Not text: refused. */
  const char *nul = memchr (text, '\0', len);
  PsSharding *s = NULL;
  if (nul != NULL)
    fail (&p, (gsize) (nul - text), "NUL byte in the sharding text");
  else
    s = parse_sharding (&p);
  if (s != NULL && peek (&p) >= 0)
    {
      fail (&p, p.pos, "unexpected text after the sharding");
      g_clear_pointer (&s, ps_sharding_free);
    }
  if (s == NULL)
    {
      g_assert (p.error != NULL);
      if (err_offset != NULL)
        *err_offset = p.err_pos;
      g_propagate_error (error, p.error);
    }
  return s;
}

PsSharding *
ps_sharding_from_string (const char *text, const char *what, GError **error)
{
  g_return_val_if_fail (text != NULL, NULL);
  gsize off = 0;
  GError *local = NULL;
  PsSharding *s = ps_sharding_parse (text, strlen (text), &off, &local);
  if (s == NULL)
    {
      int line, col;
      ps_text_position (text, off, &line, &col);
      ps_set_error_at (error, local->code, what ? what : "sharding", line, col, "%s",
                       local->message);
      g_error_free (local);
    }
  return s;
}

/* ---- printer --------------------------------------------------------------- */

static void
append_ints (GString *out, int n, const int64_t *v)
{
  for (int i = 0; i < n; i++)
    g_string_append_printf (out, "%s%" G_GINT64_FORMAT, i ? "," : "", v[i]);
}

static void
append_single (GString *out, const PsSharding *s, gboolean with_metadata)
{
  g_string_append_c (out, '{');
  switch (s->kind)
    {
    case PS_SHARDING_REPLICATED:
      g_string_append (out, "replicated");
      break;
    case PS_SHARDING_MANUAL:
      g_string_append (out, "manual");
      break;
    case PS_SHARDING_UNKNOWN:
      g_string_append (out, "unknown");
      break;
    case PS_SHARDING_MAXIMAL:
      g_string_append_printf (out, "maximal device=%" G_GINT64_FORMAT, s->device);
      break;
    case PS_SHARDING_TILED:
      g_string_append (out, "devices=[");
      append_ints (out, s->n_tile_dims, s->tile_dims);
      g_string_append_c (out, ']');
      /* Iota form whenever the array has one (XLA prints V2 tile
       * assignments that way); the detection is a function of the array,
       * so printing is a fixed point whatever form was parsed. */
      if (s->n_iota_dims > 0)
        {
          g_string_append (out, "<=[");
          append_ints (out, s->n_iota_dims, s->iota_dims);
          g_string_append_c (out, ']');
          if (s->iota_perm != NULL)
            {
              g_string_append (out, "T(");
              append_ints (out, s->n_iota_dims, s->iota_perm);
              g_string_append_c (out, ')');
            }
        }
      else
        append_ints (out, (int) s->n_devices, s->devices);
      if (s->n_subgroups == 1 && s->subgroup_kinds[0] == PS_SUBGROUP_REPLICATED)
        g_string_append (out, " last_tile_dim_replicate");
      else if (s->n_subgroups > 0)
        {
          g_string_append (out, " last_tile_dims={");
          for (int i = 0; i < s->n_subgroups; i++)
            g_string_append_printf (out, "%s%s", i ? ", " : "",
                                    s->subgroup_kinds[i] == PS_SUBGROUP_MANUAL
                                    ? "manual" : "replicated");
          g_string_append_c (out, '}');
        }
      break;
    case PS_SHARDING_TUPLE:
      g_assert_not_reached ();
    }
  if (s->group_kind != PS_SHARD_GROUP_NONE)
    g_string_append_printf (out, " %s %" G_GINT64_FORMAT,
                            s->group_kind == PS_SHARD_GROUP_AS ? "shard_as" : "shard_like",
                            s->group_id);
  if (with_metadata && s->metadata != NULL)
    g_string_append_printf (out, " metadata=%s", s->metadata);
  g_string_append_c (out, '}');
}

void
ps_sharding_append (GString *out, const PsSharding *s, gboolean with_metadata)
{
  g_return_if_fail (out != NULL && s != NULL);
  if (s->kind != PS_SHARDING_TUPLE)
    {
      append_single (out, s, with_metadata);
      return;
    }
  g_string_append_c (out, '{');
  for (int i = 0; i < s->n_elems; i++)
    {
      if (i > 0)
        g_string_append (out, ", ");
      append_single (out, s->elems[i], with_metadata);
    }
  g_string_append_c (out, '}');
}

char *
ps_sharding_to_string (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, NULL);
  GString *out = g_string_new (NULL);
  ps_sharding_append (out, s, TRUE);
  return g_string_free (out, FALSE);
}

char **
ps_sharding_op_names (const PsSharding *s)
{
  GPtrArray *a = g_ptr_array_new ();
  const char *p = s ? s->metadata : NULL;
  while (p && (p = strstr (p, "op_name=\"")) != NULL)
    {
      p += strlen ("op_name=\"");
      const char *q = p;
      while (*q && *q != '"')
        q += (*q == '\\' && q[1]) ? 2 : 1;
      g_ptr_array_add (a, g_strndup (p, q - p));
      p = q;
    }
  g_ptr_array_add (a, NULL);
  return (char **) g_ptr_array_free (a, FALSE);
}
