/* HloModuleProto text format to HLO text to the IR: see hlo_proto.h. The
 * text format is parsed into a tree of fields (any message, no schema),
 * then the HloModuleProto schema (xla/service/hlo.proto) is applied while
 * writing HLO text: each line carries a comment with the offset of the
 * proto it came from, so that an error of the HLO reader is reported
 * there. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_proto.h"

/* ---- the text format, schema-free ---------------------------------------- */

typedef struct PNode PNode;
struct PNode {
  char *key;
  gsize at;                  /* offset of the key */
  char *val;                 /* a scalar's text (a string unescaped), NULL for a message */
  gsize vlen;
  gboolean is_str;
  GPtrArray *kids;           /* a message's fields, in order (PNode*) */
};

typedef struct {
  const char *t;
  gsize len, pos;
  const char *file;
  GError *err;
  int depth;
} Pp;

#define P_FAILED(p) ((p)->err != NULL)
#define P_CUR(p) ((p)->pos < (p)->len ? (p)->t[(p)->pos] : '\0')
/* Nesting deeper than this is refused, so that a hostile input cannot
 * exhaust the stack (an HloModuleProto nests about 8 deep). */
#define P_MAX_DEPTH 64

static void
pnode_free (gpointer data)
{
  PNode *n = data;
  if (!n)
    return;
  g_free (n->key);
  g_free (n->val);
  if (n->kids)
    g_ptr_array_unref (n->kids);
  g_free (n);
}

static void G_GNUC_PRINTF (3, 4)
p_error (Pp *p, gsize off, const char *fmt, ...)
{
  if (p->err)
    return;
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  int line, col;
  ps_hlo_offset_line_col (p->t, p->len, off, &line, &col);
  ps_set_error_at (&p->err, PS_ERROR_PARSE, p->file, line, col, "%s", msg);
}

static void
p_skip_ws (Pp *p)
{
  while (p->pos < p->len)
    {
      char c = p->t[p->pos];
      if (c == '#')
        while (p->pos < p->len && p->t[p->pos] != '\n')
          p->pos++;
      else if (g_ascii_isspace (c))
        p->pos++;
      else
        break;
    }
}

static char *
p_describe (Pp *p)
{
  if (p->pos >= p->len)
    return g_strdup ("the end of the text");
  gsize n = 0;
  while (p->pos + n < p->len && n < 20 && !g_ascii_isspace (p->t[p->pos + n]))
    n++;
  return g_strdup_printf ("'%.*s'", (int) MAX (n, 1), p->t + p->pos);
}

static gboolean
is_ident_start (char c)
{
  return g_ascii_isalpha (c) || c == '_';
}

static char *
p_ident (Pp *p)
{
  gsize b = p->pos;
  if (!is_ident_start (P_CUR (p)))
    return NULL;
  while (p->pos < p->len && (g_ascii_isalnum (p->t[p->pos]) || p->t[p->pos] == '_'))
    p->pos++;
  return g_strndup (p->t + b, p->pos - b);
}

/* One quoted string (C escapes, as protobuf's text format writes them),
 * appended unescaped to out. */
static gboolean
p_string (Pp *p, GString *out)
{
  gsize b = p->pos;
  char q = p->t[p->pos++];
  while (p->pos < p->len && p->t[p->pos] != q && p->t[p->pos] != '\n')
    {
      char c = p->t[p->pos++];
      if (c != '\\')
        {
          g_string_append_c (out, c);
          continue;
        }
      if (p->pos >= p->len)
        break;
      char e = p->t[p->pos++];
      switch (e)
        {
        case 'n': g_string_append_c (out, '\n'); break;
        case 't': g_string_append_c (out, '\t'); break;
        case 'r': g_string_append_c (out, '\r'); break;
        case 'a': g_string_append_c (out, '\a'); break;
        case 'b': g_string_append_c (out, '\b'); break;
        case 'f': g_string_append_c (out, '\f'); break;
        case 'v': g_string_append_c (out, '\v'); break;
        case '\\': case '\'': case '"': case '?': g_string_append_c (out, e); break;
        case 'x':
          {
            int v = 0, k = 0;
            while (k < 2 && p->pos < p->len && g_ascii_isxdigit (p->t[p->pos]))
              v = v * 16 + g_ascii_xdigit_value (p->t[p->pos++]), k++;
            if (k == 0)
              {
                p_error (p, p->pos - 2, "'\\x' without hexadecimal digits in a string");
                return FALSE;
              }
            g_string_append_c (out, (char) v);
            break;
          }
        default:
          if (e >= '0' && e <= '7')
            {
              int v = e - '0', k = 1;
              while (k < 3 && p->pos < p->len && p->t[p->pos] >= '0' && p->t[p->pos] <= '7')
                v = v * 8 + (p->t[p->pos++] - '0'), k++;
              g_string_append_c (out, (char) (v & 0xff));
            }
          else
            {
              if (g_ascii_isprint (e))
                p_error (p, p->pos - 2, "unknown escape '\\%c' in a string", e);
              else
                p_error (p, p->pos - 2, "unknown escape '\\' followed by byte 0x%02x in a string",
                         (unsigned) (unsigned char) e);
              return FALSE;
            }
        }
    }
  if (P_CUR (p) != q)
    {
      p_error (p, b, "unterminated string");
      return FALSE;
    }
  p->pos++;
  return TRUE;
}

static gboolean p_body (Pp *p, PNode *msg, char close, gsize open_at);

/* A value after "key:": a scalar, a message, or (in a list) either. */
static gboolean
p_value (Pp *p, PNode *parent, const char *key, gsize at)
{
  p_skip_ws (p);
  PNode *n = g_new0 (PNode, 1);
  n->key = g_strdup (key);
  n->at = at;
  g_ptr_array_add (parent->kids, n);
  char c = P_CUR (p);
  if (c == '{' || c == '<')
    {
      gsize open = p->pos++;
      n->kids = g_ptr_array_new_with_free_func (pnode_free);
      return p_body (p, n, c == '{' ? '}' : '>', open);
    }
  if (c == '"' || c == '\'')
    {
      GString *s = g_string_new (NULL);
      do
        {
          if (!p_string (p, s))
            break;
          p_skip_ws (p);
        }
      while (P_CUR (p) == '"' || P_CUR (p) == '\'');
      n->vlen = s->len;
      n->val = g_string_free (s, FALSE);
      n->is_str = TRUE;
      return !P_FAILED (p);
    }
  gsize b = p->pos;
  while (p->pos < p->len && (g_ascii_isalnum (p->t[p->pos]) || strchr ("_.+-", p->t[p->pos])))
    p->pos++;
  if (p->pos == b)
    {
      g_autofree char *found = p_describe (p);
      p_error (p, b, "expected a value for field '%s', found %s", key, found);
      return FALSE;
    }
  n->val = g_strndup (p->t + b, p->pos - b);
  n->vlen = p->pos - b;
  return TRUE;
}

static gboolean
p_body (Pp *p, PNode *msg, char close, gsize open_at)
{
  if (++p->depth > P_MAX_DEPTH)
    {
      p_error (p, open_at, "messages nested more than %d deep", P_MAX_DEPTH);
      return FALSE;
    }
  while (!P_FAILED (p))
    {
      p_skip_ws (p);
      char c = P_CUR (p);
      if (close && c == close)
        {
          p->pos++;
          break;
        }
      if (p->pos >= p->len)
        {
          if (close)
            p_error (p, open_at, "'%c' is not closed (expected '%c' before the end of the text)",
                     p->t[open_at], close);
          break;
        }
      gsize at = p->pos;
      if (c == '[')
        {
          p_error (p, at, "extension or Any fields ('[...]') are not read (an HloModuleProto has none)");
          break;
        }
      if (!close && (c == '}' || c == '>'))
        {
          p_error (p, at, "'%c' closes no message (one too many?)", c);
          break;
        }
      g_autofree char *key = p_ident (p);
      if (!key)
        {
          g_autofree char *found = p_describe (p);
          p_error (p, at, "expected a field name%s, found %s", close ? "" : " or the end of the text", found);
          break;
        }
      p_skip_ws (p);
      c = P_CUR (p);
      if (c == ':')
        {
          p->pos++;
          p_skip_ws (p);
          if (P_CUR (p) == '[')
            {
              /* key: [v, v, ...] is key: v key: v ... */
              p->pos++;
              p_skip_ws (p);
              if (P_CUR (p) == ']')
                p->pos++;
              else
                while (!P_FAILED (p))
                  {
                    if (!p_value (p, msg, key, at))
                      break;
                    p_skip_ws (p);
                    if (P_CUR (p) == ',')
                      {
                        p->pos++;
                        continue;
                      }
                    if (P_CUR (p) == ']')
                      {
                        p->pos++;
                        break;
                      }
                    g_autofree char *found = p_describe (p);
                    p_error (p, p->pos, "expected ',' or ']' in the list of '%s', found %s", key, found);
                  }
            }
          else
            p_value (p, msg, key, at);
        }
      else if (c == '{' || c == '<')
        p_value (p, msg, key, at);
      else
        {
          g_autofree char *found = p_describe (p);
          p_error (p, p->pos, "expected ':' or '{' after the field name '%s', found %s", key, found);
          break;
        }
      p_skip_ws (p);
      if (P_CUR (p) == ',' || P_CUR (p) == ';')
        p->pos++;
    }
  p->depth--;
  return !P_FAILED (p);
}

/* ---- reading fields --------------------------------------------------- */

/* One message being translated: which of its fields were read, so that
 * the others can be checked (a field podsim does not read must hold its
 * default). */
typedef struct {
  Pp *p;
  PNode *n;
  GHashTable *used;
} Msg;

static void
msg_init (Msg *m, Pp *p, PNode *n)
{
  m->p = p;
  m->n = n;
  m->used = g_hash_table_new (g_str_hash, g_str_equal);
}

static void
msg_clear (Msg *m)
{
  g_hash_table_destroy (m->used);
}

static PNode *
fld (Msg *m, const char *key)
{
  g_hash_table_add (m->used, (gpointer) key);
  if (!m->n->kids)
    return NULL;
  for (guint i = 0; i < m->n->kids->len; i++)
    {
      PNode *k = g_ptr_array_index (m->n->kids, i);
      if (strcmp (k->key, key) == 0)
        return k;
    }
  return NULL;
}

/* The i-th occurrence of a repeated field, NULL past the last. */
static PNode *
fld_nth (Msg *m, const char *key, guint i)
{
  g_hash_table_add (m->used, (gpointer) key);
  for (guint j = 0; m->n->kids && j < m->n->kids->len; j++)
    {
      PNode *k = g_ptr_array_index (m->n->kids, j);
      if (strcmp (k->key, key) == 0 && i-- == 0)
        return k;
    }
  return NULL;
}

static gboolean
node_is_msg (Pp *p, PNode *n, const char *what)
{
  if (n->kids)
    return TRUE;
  p_error (p, n->at, "'%s' must be a message ({...}) (%s)", n->key, what);
  return FALSE;
}

static gboolean
node_int (Pp *p, PNode *n, int64_t *out)
{
  if (!n->val || n->is_str)
    {
      p_error (p, n->at, "'%s' must be an integer", n->key);
      return FALSE;
    }
  char *end = NULL;
  errno = 0;
  gint64 v = g_ascii_strtoll (n->val, &end, 0);
  if (errno || end == n->val || *end)
    {
      p_error (p, n->at, "'%s: %s' is not a 64-bit integer", n->key, n->val);
      return FALSE;
    }
  *out = v;
  return TRUE;
}

static gboolean
fld_int (Msg *m, const char *key, int64_t dflt, int64_t *out)
{
  PNode *n = fld (m, key);
  *out = dflt;
  return !n || node_int (m->p, n, out);
}

static gboolean
node_bool (Pp *p, PNode *n, gboolean *out)
{
  if (n->val && !n->is_str && (strcmp (n->val, "true") == 0 || strcmp (n->val, "True") == 0 || strcmp (n->val, "t") == 0
                               || strcmp (n->val, "1") == 0))
    *out = TRUE;
  else if (n->val && !n->is_str && (strcmp (n->val, "false") == 0 || strcmp (n->val, "False") == 0
                                    || strcmp (n->val, "f") == 0 || strcmp (n->val, "0") == 0))
    *out = FALSE;
  else
    {
      p_error (p, n->at, "'%s' must be true or false", n->key);
      return FALSE;
    }
  return TRUE;
}

static gboolean
fld_bool (Msg *m, const char *key, gboolean *out)
{
  PNode *n = fld (m, key);
  *out = FALSE;
  return !n || node_bool (m->p, n, out);
}

/* A string field (NULL when absent); an enum given as a word is accepted
 * where `enum_ok`. transfer none. */
static const char *
fld_str (Msg *m, const char *key, gboolean enum_ok)
{
  PNode *n = fld (m, key);
  if (!n)
    return NULL;
  if (!n->val || (!n->is_str && !enum_ok))
    {
      p_error (m->p, n->at, "'%s' must be a \"string\"", key);
      return NULL;
    }
  for (gsize i = 0; n->is_str && i < n->vlen; i++)
    if ((unsigned char) n->val[i] < 0x20 || n->val[i] == 0x7f)
      {
        p_error (m->p, n->at, "'%s' holds the control byte 0x%02x", key, (unsigned) (unsigned char) n->val[i]);
        return NULL;
      }
  return n->val;
}

/* A name as HLO text takes it: characters other than letters, digits,
 * '_', '.' and '-' become '_', and so does a first character that is not
 * a letter, as XLA's NameUniquer::GetSanitizedName
 * (xla/service/name_uniquer.cc) makes them when it reads a proto.
 * transfer full; NULL for NULL. */
static char *
sanitized (const char *name)
{
  if (!name)
    return NULL;
  char *s = g_strdup (name);
  for (char *c = s; *c; c++)
    if (!g_ascii_isalnum (*c) && *c != '_' && *c != '.' && *c != '-')
      *c = '_';
  if (s[0] && !g_ascii_isalpha (s[0]))
    s[0] = '_'; /* a name begins with a letter or '_' */
  return s;
}

/* All values of a repeated integer field. */
static GArray *
fld_ints (Msg *m, const char *key)
{
  GArray *a = g_array_new (FALSE, FALSE, sizeof (int64_t));
  PNode *n;
  for (guint i = 0; !P_FAILED (m->p) && (n = fld_nth (m, key, i)); i++)
    {
      int64_t v;
      if (node_int (m->p, n, &v))
        g_array_append_val (a, v);
    }
  return a;
}

static void
append_ints (GString *out, GArray *a, const char *sep)
{
  for (guint i = 0; i < a->len; i++)
    g_string_append_printf (out, "%s%" G_GINT64_FORMAT, i ? sep : "", g_array_index (a, int64_t, i));
}

/* ", key={a,b}" when the repeated field has values (or always). */
static void
attr_ints (Msg *m, GString *out, const char *field, const char *attr, gboolean always)
{
  g_autoptr (GArray) a = fld_ints (m, field);
  if (a->len == 0 && !always)
    return;
  g_string_append_printf (out, ", %s={", attr);
  append_ints (out, a, ",");
  g_string_append_c (out, '}');
}

static gboolean
is_default (PNode *n)
{
  if (n->kids)
    return n->kids->len == 0;
  if (n->is_str)
    return n->vlen == 0;
  return strcmp (n->val, "0") == 0 || strcmp (n->val, "false") == 0 || strcmp (n->val, "0.0") == 0;
}

/* Every field of m not read must be one of `skipped` or hold its default;
 * what = the message's name for the error. */
static gboolean
msg_check (Msg *m, const char *what, const char *const *skipped)
{
  for (guint i = 0; !P_FAILED (m->p) && m->n->kids && i < m->n->kids->len; i++)
    {
      PNode *k = g_ptr_array_index (m->n->kids, i);
      if (g_hash_table_contains (m->used, k->key))
        continue;
      gboolean skip = FALSE;
      for (int j = 0; skipped && skipped[j]; j++)
        skip = skip || strcmp (skipped[j], k->key) == 0;
      if (!skip && !is_default (k))
        p_error (m->p, k->at, "%s field '%s' is not read by podsim (doc/hlo.md, \"HloModuleProto text\" "
                 "lists the fields it reads)", what, k->key);
    }
  return !P_FAILED (m->p);
}

/* ---- shapes, shardings, literals -------------------------------------- */

static gboolean
element_type (Pp *p, PNode *n, GString *out)
{
  if (!n || !n->val || n->is_str || !is_ident_start (n->val[0]))
    {
      p_error (p, n ? n->at : 0, "element_type must be a type name (F32, BF16, S32, PRED, TUPLE, TOKEN, ...)");
      return FALSE;
    }
  if (strcmp (n->val, "PRIMITIVE_TYPE_INVALID") == 0)
    {
      p_error (p, n->at, "element_type PRIMITIVE_TYPE_INVALID");
      return FALSE;
    }
  g_autofree char *lower = g_ascii_strdown (n->val, -1);
  g_string_append (out, strcmp (lower, "opaque_type") == 0 ? "opaque" : lower);
  return TRUE;
}

/* ShapeProto to HLO text: f32[2,<=3]{1,0}, (T, T), token[]. */
static gboolean
shape_text (Pp *p, PNode *n, GString *out)
{
  if (!node_is_msg (p, n, "a ShapeProto"))
    return FALSE;
  Msg m;
  msg_init (&m, p, n);
  PNode *et = fld (&m, "element_type");
  if (!et)
    {
      p_error (p, n->at, "shape without element_type");
      msg_clear (&m);
      return FALSE;
    }
  if (et->val && strcmp (et->val, "TUPLE") == 0)
    {
      g_string_append_c (out, '(');
      PNode *e;
      for (guint i = 0; !P_FAILED (p) && (e = fld_nth (&m, "tuple_shapes", i)); i++)
        {
          if (i)
            g_string_append (out, ", ");
          shape_text (p, e, out);
        }
      g_string_append_c (out, ')');
    }
  else if (element_type (p, et, out))
    {
      g_autoptr (GArray) dims = fld_ints (&m, "dimensions");
      g_string_append_c (out, '[');
      for (guint i = 0; i < dims->len; i++)
        {
          int64_t d = g_array_index (dims, int64_t, i);
          gboolean dyn = FALSE;
          PNode *dn = fld_nth (&m, "is_dynamic_dimension", i);
          if (dn && !node_bool (p, dn, &dyn))
            break;
          if (i)
            g_string_append_c (out, ',');
          if (d == INT64_MIN) /* Shape::kUnboundedSize */
            g_string_append_c (out, '?');
          else
            g_string_append_printf (out, "%s%" G_GINT64_FORMAT, dyn ? "<=" : "", d);
        }
      g_string_append_c (out, ']');
      PNode *lay = fld (&m, "layout");
      if (lay && node_is_msg (p, lay, "a LayoutProto") && dims->len > 0)
        {
          Msg l;
          msg_init (&l, p, lay);
          g_autoptr (GArray) m2m = fld_ints (&l, "minor_to_major");
          if (m2m->len == dims->len)
            {
              g_string_append_c (out, '{');
              append_ints (out, m2m, ",");
              g_string_append_c (out, '}');
            }
          msg_clear (&l); /* tiles, memory space, ...: not simulated */
        }
    }
  static const char *const skipped[] = { "is_dynamic_dimension", NULL };
  msg_check (&m, "ShapeProto", skipped);
  msg_clear (&m);
  return !P_FAILED (p);
}

/* OpSharding to HLO text ({replicated}, {devices=[2,1]0,1}, ...). */
static gboolean
sharding_text (Pp *p, PNode *n, GString *out)
{
  if (!node_is_msg (p, n, "an OpSharding"))
    return FALSE;
  Msg m;
  msg_init (&m, p, n);
  const char *type = fld_str (&m, "type", TRUE);
  if (!type)
    type = "REPLICATED";
  g_autoptr (GArray) tdims = fld_ints (&m, "tile_assignment_dimensions");
  g_autoptr (GArray) devs = fld_ints (&m, "tile_assignment_devices");
  g_autoptr (GArray) rdims = fld_ints (&m, "iota_reshape_dims");
  g_autoptr (GArray) perm = fld_ints (&m, "iota_transpose_perm");
  gboolean last_rep = FALSE;
  fld_bool (&m, "replicate_on_last_tile_dim", &last_rep);
  if (strcmp (type, "REPLICATED") == 0)
    g_string_append (out, "{replicated}");
  else if (strcmp (type, "MANUAL") == 0)
    g_string_append (out, "{manual}");
  else if (strcmp (type, "UNKNOWN") == 0)
    g_string_append (out, "{unknown}");
  else if (strcmp (type, "MAXIMAL") == 0)
    {
      if (devs->len != 1)
        p_error (p, n->at, "a MAXIMAL sharding names one device in tile_assignment_devices, not %u", devs->len);
      else
        g_string_append_printf (out, "{maximal device=%" G_GINT64_FORMAT "}", g_array_index (devs, int64_t, 0));
    }
  else if (strcmp (type, "TUPLE") == 0)
    {
      g_string_append_c (out, '{');
      PNode *e;
      for (guint i = 0; !P_FAILED (p) && (e = fld_nth (&m, "tuple_shardings", i)); i++)
        {
          if (i)
            g_string_append (out, ", ");
          sharding_text (p, e, out);
        }
      g_string_append_c (out, '}');
    }
  else if (strcmp (type, "OTHER") == 0)
    {
      g_string_append (out, "{devices=[");
      append_ints (out, tdims, ",");
      g_string_append_c (out, ']');
      if (devs->len > 0)
        append_ints (out, devs, ",");
      else if (rdims->len > 0)
        {
          g_string_append (out, "<=[");
          append_ints (out, rdims, ",");
          g_string_append_c (out, ']');
          if (perm->len > 0)
            {
              g_string_append (out, "T(");
              append_ints (out, perm, ",");
              g_string_append_c (out, ')');
            }
        }
      else
        p_error (p, n->at, "an OTHER (tiled) sharding without tile_assignment_devices or iota_reshape_dims");
      if (last_rep)
        g_string_append (out, " last_tile_dim_replicate");
      PNode *lt;
      for (guint i = 0; !P_FAILED (p) && (lt = fld_nth (&m, "last_tile_dims", i)); i++)
        {
          g_autofree char *w = lt->val ? g_ascii_strdown (lt->val, -1) : g_strdup ("?");
          g_string_append_printf (out, "%s%s", i ? ", " : " last_tile_dims={", w);
        }
      if (fld (&m, "last_tile_dims"))
        g_string_append_c (out, '}');
      g_string_append_c (out, '}');
    }
  else
    p_error (p, n->at, "OpSharding type '%s' is not read by podsim (REPLICATED, MAXIMAL, TUPLE, OTHER, MANUAL)", type);
  static const char *const skipped[] = { "metadata", NULL };
  msg_check (&m, "OpSharding", skipped);
  msg_clear (&m);
  return !P_FAILED (p);
}

static float
half_to_float (uint16_t h)
{
  int s = h >> 15, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  float v;
  if (e == 0)
    v = ldexpf ((float) f, -24);
  else if (e == 31)
    v = f ? NAN : INFINITY;
  else
    v = ldexpf ((float) (f | 0x400), e - 25);
  return s ? -v : v;
}

static void
append_double (GString *out, double v)
{
  if (isnan (v))
    g_string_append (out, "nan");
  else if (isinf (v))
    g_string_append (out, v < 0 ? "-inf" : "inf");
  else
    {
      char buf[G_ASCII_DTOSTR_BUF_SIZE];
      g_string_append (out, g_ascii_dtostr (buf, sizeof buf, v));
    }
}

/* The values of a LiteralProto, each as HLO text, for `n_elems` elements
 * of element type `et` (the shape's, lower case). */
static GPtrArray *
literal_values (Msg *m, const char *et, int64_t n_elems, gsize at)
{
  Pp *p = m->p;
  GPtrArray *vals = g_ptr_array_new_with_free_func (g_free);
  static const struct { const char *et, *field; } repeated[] = {
    { "pred", "preds" }, { "s32", "s32s" }, { "s64", "s64s" }, { "u32", "u32s" }, { "u64", "u64s" },
    { "f32", "f32s" }, { "f64", "f64s" },
  };
  static const struct { const char *et, *field; int width; gboolean is_signed; int fl; } packed[] = {
    { "s8", "s8s", 1, TRUE, 0 }, { "u8", "u8s", 1, FALSE, 0 }, { "s16", "s16s", 2, TRUE, 0 },
    { "u16", "u16s", 2, FALSE, 0 }, { "f16", "f16s", 2, FALSE, 1 }, { "bf16", "bf16s", 2, FALSE, 2 },
  };
  for (gsize k = 0; k < G_N_ELEMENTS (repeated); k++)
    if (strcmp (et, repeated[k].et) == 0)
      {
        PNode *v;
        for (guint i = 0; (v = fld_nth (m, repeated[k].field, i)); i++)
          {
            if (!v->val || v->is_str)
              {
                p_error (p, v->at, "'%s' must be a number", v->key);
                break;
              }
            g_autofree char *low = g_ascii_strdown (v->val, -1);
            gsize l = strlen (low);
            if (l > 1 && low[l - 1] == 'f' && strcmp (et, "f32") == 0 && g_ascii_isdigit (low[l - 2]))
              low[l - 1] = '\0'; /* 1.5f */
            if (strcmp (et, "pred") == 0)
              {
                gboolean b;
                if (!node_bool (p, v, &b))
                  break;
                g_ptr_array_add (vals, g_strdup (b ? "true" : "false"));
              }
            else if (strcmp (low, "infinity") == 0 || strcmp (low, "-infinity") == 0)
              g_ptr_array_add (vals, g_strdup (low[0] == '-' ? "-inf" : "inf"));
            else
              g_ptr_array_add (vals, g_steal_pointer (&low));
          }
        goto done;
      }
  for (gsize k = 0; k < G_N_ELEMENTS (packed); k++)
    if (strcmp (et, packed[k].et) == 0)
      {
        PNode *v = fld (m, packed[k].field);
        if (!v)
          goto done;
        if (!v->is_str || v->vlen % packed[k].width)
          {
            p_error (p, v->at, "'%s' must be a bytes string of %d byte%s per value", v->key, packed[k].width,
                     packed[k].width == 1 ? "" : "s");
            break;
          }
        const guint8 *b = (const guint8 *) v->val;
        for (gsize i = 0; i < v->vlen; i += packed[k].width)
          {
            /* XLA writes them little-endian (LiteralBase::ToProto) */
            uint32_t u = packed[k].width == 1 ? b[i] : (uint32_t) (b[i] | (b[i + 1] << 8));
            GString *s = g_string_new (NULL);
            if (packed[k].fl == 1)
              append_double (s, half_to_float ((uint16_t) u));
            else if (packed[k].fl == 2)
              {
                uint32_t bits = u << 16;
                float f;
                memcpy (&f, &bits, sizeof f);
                append_double (s, f);
              }
            else if (packed[k].is_signed)
              g_string_append_printf (s, "%d", packed[k].width == 1 ? (int) (int8_t) u : (int) (int16_t) u);
            else
              g_string_append_printf (s, "%u", u);
            g_ptr_array_add (vals, g_string_free (s, FALSE));
          }
        goto done;
      }
  /* One byte per element (LiteralBase::ToProto copies the buffer of
   * ml_dtypes' intN and float8 types, a byte each, xla/literal.cc): the
   * sub-byte integers in the low bits, the narrow floats as their codes. */
  {
    PsElemType t;
    if (ps_etype_from_name (et, strlen (et), &t) && (ps_etype_bits (t) < 8 || ps_etype_minifloat (t)))
      {
        g_autofree char *f = g_strdup_printf ("%ss", et);
        const char *field = g_intern_string (f); /* m->used keeps the key */
        PNode *v = fld (m, field);
        if (!v)
          goto done;
        if (!v->is_str)
          {
            p_error (p, v->at, "'%s' must be a bytes string of 1 byte per value", v->key);
            goto done;
          }
        const guint8 *b = (const guint8 *) v->val;
        int bits = ps_etype_minifloat (t) ? 8 : ps_etype_bits (t);
        for (gsize i = 0; i < v->vlen; i++)
          {
            GString *str = g_string_new (NULL);
            if (ps_etype_minifloat (t))
              {
                double d = ps_etype_minifloat_decode (t, b[i]);
                if (isnan (d))
                  g_string_append (str, "nan");
                else if (isinf (d))
                  g_string_append (str, d < 0 ? "-inf" : "inf");
                else
                  append_double (str, d);
              }
            else
              {
                unsigned u = b[i] & ((1u << bits) - 1);
                if (ps_etype_is_signed (t) && (u >> (bits - 1)))
                  g_string_append_printf (str, "%d", (int) u - (1 << bits));
                else
                  g_string_append_printf (str, "%u", u);
              }
            g_ptr_array_add (vals, g_string_free (str, FALSE));
          }
        goto done;
      }
  }
  /* complex: interleaved real and imaginary parts */
  if (strcmp (et, "c64") == 0 || strcmp (et, "c128") == 0)
    {
      PNode *re, *im;
      const char *field = et[1] == '6' ? "c64s" : "c128s";
      for (guint i = 0; (re = fld_nth (m, field, 2 * i)); i++)
        {
          im = fld_nth (m, field, 2 * i + 1);
          if (!im || !re->val || re->is_str || !im->val || im->is_str)
            {
              p_error (p, re->at, "'%s' must hold real and imaginary parts, numbers, in pairs", re->key);
              break;
            }
          g_ptr_array_add (vals, g_strdup_printf ("(%s, %s)", re->val, im->val));
        }
      goto done;
    }
  p_error (p, at, "a %s literal is not read by podsim from a LiteralProto", et);
done:
  if (!P_FAILED (p) && (int64_t) vals->len != n_elems)
    p_error (p, at, "the literal has %u value%s, its shape %" G_GINT64_FORMAT " element%s", vals->len, vals->len == 1 ? "" : "s",
             n_elems, n_elems == 1 ? "" : "s");
  return vals;
}

/* Nested braces following dims. */
static void
append_nested (GString *out, GPtrArray *vals, GArray *dims, guint d, int64_t *next)
{
  if (d == dims->len)
    {
      g_string_append (out, g_ptr_array_index (vals, (*next)++));
      return;
    }
  g_string_append_c (out, '{');
  for (int64_t i = 0; i < g_array_index (dims, int64_t, d); i++)
    {
      if (i)
        g_string_append (out, ", ");
      append_nested (out, vals, dims, d + 1, next);
    }
  g_string_append_c (out, '}');
}

/* constant(...) of a LiteralProto; the literal's shape is the
 * instruction's when it has none. A tuple literal (tuple_literals, which
 * HLO text writes `constant((...))` and podsim's HLO reader does not
 * read) becomes its elements' constants, NAME.0, NAME.1, ..., written to
 * `pre` (one line each), and out gets `tuple(%NAME.0, ...)`: the same
 * value. */
static gboolean
literal_text (Pp *p, PNode *lit, PNode *ishape, const char *name, GString *pre, GString *out)
{
  if (!node_is_msg (p, lit, "a LiteralProto"))
    return FALSE;
  Msg m;
  msg_init (&m, p, lit);
  PNode *sh = fld (&m, "shape");
  if (!sh)
    sh = ishape;
  Msg s;
  msg_init (&s, p, sh);
  PNode *et = fld (&s, "element_type");
  GString *ets = g_string_new (NULL);
  if (et && et->val && strcmp (et->val, "TUPLE") == 0)
    {
      PNode *e;
      g_string_append (out, "tuple(");
      guint i;
      for (i = 0; !P_FAILED (p) && (e = fld_nth (&m, "tuple_literals", i)); i++)
        {
          PNode *esh = fld_nth (&s, "tuple_shapes", i);
          Msg em;
          msg_init (&em, p, e);
          PNode *own = node_is_msg (p, e, "a LiteralProto") ? fld (&em, "shape") : NULL;
          msg_clear (&em);
          if (!own)
            own = esh;
          if (!own)
            {
              p_error (p, e->at, "tuple literal element %u has no shape", i);
              break;
            }
          g_autofree char *ename = g_strdup_printf ("%s.%u", name, i);
          GString *line = g_string_new (NULL);
          g_string_append_printf (line, "%%%s = ", ename);
          shape_text (p, own, line);
          g_string_append_c (line, ' ');
          GString *inner_pre = g_string_new (NULL);
          literal_text (p, e, own, ename, inner_pre, line);
          g_string_append (pre, inner_pre->str);
          g_string_append_printf (pre, "%s\n", line->str);
          g_string_free (inner_pre, TRUE);
          g_string_free (line, TRUE);
          g_string_append_printf (out, "%s%%%s", i ? ", " : "", ename);
        }
      g_string_append_c (out, ')');
      PNode *extra = fld_nth (&s, "tuple_shapes", i);
      if (!P_FAILED (p) && extra)
        p_error (p, lit->at, "the tuple literal has %u element%s, its shape more", i, i == 1 ? "" : "s");
      msg_clear (&s);
      s.used = NULL;
    }
  else if (element_type (p, et, ets))
    {
      g_autoptr (GArray) dims = fld_ints (&s, "dimensions");
      int64_t n_elems = 1;
      for (guint i = 0; i < dims->len && !P_FAILED (p); i++)
        {
          int64_t d = g_array_index (dims, int64_t, i);
          if (d < 0 || (d > 0 && n_elems > (G_GINT64_CONSTANT (1) << 40) / d))
            p_error (p, sh->at, "a literal of dimension %" G_GINT64_FORMAT " is not read", d);
          n_elems *= d;
        }
      if (!P_FAILED (p))
        {
          g_autoptr (GPtrArray) vals = literal_values (&m, ets->str, n_elems, lit->at);
          if (!P_FAILED (p))
            {
              int64_t next = 0;
              g_string_append (out, "constant(");
              append_nested (out, vals, dims, 0, &next);
              g_string_append_c (out, ')');
            }
        }
    }
  g_string_free (ets, TRUE);
  if (s.used)
    msg_clear (&s);
  static const char *const skipped[] = { "shape", NULL };
  msg_check (&m, "LiteralProto", skipped);
  msg_clear (&m);
  return !P_FAILED (p);
}

/* ---- instructions ------------------------------------------------------ */

typedef struct {
  int64_t id;
  char *name;
  PNode *node;
} Comp;

typedef struct {
  Pp *p;
  GHashTable *comp_by_id;    /* int64 id -> Comp* */
  GHashTable *instr_by_id;   /* int64 id -> PNode* (the computation's instructions) */
  GHashTable *name_by_id;    /* int64 id -> char* (transfer none) */
  GString *pre;              /* lines instruction_text puts before its own */
} Tr;

static void
escape_string (GString *out, const char *s, gsize len)
{
  for (gsize i = 0; i < len; i++)
    {
      unsigned char c = (unsigned char) s[i];
      if (c == '"' || c == '\\')
        g_string_append_printf (out, "\\%c", c);
      else if (c == '\n')
        g_string_append (out, "\\n");
      else if (c < 0x20 || c >= 0x7f)
        g_string_append_printf (out, "\\%03o", c);
      else
        g_string_append_c (out, (char) c);
    }
}

static const char *
comp_name (Tr *tr, Msg *m, guint i, gsize at)
{
  PNode *n = fld_nth (m, "called_computation_ids", i);
  int64_t id;
  if (!n)
    {
      p_error (tr->p, at, "the instruction calls fewer than %u computations (called_computation_ids)", i + 1);
      return NULL;
    }
  if (!node_int (tr->p, n, &id))
    return NULL;
  Comp *c = g_hash_table_lookup (tr->comp_by_id, &id);
  if (!c)
    {
      p_error (tr->p, n->at, "called_computation_ids: no computation has id %" G_GINT64_FORMAT, id);
      return NULL;
    }
  return c->name;
}

static guint
n_called (Msg *m)
{
  guint n = 0;
  while (fld_nth (m, "called_computation_ids", n))
    n++;
  return n;
}

static void
window_text (Pp *p, Msg *im, GString *out)
{
  PNode *w = fld (im, "window");
  if (!w || !node_is_msg (p, w, "a Window"))
    return;
  GString *parts[6];
  for (int k = 0; k < 6; k++)
    parts[k] = g_string_new (NULL);
  gboolean any[6] = { TRUE, FALSE, FALSE, FALSE, FALSE, FALSE };
  Msg wm;
  msg_init (&wm, p, w);
  PNode *d;
  guint nd = 0;
  for (guint i = 0; !P_FAILED (p) && (d = fld_nth (&wm, "dimensions", i)); i++, nd++)
    {
      if (!node_is_msg (p, d, "a WindowDimension"))
        break;
      Msg dm;
      msg_init (&dm, p, d);
      int64_t size, stride, lo, hi, wdil, bdil;
      gboolean rev;
      /* an absent stride or dilation is 1: XLA writes them, a hand-written
       * proto may not */
      fld_int (&dm, "size", 0, &size);
      fld_int (&dm, "stride", 1, &stride);
      fld_int (&dm, "padding_low", 0, &lo);
      fld_int (&dm, "padding_high", 0, &hi);
      fld_int (&dm, "window_dilation", 1, &wdil);
      fld_int (&dm, "base_dilation", 1, &bdil);
      fld_bool (&dm, "window_reversal", &rev);
      const char *sep = i ? "x" : "";
      g_string_append_printf (parts[0], "%s%" G_GINT64_FORMAT, sep, size);
      g_string_append_printf (parts[1], "%s%" G_GINT64_FORMAT, sep, stride);
      g_string_append_printf (parts[2], "%s%" G_GINT64_FORMAT "_%" G_GINT64_FORMAT, sep, lo, hi);
      g_string_append_printf (parts[3], "%s%" G_GINT64_FORMAT, sep, bdil);
      g_string_append_printf (parts[4], "%s%" G_GINT64_FORMAT, sep, wdil);
      g_string_append_printf (parts[5], "%s%d", sep, rev ? 1 : 0);
      any[1] |= stride != 1;
      any[2] |= lo != 0 || hi != 0;
      any[3] |= bdil != 1;
      any[4] |= wdil != 1;
      any[5] |= rev;
      msg_check (&dm, "WindowDimension", NULL);
      msg_clear (&dm);
    }
  msg_check (&wm, "Window", NULL);
  msg_clear (&wm);
  static const char *const keys[] = { "size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal" };
  if (nd > 0 && !P_FAILED (p))
    {
      g_string_append (out, ", window={");
      gboolean first = TRUE;
      for (int k = 0; k < 6; k++)
        if (any[k])
          {
            g_string_append_printf (out, "%s%s=%s", first ? "" : " ", keys[k], parts[k]->str);
            first = FALSE;
          }
      g_string_append_c (out, '}');
    }
  for (int k = 0; k < 6; k++)
    g_string_free (parts[k], TRUE);
}

/* convolution_dimension_numbers as dim_labels=b01f_01io->b01f */
static void
conv_dims_text (Pp *p, Msg *im, GString *out)
{
  PNode *c = fld (im, "convolution_dimension_numbers");
  if (!c || !node_is_msg (p, c, "ConvolutionDimensionNumbers"))
    {
      if (!P_FAILED (p))
        p_error (p, im->n->at, "a convolution without convolution_dimension_numbers");
      return;
    }
  Msg m;
  msg_init (&m, p, c);
  struct { const char *a, *b, *sp; char ca, cb; } parts[3] = {
    { "input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions", 'b', 'f' },
    { "kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions", 'i', 'o' },
    { "output_batch_dimension", "output_feature_dimension", "output_spatial_dimensions", 'b', 'f' },
  };
  g_string_append (out, ", dim_labels=");
  for (int k = 0; k < 3 && !P_FAILED (p); k++)
    {
      int64_t a, b;
      fld_int (&m, parts[k].a, 0, &a);
      fld_int (&m, parts[k].b, 0, &b);
      g_autoptr (GArray) sp = fld_ints (&m, parts[k].sp);
      guint rank = 2 + sp->len;
      if (sp->len > 10)
        {
          p_error (p, c->at, "more than 10 spatial dimensions");
          break;
        }
      char *lab = g_malloc0 (rank + 1);
      memset (lab, '?', rank);
      gboolean ok = a >= 0 && a < rank && b >= 0 && b < rank;
      if (ok)
        lab[a] = parts[k].ca, lab[b] = parts[k].cb;
      for (guint i = 0; ok && i < sp->len; i++)
        {
          int64_t d = g_array_index (sp, int64_t, i);
          ok = d >= 0 && d < rank && lab[d] == '?';
          if (ok)
            lab[d] = (char) ('0' + i);
        }
      ok = ok && !strchr (lab, '?');
      if (!ok)
        p_error (p, c->at, "convolution_dimension_numbers: the %s dimensions are not a permutation of 0..%u",
                 k == 0 ? "input" : k == 1 ? "kernel" : "output", rank - 1);
      else
        g_string_append_printf (out, "%s%s", k == 0 ? "" : k == 1 ? "_" : "->", lab);
      g_free (lab);
    }
  msg_check (&m, "ConvolutionDimensionNumbers", NULL);
  msg_clear (&m);
}

static void
dot_dims_text (Pp *p, PNode *d, GString *out, gboolean ragged)
{
  if (!node_is_msg (p, d, "DotDimensionNumbers"))
    return;
  Msg m;
  msg_init (&m, p, d);
  if (ragged)
    {
      PNode *dd = fld (&m, "dot_dimension_numbers");
      if (dd)
        dot_dims_text (p, dd, out, FALSE);
      attr_ints (&m, out, "lhs_ragged_dimensions", "lhs_ragged_dims", FALSE);
      attr_ints (&m, out, "rhs_group_dimensions", "rhs_group_dims", FALSE);
    }
  else
    {
      attr_ints (&m, out, "lhs_batch_dimensions", "lhs_batch_dims", FALSE);
      attr_ints (&m, out, "lhs_contracting_dimensions", "lhs_contracting_dims", FALSE);
      attr_ints (&m, out, "rhs_batch_dimensions", "rhs_batch_dims", FALSE);
      attr_ints (&m, out, "rhs_contracting_dimensions", "rhs_contracting_dims", FALSE);
    }
  msg_check (&m, ragged ? "RaggedDotDimensionNumbers" : "DotDimensionNumbers", NULL);
  msg_clear (&m);
}

/* replica_groups (repeated ReplicaGroup) or collective_device_list */
static void
replica_groups_text (Pp *p, Msg *im, GString *out)
{
  PNode *cdl = fld (im, "collective_device_list");
  Msg cm;
  Msg *src = im;
  if (cdl && node_is_msg (p, cdl, "CollectiveDeviceListProto"))
    {
      msg_init (&cm, p, cdl);
      src = &cm;
      PNode *iota = fld (&cm, "iota_replica_group_list");
      if (iota && node_is_msg (p, iota, "IotaReplicaGroupListProto"))
        {
          Msg io;
          msg_init (&io, p, iota);
          int64_t ng, gs;
          fld_int (&io, "num_replica_groups", 0, &ng);
          fld_int (&io, "num_devices_per_group", 0, &gs);
          g_autoptr (GArray) rd = fld_ints (&io, "iota_reshape_dims");
          g_autoptr (GArray) tp = fld_ints (&io, "iota_transpose_perm");
          g_string_append_printf (out, ", replica_groups=[%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT "]<=[", ng, gs);
          if (rd->len)
            append_ints (out, rd, ",");
          else
            g_string_append_printf (out, "%" G_GINT64_FORMAT, ng * gs);
          g_string_append_c (out, ']');
          if (tp->len)
            {
              g_string_append (out, "T(");
              append_ints (out, tp, ",");
              g_string_append_c (out, ')');
            }
          msg_check (&io, "IotaReplicaGroupListProto", NULL);
          msg_clear (&io);
        }
    }
  else if (!fld (im, "replica_groups"))
    return;
  if (src == im || fld (src, "replica_groups"))
    {
      g_string_append (out, ", replica_groups={");
      PNode *g;
      for (guint i = 0; !P_FAILED (p) && (g = fld_nth (src, "replica_groups", i)); i++)
        {
          if (!node_is_msg (p, g, "a ReplicaGroup"))
            break;
          Msg gm;
          msg_init (&gm, p, g);
          g_autoptr (GArray) ids = fld_ints (&gm, "replica_ids");
          g_string_append_printf (out, "%s{", i ? "," : "");
          append_ints (out, ids, ",");
          g_string_append_c (out, '}');
          msg_check (&gm, "ReplicaGroup", NULL);
          msg_clear (&gm);
        }
      g_string_append_c (out, '}');
    }
  if (src == &cm)
    {
      msg_check (&cm, "CollectiveDeviceListProto", NULL);
      msg_clear (&cm);
    }
}

static gboolean
is_op (const char *op, const char *const *list)
{
  for (int i = 0; list[i]; i++)
    if (strcmp (op, list[i]) == 0)
      return TRUE;
  return FALSE;
}

/* One HloInstructionProto as one HLO text line (without ROOT). */
static char *
instruction_text (Tr *tr, PNode *in, GString *out)
{
  Pp *p = tr->p;
  Msg m;
  msg_init (&m, p, in);
  g_autofree char *name = sanitized (fld_str (&m, "name", FALSE));
  const char *op = fld_str (&m, "opcode", FALSE);
  PNode *shape = fld (&m, "shape");
  char *iname = NULL;
  if (!P_FAILED (p) && (!name || !*name))
    p_error (p, in->at, "an instruction without a name");
  else if (!P_FAILED (p) && (!op || !*op))
    p_error (p, in->at, "instruction '%s' has no opcode", name);
  else if (!P_FAILED (p) && !shape)
    p_error (p, in->at, "instruction '%s' has no shape", name);
  if (P_FAILED (p))
    {
      msg_clear (&m);
      return NULL;
    }
  iname = g_strdup (name);
  g_string_append_printf (out, "%%%s = ", name);
  shape_text (p, shape, out);
  int64_t v;
  if (strcmp (op, "constant") == 0)
    {
      PNode *lit = fld (&m, "literal");
      g_string_append_c (out, ' ');
      if (!lit)
        p_error (p, in->at, "constant '%s' has no literal", name);
      else
        literal_text (p, lit, shape, name, tr->pre, out);
    }
  else if (strcmp (op, "parameter") == 0)
    {
      fld_int (&m, "parameter_number", 0, &v);
      g_string_append_printf (out, " parameter(%" G_GINT64_FORMAT ")", v);
    }
  else
    {
      g_string_append_printf (out, " %s(", op);
      PNode *o;
      for (guint i = 0; !P_FAILED (p) && (o = fld_nth (&m, "operand_ids", i)); i++)
        {
          if (!node_int (p, o, &v))
            break;
          const char *on = g_hash_table_lookup (tr->name_by_id, &v);
          if (!on)
            p_error (p, o->at, "operand_ids: no instruction of this computation has id %" G_GINT64_FORMAT, v);
          else
            g_string_append_printf (out, "%s%%%s", i ? ", " : "", on);
        }
      g_string_append_c (out, ')');
    }

  /* attributes, in the order XLA's printer writes them */
  static const char *const dims_ops[] = { "broadcast", "transpose", "reverse", "reduce", "concatenate", "all-gather",
                                          "all-gather-start", "all-to-all", "reduce-scatter", "sort", "map", NULL };
  if (strcmp (op, "iota") == 0)
    {
      g_autoptr (GArray) d = fld_ints (&m, "dimensions");
      if (d->len != 1)
        p_error (p, in->at, "iota '%s' needs one entry in dimensions (its iota dimension), has %u", name, d->len);
      else
        g_string_append_printf (out, ", iota_dimension=%" G_GINT64_FORMAT, g_array_index (d, int64_t, 0));
    }
  else if (is_op (op, dims_ops))
    attr_ints (&m, out, "dimensions", "dimensions", strcmp (op, "broadcast") == 0 || strcmp (op, "transpose") == 0
               || strcmp (op, "reduce") == 0 || strcmp (op, "reverse") == 0);
  if (strcmp (op, "get-tuple-element") == 0)
    {
      fld_int (&m, "tuple_index", 0, &v);
      g_string_append_printf (out, ", index=%" G_GINT64_FORMAT, v);
    }
  if (strcmp (op, "compare") == 0)
    {
      const char *dir = fld_str (&m, "comparison_direction", TRUE);
      const char *ty = fld_str (&m, "comparison_type", TRUE);
      if (!dir && !P_FAILED (p))
        p_error (p, in->at, "compare '%s' has no comparison_direction", name);
      else if (dir)
        g_string_append_printf (out, ", direction=%s", dir);
      if (ty && *ty)
        g_string_append_printf (out, ", type=%s", ty);
    }
  if (strcmp (op, "reduce-precision") == 0)
    {
      int64_t e, mb;
      fld_int (&m, "exponent_bits", 0, &e);
      fld_int (&m, "mantissa_bits", 0, &mb);
      g_string_append_printf (out, ", exponent_bits=%" G_GINT64_FORMAT ", mantissa_bits=%" G_GINT64_FORMAT, e, mb);
    }
  if (strcmp (op, "convolution") == 0 || strcmp (op, "reduce-window") == 0 || strcmp (op, "select-and-scatter") == 0)
    window_text (p, &m, out);
  if (strcmp (op, "convolution") == 0)
    {
      conv_dims_text (p, &m, out);
      int64_t f, b;
      fld_int (&m, "feature_group_count", 1, &f);
      fld_int (&m, "batch_group_count", 1, &b);
      if (f > 1)
        g_string_append_printf (out, ", feature_group_count=%" G_GINT64_FORMAT, f);
      if (b > 1)
        g_string_append_printf (out, ", batch_group_count=%" G_GINT64_FORMAT, b);
    }
  if (strcmp (op, "slice") == 0)
    {
      g_string_append (out, ", slice={");
      PNode *s;
      for (guint i = 0; !P_FAILED (p) && (s = fld_nth (&m, "slice_dimensions", i)); i++)
        {
          if (!node_is_msg (p, s, "SliceDimensions"))
            break;
          Msg sm;
          msg_init (&sm, p, s);
          int64_t a, b, st;
          fld_int (&sm, "start", 0, &a);
          fld_int (&sm, "limit", 0, &b);
          fld_int (&sm, "stride", 1, &st);
          g_string_append_printf (out, "%s[%" G_GINT64_FORMAT ":%" G_GINT64_FORMAT, i ? ", " : "", a, b);
          if (st != 1)
            g_string_append_printf (out, ":%" G_GINT64_FORMAT, st);
          g_string_append_c (out, ']');
          msg_check (&sm, "SliceDimensions", NULL);
          msg_clear (&sm);
        }
      g_string_append_c (out, '}');
    }
  if (strcmp (op, "dynamic-slice") == 0)
    attr_ints (&m, out, "dynamic_slice_sizes", "dynamic_slice_sizes", TRUE);
  if (strcmp (op, "pad") == 0)
    {
      PNode *pc = fld (&m, "padding_config");
      if (!pc && !P_FAILED (p))
        p_error (p, in->at, "pad '%s' has no padding_config", name);
      else if (pc && node_is_msg (p, pc, "PaddingConfig"))
        {
          Msg pm;
          msg_init (&pm, p, pc);
          g_string_append (out, ", padding=");
          PNode *d;
          for (guint i = 0; !P_FAILED (p) && (d = fld_nth (&pm, "dimensions", i)); i++)
            {
              if (!node_is_msg (p, d, "PaddingConfigDimension"))
                break;
              Msg dm;
              msg_init (&dm, p, d);
              int64_t lo, hi, interior;
              fld_int (&dm, "edge_padding_low", 0, &lo);
              fld_int (&dm, "edge_padding_high", 0, &hi);
              fld_int (&dm, "interior_padding", 0, &interior);
              g_string_append_printf (out, "%s%" G_GINT64_FORMAT "_%" G_GINT64_FORMAT, i ? "x" : "", lo, hi);
              if (interior)
                g_string_append_printf (out, "_%" G_GINT64_FORMAT, interior);
              msg_check (&dm, "PaddingConfigDimension", NULL);
              msg_clear (&dm);
            }
          msg_check (&pm, "PaddingConfig", NULL);
          msg_clear (&pm);
        }
    }
  if (strcmp (op, "dot") == 0 || strcmp (op, "ragged-dot") == 0)
    {
      gboolean ragged = op[0] == 'r';
      PNode *d = fld (&m, ragged ? "ragged_dot_dimension_numbers" : "dot_dimension_numbers");
      if (!d && !P_FAILED (p))
        p_error (p, in->at, "%s '%s' has no %s", op, name, ragged ? "ragged_dot_dimension_numbers" : "dot_dimension_numbers");
      else if (d)
        dot_dims_text (p, d, out, ragged);
    }
  PNode *pc = fld (&m, "precision_config");
  if (pc && node_is_msg (p, pc, "PrecisionConfig"))
    {
      Msg pm;
      msg_init (&pm, p, pc);
      GString *prec = g_string_new (NULL);
      gboolean any = FALSE;
      PNode *e;
      for (guint i = 0; (e = fld_nth (&pm, "operand_precision", i)); i++)
        {
          g_autofree char *w = e->val ? g_ascii_strdown (e->val, -1) : g_strdup ("?");
          any = any || strcmp (w, "default") != 0;
          g_string_append_printf (prec, "%s%s", i ? "," : "", w);
        }
      if (any)
        g_string_append_printf (out, ", operand_precision={%s}", prec->str);
      g_string_free (prec, TRUE);
      static const char *const skipped[] = { "algorithm", NULL };
      msg_check (&pm, "PrecisionConfig", skipped);
      msg_clear (&pm);
    }
  if (strcmp (op, "gather") == 0 || strcmp (op, "scatter") == 0)
    {
      gboolean g = op[0] == 'g';
      PNode *d = fld (&m, g ? "gather_dimension_numbers" : "scatter_dimension_numbers");
      if (!d && !P_FAILED (p))
        p_error (p, in->at, "%s '%s' has no %s_dimension_numbers", op, name, op);
      else if (d && node_is_msg (p, d, "dimension numbers"))
        {
          Msg dm;
          msg_init (&dm, p, d);
          static const char *const gf[] = { "offset_dims", "collapsed_slice_dims", "start_index_map",
                                            "operand_batching_dims", "start_indices_batching_dims", NULL };
          static const char *const sf[] = { "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                                            "input_batching_dims", "scatter_indices_batching_dims", NULL };
          const char *const *fs = g ? gf : sf;
          for (int i = 0; fs[i]; i++)
            attr_ints (&dm, out, fs[i], fs[i], i < 3);
          fld_int (&dm, "index_vector_dim", 0, &v);
          g_string_append_printf (out, ", index_vector_dim=%" G_GINT64_FORMAT, v);
          msg_check (&dm, g ? "GatherDimensionNumbers" : "ScatterDimensionNumbers", NULL);
          msg_clear (&dm);
        }
      if (g)
        attr_ints (&m, out, "gather_slice_sizes", "slice_sizes", TRUE);
      gboolean b;
      fld_bool (&m, "indices_are_sorted", &b);
      if (b)
        g_string_append (out, ", indices_are_sorted=true");
      if (!g && (fld_bool (&m, "unique_indices", &b), b))
        g_string_append (out, ", unique_indices=true");
    }
  if (strcmp (op, "batch-norm-training") == 0 || strcmp (op, "batch-norm-inference") == 0
      || strcmp (op, "batch-norm-grad") == 0)
    {
      PNode *eps = fld (&m, "epsilon");
      if (eps && eps->val)
        g_string_append_printf (out, ", epsilon=%s", eps->val);
      fld_int (&m, "feature_index", 0, &v);
      g_string_append_printf (out, ", feature_index=%" G_GINT64_FORMAT, v);
    }
  if (strcmp (op, "rng") == 0)
    {
      const char *d = fld_str (&m, "distribution", TRUE);
      if (d && g_str_has_prefix (d, "RNG_"))
        {
          g_autofree char *w = g_ascii_strdown (d, -1);
          g_string_append_printf (out, ", distribution=%s", w);
        }
      else if (!P_FAILED (p))
        p_error (p, in->at, "rng '%s' has no distribution (RNG_UNIFORM or RNG_NORMAL)", name);
    }
  if (strcmp (op, "rng-bit-generator") == 0)
    {
      const char *a = fld_str (&m, "rng_algorithm", TRUE);
      g_autofree char *w = g_ascii_strdown (a ? a : "RNG_DEFAULT", -1);
      g_string_append_printf (out, ", algorithm=%s", w);
    }
  if (strcmp (op, "rng-get-and-update-state") == 0)
    {
      fld_int (&m, "delta", 0, &v);
      g_string_append_printf (out, ", delta=%" G_GINT64_FORMAT, v);
    }
  if (strcmp (op, "topk") == 0)
    {
      gboolean largest;
      fld_int (&m, "k", 0, &v);
      fld_bool (&m, "largest", &largest);
      g_string_append_printf (out, ", k=%" G_GINT64_FORMAT ", largest=%s", v, largest ? "true" : "false");
    }
  if (strcmp (op, "fft") == 0)
    {
      const char *t = fld_str (&m, "fft_type", TRUE);
      g_string_append_printf (out, ", fft_type=%s", t ? t : "FFT");
      attr_ints (&m, out, "fft_length", "fft_length", TRUE);
    }
  if (strcmp (op, "copy-start") == 0)
    {
      PNode *cp = fld (&m, "cross_program_prefetch_index");
      if (cp && node_int (p, cp, &v))
        g_string_append_printf (out, ", cross_program_prefetch_index=%" G_GINT64_FORMAT, v);
    }
  /* collectives */
  replica_groups_text (p, &m, out);
  if (fld (&m, "channel_id") && (fld_int (&m, "channel_id", 0, &v), v != 0))
    g_string_append_printf (out, ", channel_id=%" G_GINT64_FORMAT, v);
  gboolean flag;
  if (fld_bool (&m, "constrain_layout", &flag) && flag)
    g_string_append (out, ", constrain_layout=true");
  if (fld_bool (&m, "use_global_device_ids", &flag) && flag)
    g_string_append (out, ", use_global_device_ids=true");
  if (fld_bool (&m, "is_host_transfer", &flag) && flag)
    g_string_append (out, ", is_host_transfer=true");
  if (fld (&m, "source_target_pairs"))
    {
      g_string_append (out, ", source_target_pairs={");
      PNode *s;
      for (guint i = 0; !P_FAILED (p) && (s = fld_nth (&m, "source_target_pairs", i)); i++)
        {
          if (!node_is_msg (p, s, "SourceTarget"))
            break;
          Msg sm;
          msg_init (&sm, p, s);
          int64_t a, b;
          fld_int (&sm, "source", 0, &a);
          fld_int (&sm, "target", 0, &b);
          g_string_append_printf (out, "%s{%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT "}", i ? "," : "", a, b);
          msg_check (&sm, "SourceTarget", NULL);
          msg_clear (&sm);
        }
      g_string_append_c (out, '}');
    }
  if (strcmp (op, "sort") == 0 && fld_bool (&m, "is_stable", &flag) && flag)
    g_string_append (out, ", is_stable=true");
  /* called computations: which attribute each position is, as
   * HloInstruction::CreateFromProto reads them */
  guint nc = n_called (&m);
  const char *c0 = NULL, *c1 = NULL;
  if (P_FAILED (p))
    ;
  else if (strcmp (op, "while") == 0)
    {
      /* called_computation_ids: body, then condition (kBodyComputationIndex = 0) */
      if (nc != 2)
        p_error (p, in->at, "while '%s' calls %u computations, not 2 (body, condition)", name, nc);
      else if ((c0 = comp_name (tr, &m, 0, in->at)) && (c1 = comp_name (tr, &m, 1, in->at)))
        g_string_append_printf (out, ", condition=%%%s, body=%%%s", c1, c0);
    }
  else if (strcmp (op, "conditional") == 0)
    {
      /* a pred selector takes true, false; an index selector the branches */
      PNode *sel = fld_nth (&m, "operand_ids", 0);
      int64_t sid = 0;
      gboolean pred = FALSE;
      if (sel && node_int (p, sel, &sid))
        {
          PNode *si = g_hash_table_lookup (tr->instr_by_id, &sid);
          Msg sm;
          if (si)
            {
              msg_init (&sm, p, si);
              PNode *ssh = fld (&sm, "shape");
              if (ssh && ssh->kids)
                {
                  Msg shm;
                  msg_init (&shm, p, ssh);
                  PNode *et = fld (&shm, "element_type");
                  pred = et && et->val && strcmp (et->val, "PRED") == 0;
                  msg_clear (&shm);
                }
              msg_clear (&sm);
            }
        }
      if (pred && nc == 2)
        {
          if ((c0 = comp_name (tr, &m, 0, in->at)) && (c1 = comp_name (tr, &m, 1, in->at)))
            g_string_append_printf (out, ", true_computation=%%%s, false_computation=%%%s", c0, c1);
        }
      else
        {
          g_string_append (out, ", branch_computations={");
          for (guint i = 0; i < nc && (c0 = comp_name (tr, &m, i, in->at)); i++)
            g_string_append_printf (out, "%s%%%s", i ? ", " : "", c0);
          g_string_append_c (out, '}');
        }
    }
  else if (strcmp (op, "select-and-scatter") == 0)
    {
      if (nc != 2)
        p_error (p, in->at, "select-and-scatter '%s' calls %u computations, not 2 (select, scatter)", name, nc);
      else if ((c0 = comp_name (tr, &m, 0, in->at)) && (c1 = comp_name (tr, &m, 1, in->at)))
        g_string_append_printf (out, ", select=%%%s, scatter=%%%s", c0, c1);
    }
  else if (strcmp (op, "fusion") == 0 || strcmp (op, "async-start") == 0)
    {
      if (strcmp (op, "fusion") == 0)
        {
          const char *k = fld_str (&m, "fusion_kind", TRUE);
          g_string_append_printf (out, ", kind=%s", k ? k : "kLoop");
        }
      if (nc != 1)
        p_error (p, in->at, "%s '%s' calls %u computations, not 1", op, name, nc);
      else if ((c0 = comp_name (tr, &m, 0, in->at)))
        g_string_append_printf (out, ", calls=%%%s", c0);
    }
  else if (strcmp (op, "custom-call") == 0)
    {
      if (nc > 0)
        {
          g_string_append (out, ", called_computations={");
          for (guint i = 0; i < nc && (c0 = comp_name (tr, &m, i, in->at)); i++)
            g_string_append_printf (out, "%s%%%s", i ? ", " : "", c0);
          g_string_append_c (out, '}');
        }
    }
  else if (strcmp (op, "async-update") == 0 || strcmp (op, "async-done") == 0)
    fld (&m, "called_computation_ids"); /* the start's, as XLA checks */
  else if (nc == 1)
    {
      if ((c0 = comp_name (tr, &m, 0, in->at)))
        g_string_append_printf (out, ", to_apply=%%%s", c0);
    }
  else if (nc > 1)
    p_error (p, in->at, "%s '%s' calls %u computations; podsim reads one (to_apply) for this opcode", op, name, nc);
  if (strcmp (op, "custom-call") == 0)
    {
      const char *t = fld_str (&m, "custom_call_target", FALSE);
      g_string_append (out, ", custom_call_target=\"");
      if (t)
        escape_string (out, t, strlen (t));
      g_string_append_c (out, '"');
      if (fld_bool (&m, "custom_call_has_side_effect", &flag) && flag)
        g_string_append (out, ", custom_call_has_side_effect=true");
      const char *api = fld_str (&m, "custom_call_api_version", TRUE);
      if (api && strcmp (api, "API_VERSION_ORIGINAL") != 0)
        g_string_append_printf (out, ", api_version=%s", api);
    }
  PNode *sh = fld (&m, "sharding");
  if (sh)
    {
      g_string_append (out, ", sharding=");
      sharding_text (p, sh, out);
    }
  PNode *cpred = fld_nth (&m, "control_predecessor_ids", 0);
  if (cpred)
    {
      g_string_append (out, ", control-predecessors={");
      for (guint i = 0; !P_FAILED (p) && (cpred = fld_nth (&m, "control_predecessor_ids", i)); i++)
        {
          const char *cn = node_int (p, cpred, &v) ? g_hash_table_lookup (tr->name_by_id, &v) : NULL;
          if (!cn && !P_FAILED (p))
            p_error (p, cpred->at, "control_predecessor_ids: no instruction of this computation has id %" G_GINT64_FORMAT, v);
          else if (cn)
            g_string_append_printf (out, "%s%%%s", i ? ", " : "", cn);
        }
      g_string_append_c (out, '}');
    }
  PNode *fa = fld (&m, "frontend_attributes");
  if (fa && node_is_msg (p, fa, "FrontendAttributes") && fa->kids->len > 0)
    {
      Msg fm;
      msg_init (&fm, p, fa);
      g_string_append (out, ", frontend_attributes={");
      PNode *e;
      for (guint i = 0; !P_FAILED (p) && (e = fld_nth (&fm, "map", i)); i++)
        {
          if (!node_is_msg (p, e, "a map entry"))
            break;
          Msg em;
          msg_init (&em, p, e);
          const char *k = fld_str (&em, "key", FALSE), *val = fld_str (&em, "value", FALSE);
          if (k && *k)
            {
              g_string_append_printf (out, "%s%s=\"", i ? "," : "", k);
              escape_string (out, val ? val : "", val ? strlen (val) : 0);
              g_string_append_c (out, '"');
            }
          msg_clear (&em);
        }
      g_string_append_c (out, '}');
      msg_clear (&fm);
    }
  PNode *md = fld (&m, "metadata");
  if (md && node_is_msg (p, md, "OpMetadata") && md->kids->len > 0)
    {
      Msg mm;
      msg_init (&mm, p, md);
      GString *t = g_string_new (NULL);
      static const char *const strs[] = { "op_type", "op_name", "source_file", NULL };
      for (int i = 0; strs[i]; i++)
        {
          const char *s = fld_str (&mm, strs[i], FALSE);
          if (s && *s)
            {
              g_string_append_printf (t, "%s%s=\"", t->len ? " " : "", strs[i]);
              escape_string (t, s, strlen (s));
              g_string_append_c (t, '"');
            }
        }
      static const char *const nums[] = { "source_line", "stack_frame_id", NULL };
      for (int i = 0; nums[i]; i++)
        if (fld_int (&mm, nums[i], 0, &v) && v)
          g_string_append_printf (t, "%s%s=%" G_GINT64_FORMAT, t->len ? " " : "", nums[i], v);
      if (t->len)
        g_string_append_printf (out, ", metadata={%s}", t->str);
      g_string_free (t, TRUE);
      msg_clear (&mm); /* the rest of OpMetadata (profile, sizes, ...) is not simulated */
    }
  PNode *bc = fld (&m, "backend_config");
  if (bc && bc->is_str && bc->vlen > 0)
    {
      g_string_append (out, ", backend_config=\"");
      escape_string (out, bc->val, bc->vlen);
      g_string_append_c (out, '"');
    }
  /* fields that do not change what the program computes or costs */
  static const char *const skipped[] = {
    "id", "operand_ids", "called_computation_ids", "statistics_viz", "original_value", "result_accuracy",
    "padding_type", "parameter_replication", "async_execution_thread", "is_composite", "all_reduce_id",
    "is_cross_program_prefetch", "custom_call_schedule", "outfeed_shape", "operand_shapes_with_layout", NULL,
  };
  if (!P_FAILED (p))
    {
      g_autofree char *what = g_strdup_printf ("HloInstructionProto (%s '%s')", op, name);
      msg_check (&m, what, skipped);
    }
  msg_clear (&m);
  if (P_FAILED (p))
    {
      g_free (iname);
      return NULL;
    }
  return iname;
}

/* ---- computations and the module --------------------------------------- */

static void
comp_free (gpointer data)
{
  Comp *c = data;
  g_free (c->name);
  g_free (c);
}

/* Appends computation c after the computations it calls (XLA writes them
 * so, HloModule::ToProto's post order; a hand-written proto may not). */
static void
place_comp (Tr *tr, Comp *c, GHashTable *state, GString *out, const char *entry_name);

/* The ids an instruction needs defined before it: its operands and its
 * control predecessors. */
static GArray *
instr_deps (Pp *p, PNode *in)
{
  GArray *a = g_array_new (FALSE, FALSE, sizeof (int64_t));
  Msg im;
  msg_init (&im, p, in);
  static const char *const keys[] = { "operand_ids", "control_predecessor_ids" };
  for (gsize k = 0; k < G_N_ELEMENTS (keys); k++)
    {
      g_autoptr (GArray) ids = fld_ints (&im, keys[k]);
      g_array_append_vals (a, ids->data, ids->len);
    }
  msg_clear (&im);
  return a;
}

/* The instructions in an order where each comes after those it reads: an
 * HloModuleProto lists them by id, and XLA does not ask that a proto list
 * an operand first (HloComputation::CreateFromProto sorts them). The
 * listed order is kept where it already is one (a depth-first walk of the
 * operands of each instruction in turn, without recursion); a cycle is an
 * error at an instruction on it. transfer container. */
static GPtrArray *
topo_order (Tr *tr, GPtrArray *listed)
{
  Pp *p = tr->p;
  GPtrArray *order = g_ptr_array_new ();
  GHashTable *mark = g_hash_table_new (NULL, NULL);   /* PNode* -> 1 open, 2 placed */
  GHashTable *deps = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) g_array_unref);
  GArray *stack = g_array_new (FALSE, FALSE, sizeof (gpointer));
  GArray *next = g_array_new (FALSE, FALSE, sizeof (guint));
  for (guint i = 0; i < listed->len && !P_FAILED (p); i++)
    {
      PNode *start = g_ptr_array_index (listed, i);
      if (g_hash_table_lookup (mark, start))
        continue;
      guint zero = 0;
      g_array_append_val (stack, start);
      g_array_append_val (next, zero);
      g_hash_table_insert (mark, start, GINT_TO_POINTER (1));
      while (stack->len && !P_FAILED (p))
        {
          PNode *n = g_array_index (stack, gpointer, stack->len - 1);
          guint *k = &g_array_index (next, guint, next->len - 1);
          GArray *d = g_hash_table_lookup (deps, n);
          if (!d)
            {
              d = instr_deps (p, n);
              g_hash_table_insert (deps, n, d);
            }
          if (*k < d->len)
            {
              int64_t id = g_array_index (d, int64_t, (*k)++);
              PNode *dep = g_hash_table_lookup (tr->instr_by_id, &id);
              if (!dep) /* an unknown id: instruction_text says so */
                continue;
              int st = GPOINTER_TO_INT (g_hash_table_lookup (mark, dep));
              if (st == 1)
                {
                  p_error (p, dep->at, "instruction '%s' depends on itself (through operand_ids or "
                           "control_predecessor_ids)", (const char *) g_hash_table_lookup (tr->name_by_id, &id));
                  break;
                }
              if (st == 0)
                {
                  g_array_append_val (stack, dep);
                  g_array_append_val (next, zero);
                  g_hash_table_insert (mark, dep, GINT_TO_POINTER (1));
                }
              continue;
            }
          g_hash_table_insert (mark, n, GINT_TO_POINTER (2));
          g_ptr_array_add (order, n);
          g_array_set_size (stack, stack->len - 1);
          g_array_set_size (next, next->len - 1);
        }
    }
  g_array_free (stack, TRUE);
  g_array_free (next, TRUE);
  g_hash_table_destroy (deps);
  g_hash_table_destroy (mark);
  return order;
}

static void
comp_text (Tr *tr, Comp *c, GHashTable *state, GString *out, gboolean is_entry)
{
  Pp *p = tr->p;
  Msg m;
  msg_init (&m, p, c->node);
  int64_t root_id = 0;
  PNode *root = fld (&m, "root_id");
  if (root)
    node_int (p, root, &root_id);
  /* callees first */
  PNode *in;
  for (guint i = 0; !P_FAILED (p) && (in = fld_nth (&m, "instructions", i)); i++)
    {
      if (!node_is_msg (p, in, "an HloInstructionProto"))
        break;
      Msg im;
      msg_init (&im, p, in);
      PNode *cc;
      for (guint j = 0; !P_FAILED (p) && (cc = fld_nth (&im, "called_computation_ids", j)); j++)
        {
          int64_t id;
          Comp *callee = node_int (p, cc, &id) ? g_hash_table_lookup (tr->comp_by_id, &id) : NULL;
          if (callee)
            place_comp (tr, callee, state, out, NULL);
        }
      msg_clear (&im);
    }
  /* ids and names of this computation's instructions */
  g_hash_table_remove_all (tr->name_by_id);
  g_hash_table_remove_all (tr->instr_by_id);
  GPtrArray *keep = g_ptr_array_new_with_free_func (g_free);
  guint n_instr = 0;
  int64_t last_id = 0;
  for (guint i = 0; !P_FAILED (p) && (in = fld_nth (&m, "instructions", i)); i++, n_instr++)
    {
      Msg im;
      msg_init (&im, p, in);
      int64_t id;
      PNode *idn = fld (&im, "id");
      g_autofree char *nm = sanitized (fld_str (&im, "name", FALSE));
      if (!idn)
        p_error (p, in->at, "an instruction without an id (operand_ids name instructions by id)");
      else if (node_int (p, idn, &id) && nm)
        {
          int64_t *key = g_new (int64_t, 1);
          *key = id;
          if (g_hash_table_contains (tr->name_by_id, key))
            {
              p_error (p, idn->at, "two instructions have id %" G_GINT64_FORMAT, id);
              g_free (key);
            }
          else
            {
              char *nmc = g_strdup (nm);
              g_ptr_array_add (keep, nmc);
              g_hash_table_insert (tr->name_by_id, key, nmc);
              int64_t *key2 = g_memdup2 (key, sizeof *key);
              g_hash_table_insert (tr->instr_by_id, key2, in);
              last_id = id;
            }
        }
      msg_clear (&im);
    }
  if (!P_FAILED (p) && n_instr == 0)
    p_error (p, c->node->at, "computation '%s' has no instructions", c->name);
  if (!P_FAILED (p) && !root)
    root_id = last_id;
  if (!P_FAILED (p) && !g_hash_table_contains (tr->name_by_id, &root_id))
    p_error (p, root ? root->at : c->node->at, "root_id %" G_GINT64_FORMAT ": no instruction of computation '%s' has that id", root_id,
             c->name);
  if (!P_FAILED (p))
    g_string_append_printf (out, "%s%%%s { /*@%" G_GSIZE_FORMAT "*/\n", is_entry ? "ENTRY " : "", c->name, c->node->at);
  g_autoptr (GPtrArray) listed = g_ptr_array_new ();
  for (guint i = 0; !P_FAILED (p) && (in = fld_nth (&m, "instructions", i)); i++)
    g_ptr_array_add (listed, in);
  g_autoptr (GPtrArray) ordered = P_FAILED (p) ? NULL : topo_order (tr, listed);
  for (guint i = 0; ordered && !P_FAILED (p) && i < ordered->len; i++)
    {
      in = g_ptr_array_index (ordered, i);
      GString *line = g_string_new (NULL);
      g_string_truncate (tr->pre, 0);
      g_autofree char *nm = instruction_text (tr, in, line);
      if (nm)
        {
          Msg im;
          msg_init (&im, p, in);
          int64_t id = 0;
          fld_int (&im, "id", 0, &id);
          msg_clear (&im);
          /* the elements of a tuple literal, before the tuple of them */
          g_auto (GStrv) pre = g_strsplit (tr->pre->str, "\n", -1);
          for (gchar **k = pre; *k; k++)
            if (**k)
              g_string_append_printf (out, "  %s /*@%" G_GSIZE_FORMAT "*/\n", *k, in->at);
          g_string_append_printf (out, "  %s%s /*@%" G_GSIZE_FORMAT "*/\n", id == root_id ? "ROOT " : "", line->str, in->at);
        }
      g_string_free (line, TRUE);
    }
  if (!P_FAILED (p))
    g_string_append (out, "}\n\n");
  static const char *const skipped[] = { "name", "program_shape", "id", "execution_thread", "is_fusion_computation", NULL };
  msg_check (&m, "HloComputationProto", skipped);
  msg_clear (&m);
  g_ptr_array_unref (keep);
}

static void
place_comp (Tr *tr, Comp *c, GHashTable *state, GString *out, const char *entry_name)
{
  int s = GPOINTER_TO_INT (g_hash_table_lookup (state, c));
  if (s == 2 || P_FAILED (tr->p))
    return;
  if (s == 1)
    {
      p_error (tr->p, c->node->at, "computation '%s' calls itself (directly or through others): HLO has no recursion",
               c->name);
      return;
    }
  g_hash_table_insert (state, c, GINT_TO_POINTER (1));
  /* name_by_id is per computation: comp_text rebuilds it after callees */
  comp_text (tr, c, state, out, entry_name != NULL);
  g_hash_table_insert (state, c, GINT_TO_POINTER (2));
}

/* One HloModuleProto (or HloProto wrapping one) as HLO text. */
static gboolean
module_text (Pp *p, PNode *top, GString *out)
{
  Msg tm;
  msg_init (&tm, p, top);
  PNode *mod = top;
  PNode *hm = fld (&tm, "hlo_module");
  if (hm && node_is_msg (p, hm, "an HloModuleProto"))
    mod = hm;
  Msg m;
  msg_init (&m, p, mod);
  g_autofree char *mname = sanitized (fld_str (&m, "name", FALSE));
  const char *ename = fld_str (&m, "entry_computation_name", FALSE);
  int64_t eid = 0;
  PNode *eidn = fld (&m, "entry_computation_id");
  if (eidn)
    node_int (p, eidn, &eid);
  Tr tr = { .p = p };
  tr.pre = g_string_new (NULL);
  tr.comp_by_id = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, comp_free);
  tr.name_by_id = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  tr.instr_by_id = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  GPtrArray *order = g_ptr_array_new ();
  Comp *entry = NULL;
  PNode *cn;
  for (guint i = 0; !P_FAILED (p) && (cn = fld_nth (&m, "computations", i)); i++)
    {
      if (!node_is_msg (p, cn, "an HloComputationProto"))
        break;
      Msg cm;
      msg_init (&cm, p, cn);
      g_autofree char *nm = sanitized (fld_str (&cm, "name", FALSE));
      int64_t id = 0;
      PNode *idn = fld (&cm, "id");
      if (!nm || !*nm)
        p_error (p, cn->at, "a computation without a name");
      else if (!idn)
        p_error (p, cn->at, "computation '%s' has no id (called_computation_ids name computations by id)", nm);
      else if (node_int (p, idn, &id))
        {
          Comp *c = g_new0 (Comp, 1);
          c->id = id;
          c->name = g_strdup (nm);
          c->node = cn;
          int64_t *key = g_memdup2 (&id, sizeof id);
          if (g_hash_table_contains (tr.comp_by_id, key))
            {
              p_error (p, idn->at, "two computations have id %" G_GINT64_FORMAT, id);
              g_free (key);
              comp_free (c);
            }
          else
            {
              g_hash_table_insert (tr.comp_by_id, key, c);
              g_ptr_array_add (order, c);
              if ((eidn && id == eid) || (!eidn && ename && strcmp (ename, nm) == 0))
                entry = c;
            }
        }
      msg_clear (&cm);
    }
  if (!P_FAILED (p) && order->len == 0)
    p_error (p, mod->at, "the module has no computations");
  if (!P_FAILED (p) && !entry)
    {
      if (eidn)
        p_error (p, eidn->at, "entry_computation_id %" G_GINT64_FORMAT ": no computation has that id", eid);
      else
        entry = g_ptr_array_index (order, order->len - 1);
    }
  /* HloModuleProtoWithConfig: the device counts of its config are the
   * header's; the rest of the config tunes XLA's compiler */
  int64_t replicas = 1, partitions = 1;
  PNode *cfg = mod != top ? fld (&tm, "config") : NULL;
  if (cfg && node_is_msg (p, cfg, "an HloModuleConfigProto"))
    {
      Msg cm;
      msg_init (&cm, p, cfg);
      fld_int (&cm, "replica_count", 1, &replicas);
      fld_int (&cm, "num_partitions", 1, &partitions);
      msg_clear (&cm);
    }
  if (!P_FAILED (p))
    {
      g_string_append_printf (out, "HloModule %s", mname && *mname ? mname : "module");
      if (replicas > 1)
        g_string_append_printf (out, ", replica_count=%" G_GINT64_FORMAT, replicas);
      if (partitions > 1)
        g_string_append_printf (out, ", num_partitions=%" G_GINT64_FORMAT, partitions);
      /* the shardings XLA's partitioner records from the entry's
       * parameters and root: the HLO reader applies them (doc/hlo.md) */
      PNode *ps;
      for (guint i = 0; !P_FAILED (p) && (ps = fld_nth (&m, "spmd_parameters_shardings", i)); i++)
        {
          g_string_append (out, i ? ", " : ", spmd_parameters_shardings={");
          sharding_text (p, ps, out);
          if (!fld_nth (&m, "spmd_parameters_shardings", i + 1))
            g_string_append_c (out, '}');
        }
      PNode *os = fld (&m, "spmd_output_sharding");
      if (os && !P_FAILED (p))
        {
          g_string_append (out, ", spmd_output_sharding=");
          sharding_text (p, os, out);
        }
      g_string_append_printf (out, " /*@%" G_GSIZE_FORMAT "*/\n\n", mod->at);
      GHashTable *state = g_hash_table_new (NULL, NULL);
      for (guint i = 0; i < order->len && !P_FAILED (p); i++)
        if (order->pdata[i] != entry)
          place_comp (&tr, order->pdata[i], state, out, NULL);
      g_hash_table_insert (state, entry, GINT_TO_POINTER (1));
      comp_text (&tr, entry, state, out, TRUE);
      g_hash_table_destroy (state);
    }
  /* what HLO text has no place for, or podsim does not simulate: the
   * program shapes (the computations' parameters and roots say them),
   * the SPMD shardings of parameters and output (the instructions carry
   * them), aliasing, prefetch, schedule, layouts, stack frames */
  static const char *const skipped[] = {
    "id", "host_program_shape", "input_output_alias", "buffer_donor", "cross_program_prefetches", "is_dynamic",
    "use_auto_spmd_partitioning", "stack_frame_index",
    "dynamic_parameter_binding", "frontend_attributes", "schedule", "profile_info", "device_assignment",
    "original_value_recovery_table", NULL,
  };
  msg_check (&m, "HloModuleProto", skipped);
  static const char *const top_skipped[] = { "buffer_assignment", NULL };
  if (mod != top)
    msg_check (&tm, "HloProto or HloModuleProtoWithConfig", top_skipped);
  msg_clear (&m);
  msg_clear (&tm);
  g_ptr_array_unref (order);
  g_hash_table_destroy (tr.comp_by_id);
  g_hash_table_destroy (tr.name_by_id);
  g_hash_table_destroy (tr.instr_by_id);
  g_string_free (tr.pre, TRUE);
  return !P_FAILED (p);
}

/* ---- enums written as numbers ----------------------------------------- */

/* The text format writes an enum as its name or as its number; the enums
 * an HloModuleProto's fields read, with their numbers from
 * xla/xla_data.proto (PrimitiveType, OpSharding.Type, PrecisionConfig.
 * Precision, RandomDistribution, RandomAlgorithm, FftType) and
 * xla/service/hlo.proto (CustomCallApiVersion). */
typedef struct { int num; const char *name; } EnumVal;
static const EnumVal primitive_types[] = {
  { 0, "PRIMITIVE_TYPE_INVALID" }, { 1, "PRED" }, { 30, "S1" }, { 26, "S2" }, { 21, "S4" }, { 2, "S8" },
  { 3, "S16" }, { 4, "S32" }, { 5, "S64" }, { 31, "U1" }, { 27, "U2" }, { 22, "U4" }, { 6, "U8" },
  { 7, "U16" }, { 8, "U32" }, { 9, "U64" }, { 10, "F16" }, { 11, "F32" }, { 16, "BF16" }, { 12, "F64" },
  { 19, "F8E5M2" }, { 28, "F8E4M3" }, { 20, "F8E4M3FN" }, { 23, "F8E4M3B11FNUZ" }, { 29, "F8E3M4" },
  { 24, "F8E5M2FNUZ" }, { 25, "F8E4M3FNUZ" }, { 32, "F4E2M1FN" }, { 33, "F8E8M0FNU" }, { 15, "C64" },
  { 18, "C128" }, { 13, "TUPLE" }, { 14, "OPAQUE_TYPE" }, { 17, "TOKEN" }, { -1, NULL },
};
static const EnumVal sharding_types[] = {
  { 0, "REPLICATED" }, { 1, "MAXIMAL" }, { 2, "TUPLE" }, { 3, "OTHER" }, { 4, "MANUAL" }, { 5, "UNKNOWN" },
  { -1, NULL },
};
static const EnumVal precisions[] = {
  { 0, "DEFAULT" }, { 1, "HIGH" }, { 2, "HIGHEST" }, { 3, "PACKED_NIBBLE" }, { -1, NULL },
};
static const EnumVal distributions[] = { { 0, "RNG_INVALID" }, { 1, "RNG_UNIFORM" }, { 2, "RNG_NORMAL" }, { -1, NULL } };
static const EnumVal rng_algorithms[] = { { 0, "RNG_DEFAULT" }, { 1, "RNG_THREE_FRY" }, { 2, "RNG_PHILOX" }, { -1, NULL } };
static const EnumVal fft_types[] = { { 0, "FFT" }, { 1, "IFFT" }, { 2, "RFFT" }, { 3, "IRFFT" }, { -1, NULL } };
static const EnumVal api_versions[] = {
  { 0, "API_VERSION_UNSPECIFIED" }, { 1, "API_VERSION_ORIGINAL" }, { 2, "API_VERSION_STATUS_RETURNING" },
  { 3, "API_VERSION_STATUS_RETURNING_UNIFIED" }, { 4, "API_VERSION_TYPED_FFI" }, { -1, NULL },
};

static gboolean
is_sharding_key (const char *k)
{
  return k && (strcmp (k, "sharding") == 0 || strcmp (k, "tuple_shardings") == 0
               || strcmp (k, "spmd_output_sharding") == 0 || strcmp (k, "spmd_parameters_shardings") == 0);
}

/* Rewrites every enum field written as a number into its name, so that the
 * readers below see one form; a number that names no value is an error at
 * its position. `parent` is the key of the message holding n's fields. */
static void
enum_numbers (Pp *p, PNode *n, const char *parent)
{
  for (guint i = 0; !P_FAILED (p) && n->kids && i < n->kids->len; i++)
    {
      PNode *k = g_ptr_array_index (n->kids, i);
      if (k->kids)
        {
          enum_numbers (p, k, k->key);
          continue;
        }
      if (!k->val || k->is_str || !(g_ascii_isdigit (k->val[0]) || k->val[0] == '-'))
        continue;
      const EnumVal *tab = NULL;
      const char *what = NULL;
      if (strcmp (k->key, "element_type") == 0)
        tab = primitive_types, what = "PrimitiveType";
      else if ((strcmp (k->key, "type") == 0 || strcmp (k->key, "last_tile_dims") == 0) && is_sharding_key (parent))
        tab = sharding_types, what = "OpSharding.Type";
      else if (strcmp (k->key, "operand_precision") == 0)
        tab = precisions, what = "PrecisionConfig.Precision";
      else if (strcmp (k->key, "distribution") == 0)
        tab = distributions, what = "RandomDistribution";
      else if (strcmp (k->key, "rng_algorithm") == 0)
        tab = rng_algorithms, what = "RandomAlgorithm";
      else if (strcmp (k->key, "fft_type") == 0)
        tab = fft_types, what = "FftType";
      else if (strcmp (k->key, "custom_call_api_version") == 0)
        tab = api_versions, what = "CustomCallApiVersion";
      if (!tab)
        continue;
      char *end = NULL;
      long v = strtol (k->val, &end, 10);
      const char *name = NULL;
      for (int j = 0; end && *end == '\0' && tab[j].name; j++)
        if (tab[j].num == v)
          name = tab[j].name;
      if (!name)
        {
          p_error (p, k->at, "'%s: %s' is no value of the enum %s", k->key, k->val, what);
          return;
        }
      g_free (k->val);
      k->val = g_strdup (name);
      k->vlen = strlen (name);
    }
}

/* Where a `// -----` line (xla-translate's -split-input-file) starts, or len. */
static gsize
next_split (const char *t, gsize len, gsize from)
{
  for (gsize i = from; i < len; i++)
    if ((i == 0 || t[i - 1] == '\n') && len - i >= 8 && strncmp (t + i, "// -----", 8) == 0)
      return i;
  return len;
}

char *
ps_hlo_proto_to_hlo_text (const char *text, gsize len, const char *filename, GError **error)
{
  Pp p = { .t = text, .len = len, .file = filename ? filename : "<proto>" };
  GString *out = g_string_new (NULL);
  const char *nul = memchr (text, 0, len);
  if (nul)
    p_error (&p, (gsize) (nul - text), "NUL byte in the text (a binary HloModuleProto? podsim reads the text format)");
  gsize from = 0;
  while (!P_FAILED (&p) && from < len)
    {
      gsize end = next_split (text, len, from);
      Pp q = p;
      q.len = end;
      q.pos = from;
      PNode top = { .key = (char *) "", .at = from };
      top.kids = g_ptr_array_new_with_free_func (pnode_free);
      p_body (&q, &top, 0, from);
      q.len = len; /* offsets to line:col over the whole text */
      if (!P_FAILED (&q))
        enum_numbers (&q, &top, NULL);
      if (!P_FAILED (&q) && top.kids->len > 0)
        module_text (&q, &top, out);
      g_ptr_array_unref (top.kids);
      p.err = q.err;
      from = end;
      if (from < len)
        while (from < len && text[from] != '\n')
          from++;
    }
  if (!P_FAILED (&p) && out->len == 0)
    p_error (&p, 0, "no HloModuleProto in the text");
  if (P_FAILED (&p))
    {
      g_propagate_error (error, p.err);
      g_string_free (out, TRUE);
      return NULL;
    }
  return g_string_free (out, FALSE);
}

gboolean
ps_hlo_proto_looks_like (const char *text, gsize len)
{
  Pp p = { .t = text, .len = len };
  p_skip_ws (&p);
  g_autofree char *w = p_ident (&p);
  if (!w)
    return FALSE;
  p_skip_ws (&p);
  if (P_CUR (&p) == ':')
    return !(p.pos + 1 < len && text[p.pos + 1] == ':');
  if (P_CUR (&p) != '{')
    return FALSE;
  p.pos++;
  p_skip_ws (&p);
  g_autofree char *w2 = p_ident (&p);
  p_skip_ws (&p);
  return w2 && P_CUR (&p) == ':';
}

PsModule *
ps_hlo_proto_parse (const char *text, gsize len, const char *filename, const char *module, GError **error)
{
  const char *file = filename ? filename : "<proto>";
  g_autofree char *hlo = ps_hlo_proto_to_hlo_text (text, len, file, error);
  if (!hlo)
    return NULL;
  GError *e = NULL;
  PsModule *m = ps_hlo_parse_module (hlo, strlen (hlo), "<made>", module, &e);
  if (!m)
    {
      if (e->code == PS_ERROR_OPTION)
        {
          /* --module NAME not found: it names the file, not the made text */
          const char *rest = g_str_has_prefix (e->message, "<made>: ") ? e->message + 8 : e->message;
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: %s", file, rest);
          g_error_free (e);
          return NULL;
        }
      ps_hlo_made_error_to_source (error, e, hlo, text, len, file);
      return NULL;
    }
  g_free (m->source_name);
  m->source_name = g_strdup (file);
  return m;
}
