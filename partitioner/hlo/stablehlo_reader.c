/* StableHLO (MLIR) text to HLO text to the IR: see stablehlo.h. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/stablehlo.h"

typedef struct {
  const char *t;
  gsize len, pos;
  const char *file;
  GError *err;
  GString *callees;          /* the non-entry computations, each after its callees */
  GString *entry;            /* the entry computation */
  GPtrArray *body;           /* the function being read: one HLO line each (char*) */
  GHashTable *line_of;       /* SSA name (HLO) -> 1 + its index in body */
  GHashTable *shapes;        /* SSA name (HLO) -> HLO shape text, per function */
  int64_t num_partitions;
  char *module_name;
  int n_reducers;
  GPtrArray *funcs;          /* the private functions read (Func*), in file order */
  GPtrArray *calls;          /* the callees of the function being read (char*) */
  GHashTable *meshes;        /* sdy.mesh name -> Mesh* */
} Sh;

/* A Shardy mesh: named axes, major to minor, over devices 0..n-1 in order. */
typedef struct {
  GPtrArray *axes;           /* char* */
  GArray *sizes;             /* int64_t */
} Mesh;

static void
mesh_free (gpointer p)
{
  Mesh *m = p;
  g_ptr_array_unref (m->axes);
  g_array_unref (m->sizes);
  g_free (m);
}

/* A non-entry function's HLO text and what it calls: HLO wants a
 * computation before its callers, MLIR takes them in any order. */
typedef struct {
  char *name, *text;
  GPtrArray *calls;
  int state;                 /* 0 not placed, 1 being placed, 2 placed */
  gsize at;
} Func;

static void
func_free (gpointer p)
{
  Func *f = p;
  g_free (f->name);
  g_free (f->text);
  g_ptr_array_unref (f->calls);
  g_free (f);
}

#define FAILED(s) ((s)->err != NULL)
#define CUR(s) ((s)->pos < (s)->len ? (s)->t[(s)->pos] : '\0')

static void G_GNUC_PRINTF (3, 4)
sh_error (Sh *s, gsize off, const char *fmt, ...)
{
  if (s->err)
    return;
  int line = 1, col = 1;
  for (gsize i = 0; i < off && i < s->len; i++)
    {
      if (s->t[i] == '\n')
        line++, col = 1;
      else
        col++;
    }
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  ps_set_error_at (&s->err, PS_ERROR_PARSE, s->file, line, col, "%s", msg);
}

/* Blanks, // comments, #alias lines and loc(...) locations. */
static void
skip_ws (Sh *s)
{
  for (;;)
    {
      while (s->pos < s->len && g_ascii_isspace (s->t[s->pos]))
        s->pos++;
      const char *p = s->t + s->pos;
      gsize left = s->len - s->pos;
      if (left >= 2 && p[0] == '/' && p[1] == '/')
        {
          while (s->pos < s->len && s->t[s->pos] != '\n')
            s->pos++;
          continue;
        }
      if (left >= 4 && memcmp (p, "loc(", 4) == 0)
        {
          int depth = 0;
          for (; s->pos < s->len; s->pos++)
            {
              if (s->t[s->pos] == '"')
                {
                  for (s->pos++; s->pos < s->len && s->t[s->pos] != '"'; s->pos++)
                    if (s->t[s->pos] == '\\')
                      s->pos++;
                }
              else if (s->t[s->pos] == '(')
                depth++;
              else if (s->t[s->pos] == ')' && --depth == 0)
                {
                  s->pos++;
                  break;
                }
            }
          /* an unclosed string or location ends at the end of the text */
          if (s->pos > s->len)
            s->pos = s->len;
          continue;
        }
      return;
    }
}

static gboolean
accept (Sh *s, const char *tok)
{
  skip_ws (s);
  gsize n = strlen (tok);
  if (s->pos + n <= s->len && memcmp (s->t + s->pos, tok, n) == 0)
    {
      s->pos += n;
      return TRUE;
    }
  return FALSE;
}

static char *
describe (Sh *s)
{
  skip_ws (s);
  if (s->pos >= s->len)
    return g_strdup ("the end of the text");
  gsize e = s->pos;
  while (e < s->len && e - s->pos < 24 && !g_ascii_isspace (s->t[e]))
    e++;
  return g_strdup_printf ("'%.*s'", (int) (e - s->pos), s->t + s->pos);
}

static gboolean
expect (Sh *s, const char *tok, const char *why)
{
  if (FAILED (s))
    return FALSE;
  if (accept (s, tok))
    return TRUE;
  g_autofree char *found = describe (s);
  sh_error (s, s->pos, "expected '%s' %s, found %s", tok, why, found);
  return FALSE;
}

static gboolean
ident_char (char c)
{
  return g_ascii_isalnum (c) || c == '_' || c == '.' || c == '$' || c == '-';
}

/* A bare word (op names, keywords). transfer full; NULL at none. */
static char *
word (Sh *s)
{
  skip_ws (s);
  gsize b = s->pos;
  while (s->pos < s->len && ident_char (s->t[s->pos]))
    s->pos++;
  return s->pos > b ? g_strndup (s->t + b, s->pos - b) : NULL;
}

/* %name as an HLO name: %0 -> v0, %cst_1 -> cst_1, %arg0 -> arg0. */
static char *
ssa (Sh *s, const char *what)
{
  skip_ws (s);
  gsize at = s->pos;
  if (CUR (s) != '%')
    {
      g_autofree char *found = describe (s);
      sh_error (s, at, "expected %s (%%name), found %s", what, found);
      return NULL;
    }
  s->pos++;
  gsize b = s->pos;
  while (s->pos < s->len && (g_ascii_isalnum (s->t[s->pos]) || s->t[s->pos] == '_'))
    s->pos++;
  if (s->pos == b)
    {
      sh_error (s, at, "expected a name after '%%'");
      return NULL;
    }
  /* %0#1, the second result of %0: the get-tuple-element v0.1 */
  gsize e = s->pos;
  if (CUR (s) == '#' && s->pos + 1 < s->len && g_ascii_isdigit (s->t[s->pos + 1]))
    for (s->pos++; s->pos < s->len && g_ascii_isdigit (s->t[s->pos]); s->pos++)
      ;
  char *n = g_strndup (s->t + b, e - b);
  if (s->pos > e)
    {
      char *w = g_strdup_printf ("%s.%.*s", n, (int) (s->pos - e - 1), s->t + e + 1);
      g_free (n);
      n = w;
    }
  if (g_ascii_isdigit (n[0]))
    {
      char *v = g_strconcat ("v", n, NULL);
      g_free (n);
      return v;
    }
  return n;
}

static const char *
etype_of (const char *m)
{
  static const char *const map[][2] = {
    { "f32", "f32" }, { "f16", "f16" }, { "bf16", "bf16" }, { "f64", "f64" }, { "i1", "pred" },
    { "i8", "s8" }, { "i16", "s16" }, { "i32", "s32" }, { "i64", "s64" }, { "ui8", "u8" },
    { "ui16", "u16" }, { "ui32", "u32" }, { "ui64", "u64" }, { "i4", "s4" }, { "ui4", "u4" },
    { "f8E4M3FN", "f8e4m3fn" }, { "f8E5M2", "f8e5m2" }, { "complex<f32>", "c64" },
    { "complex<f64>", "c128" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (map); i++)
    if (strcmp (m, map[i][0]) == 0)
      return map[i][1];
  return NULL;
}

/* tensor<8x16xf32> -> "f32[8,16]". transfer full. */
static char *
tensor_type (Sh *s)
{
  skip_ws (s);
  gsize at = s->pos;
  if (!accept (s, "tensor<"))
    {
      g_autofree char *found = describe (s);
      sh_error (s, at, "expected a tensor<...> type, found %s", found);
      return NULL;
    }
  gsize b = s->pos;
  int depth = 1;
  while (s->pos < s->len && depth > 0 && s->t[s->pos] != '\n')
    {
      if (s->t[s->pos] == '<')
        depth++;
      else if (s->t[s->pos] == '>')
        depth--;
      s->pos++;
    }
  if (depth > 0)
    {
      sh_error (s, at, "tensor type is not closed with '>'");
      return NULL;
    }
  g_autofree char *inner = g_strndup (s->t + b, s->pos - 1 - b);
  if (strchr (inner, ','))
    {
      sh_error (s, at, "tensor types with an encoding are not read");
      return NULL;
    }
  GString *dims = g_string_new (NULL);
  const char *e = inner;
  for (;;)
    {
      const char *x = e;
      while (*x && (g_ascii_isdigit (*x) || *x == '?'))
        x++;
      if (x == e || *x != 'x')
        break;
      if (memchr (e, '?', (gsize) (x - e)))
        {
          g_string_free (dims, TRUE);
          sh_error (s, at, "dynamic dimension '?': podsim needs every dimension's size");
          return NULL;
        }
      g_string_append_printf (dims, "%s%.*s", dims->len ? "," : "", (int) (x - e), e);
      e = x + 1;
    }
  const char *et = etype_of (e);
  if (!et)
    {
      g_string_free (dims, TRUE);
      sh_error (s, at, "element type '%.*s' is not read", (int) MIN (strlen (e), 40), e);
      return NULL;
    }
  char *r = g_strdup_printf ("%s[%s]", et, dims->str);
  g_string_free (dims, TRUE);
  return r;
}

/* ": T" or ": (T, ...) -> T" (or "-> (T, ...)"): the result type. */
static char *
result_type (Sh *s)
{
  if (!expect (s, ":", "before the types"))
    return NULL;
  skip_ws (s);
  if (CUR (s) != '(')
    {
      /* select writes ": tensor<i1>, tensor<f32>": the last is the result's */
      char *t = tensor_type (s);
      while (t && accept (s, ","))
        {
          g_free (t);
          t = tensor_type (s);
        }
      /* chlo's unary ops write ": T1 -> T2" */
      if (t && accept (s, "->"))
        {
          g_free (t);
          t = tensor_type (s);
        }
      return t;
    }
  s->pos++;
  if (!accept (s, ")"))
    {
      do
        {
          g_autofree char *t = tensor_type (s);
          if (!t)
            return NULL;
        }
      while (accept (s, ","));
      if (!expect (s, ")", "to close the operand types"))
        return NULL;
    }
  if (!expect (s, "->", "before the result type"))
    return NULL;
  return tensor_type (s);
}

/* [1, 0] -> "1,0" (into out). */
static gboolean
int_list (Sh *s, GString *out)
{
  if (!expect (s, "[", "to open a list"))
    return FALSE;
  if (accept (s, "]"))
    return TRUE;
  do
    {
      skip_ws (s);
      gsize b = s->pos;
      if (CUR (s) == '-')
        s->pos++;
      while (s->pos < s->len && g_ascii_isdigit (s->t[s->pos]))
        s->pos++;
      if (s->pos == b)
        {
          g_autofree char *found = describe (s);
          sh_error (s, b, "expected a number, found %s", found);
          return FALSE;
        }
      g_string_append_printf (out, "%s%.*s", out->len && out->str[out->len - 1] != '{' ? "," : "",
                              (int) (s->pos - b), s->t + b);
    }
  while (accept (s, ","));
  return expect (s, "]", "to close a list");
}

/* A quoted string's contents. transfer full. */
static char *
string_lit (Sh *s)
{
  if (!expect (s, "\"", "to open a string"))
    return NULL;
  GString *g = g_string_new (NULL);
  gsize at = s->pos - 1;
  /* MLIR strings end on their line: a runaway one is an error there, not
   * the rest of the file inside a message */
  while (s->pos < s->len && s->t[s->pos] != '"')
    {
      if (s->t[s->pos] == '\\' && s->pos + 1 < s->len)
        s->pos++;
      if (s->t[s->pos] == '\n')
        {
          g_string_free (g, TRUE);
          sh_error (s, at, "string is not closed on its line");
          return NULL;
        }
      g_string_append_c (g, s->t[s->pos++]);
    }
  if (!expect (s, "\"", "to close a string"))
    {
      g_string_free (g, TRUE);
      return NULL;
    }
  return g_string_free (g, FALSE);
}

static char *number (Sh *s);

/* sdy.mesh @name = <["x"=2, "y"=4]> (older texts leave out the brackets). */
static gboolean
sdy_mesh (Sh *s)
{
  skip_ws (s);
  gsize at = s->pos;
  g_autofree char *name = NULL;
  if (!expect (s, "@", "before the mesh name") || !(name = word (s)) || !expect (s, "=", "after the mesh name")
      || !expect (s, "<", "to open the mesh"))
    return FALSE;
  gboolean br = accept (s, "[");
  Mesh *m = g_new0 (Mesh, 1);
  m->axes = g_ptr_array_new_with_free_func (g_free);
  m->sizes = g_array_new (FALSE, FALSE, sizeof (int64_t));
  skip_ws (s);
  if (CUR (s) == '"')
    do
      {
        char *ax = string_lit (s);
        if (!ax)
          break;
        g_ptr_array_add (m->axes, ax);
        g_autofree char *n = expect (s, "=", "after the axis name") ? number (s) : NULL;
        if (!n)
          break;
        int64_t v = g_ascii_strtoll (n, NULL, 10);
        if (v < 1 || v > 65536)
          {
            sh_error (s, at, "mesh axis \"%s\" has size %s (1 to 65536)", ax, n);
            break;
          }
        g_array_append_val (m->sizes, v);
      }
    while (accept (s, ","));
  if (!FAILED (s) && br)
    expect (s, "]", "to close the mesh axes");
  if (!FAILED (s) && accept (s, ","))
    sh_error (s, s->pos, "meshes with device_ids are not read yet (devices in order are)");
  if (!FAILED (s))
    expect (s, ">", "to close the mesh");
  if (FAILED (s))
    {
      mesh_free (m);
      return FALSE;
    }
  g_hash_table_replace (s->meshes, g_steal_pointer (&name), m);
  return TRUE;
}

/* "@mesh, [{"x"}, {}], replicated={"y"}" (the inside of #sdy.sharding<...>)
 * as the HLO sharding of the same meaning: each dimension tiled over its
 * axes (major first), the axes no dimension uses replicated; the devices are
 * the mesh's, so the tile assignment is the mesh transposed to the axes'
 * order of use. transfer full. */
static char *
sdy_body (Sh *s)
{
  skip_ws (s);
  gsize at = s->pos;
  g_autofree char *mname = NULL;
  if (!accept (s, "@"))
    {
      sh_error (s, at, "inline meshes in sdy.sharding are not read yet (a named sdy.mesh is)");
      return NULL;
    }
  if (!(mname = word (s)))
    return NULL;
  Mesh *m = g_hash_table_lookup (s->meshes, mname);
  if (!m)
    {
      sh_error (s, at, "unknown mesh @%s (declare it with sdy.mesh before its use)", mname);
      return NULL;
    }
  guint na = m->axes->len;
  g_autofree int *used = g_new0 (int, na + 1);
  g_autoptr (GArray) order = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GArray) tiles = g_array_new (FALSE, FALSE, sizeof (int64_t));
  if (!expect (s, ",", "after the mesh") || !expect (s, "[", "to open the dimension shardings"))
    return NULL;
  if (!accept (s, "]"))
    {
      do
        {
          int64_t t = 1;
          if (!expect (s, "{", "to open a dimension's axes"))
            return NULL;
          skip_ws (s);
          while (!FAILED (s) && CUR (s) != '}')
            {
              skip_ws (s);
              gsize aat = s->pos;
              if (accept (s, "?"))
                ;
              else
                {
                  g_autofree char *ax = string_lit (s);
                  if (!ax)
                    return NULL;
                  if (CUR (s) == ':')
                    {
                      sh_error (s, aat, "sub-axes (\"%s\":(k)n) are not read yet", ax);
                      return NULL;
                    }
                  guint k = 0;
                  while (k < na && strcmp (g_ptr_array_index (m->axes, k), ax) != 0)
                    k++;
                  if (k == na || used[k])
                    {
                      sh_error (s, aat, k == na ? "mesh @%s has no axis \"%s\"" : "mesh @%s's axis \"%s\" is used twice",
                                mname, ax);
                      return NULL;
                    }
                  used[k] = 1;
                  int ki = (int) k;
                  g_array_append_val (order, ki);
                  t *= g_array_index (m->sizes, int64_t, k);
                }
              if (!accept (s, ","))
                break;
            }
          if (!expect (s, "}", "to close a dimension's axes"))
            return NULL;
          /* a priority, {"x"}p1, does not change the sharding */
          if (CUR (s) == 'p' && s->pos + 1 < s->len && g_ascii_isdigit (s->t[s->pos + 1]))
            for (s->pos++; s->pos < s->len && g_ascii_isdigit (s->t[s->pos]); s->pos++)
              ;
          g_array_append_val (tiles, t);
        }
      while (accept (s, ","));
      if (!expect (s, "]", "to close the dimension shardings"))
        return NULL;
    }
  /* replicated={...} says what is already so; unreduced is another meaning */
  gsize save = s->pos;
  if (accept (s, ","))
    {
      skip_ws (s);
      gsize kat = s->pos;
      g_autofree char *key = word (s);
      if (key && strcmp (key, "replicated") == 0 && expect (s, "=", "after replicated"))
        {
          int depth = 0;
          while (s->pos < s->len && !(s->t[s->pos] == '}' && depth == 1))
            {
              if (s->t[s->pos] == '{')
                depth++;
              s->pos++;
            }
          expect (s, "}", "to close replicated={...}");
        }
      else if (!FAILED (s))
        {
          sh_error (s, kat, "sdy.sharding's '%s' is not read yet", key ? key : "?");
          return NULL;
        }
    }
  else
    s->pos = save;
  if (FAILED (s))
    return NULL;
  int64_t rep = 1, total = 1;
  for (guint k = 0; k < na; k++)
    {
      total *= g_array_index (m->sizes, int64_t, k);
      if (!used[k])
        {
          rep *= g_array_index (m->sizes, int64_t, k);
          int ki = (int) k;
          g_array_append_val (order, ki);
        }
    }
  if (rep == total)
    return g_strdup ("{replicated}");
  GString *g = g_string_new ("{devices=[");
  for (guint d = 0; d < tiles->len; d++)
    g_string_append_printf (g, "%s%" G_GINT64_FORMAT, d ? "," : "", g_array_index (tiles, int64_t, d));
  if (rep > 1)
    g_string_append_printf (g, ",%" G_GINT64_FORMAT, rep);
  g_string_append (g, "]<=[");
  for (guint k = 0; k < na; k++)
    g_string_append_printf (g, "%s%" G_GINT64_FORMAT, k ? "," : "", g_array_index (m->sizes, int64_t, k));
  g_string_append_c (g, ']');
  gboolean identity = TRUE;
  for (guint k = 0; k < na; k++)
    identity = identity && g_array_index (order, int, k) == (int) k;
  if (!identity)
    {
      g_string_append (g, "T(");
      for (guint k = 0; k < na; k++)
        g_string_append_printf (g, "%s%d", k ? "," : "", g_array_index (order, int, k));
      g_string_append_c (g, ')');
    }
  g_string_append (g, rep > 1 ? " last_tile_dim_replicate}" : "}");
  return g_string_free (g, FALSE);
}

/* The value of an sdy.sharding attribute: #sdy.sharding<BODY> or, on an
 * operation's results, #sdy.sharding_per_value<[<BODY>]> (one result). */
static char *
sdy_attr (Sh *s)
{
  skip_ws (s);
  gsize at = s->pos;
  char *r = NULL;
  if (accept (s, "#sdy.sharding_per_value<"))
    {
      if (!expect (s, "[", "to open the per-value shardings") || !expect (s, "<", "to open a sharding")
          || !(r = sdy_body (s)))
        return NULL;
      if (!expect (s, ">", "to close the sharding") || (accept (s, ",") && (sh_error (s, at, "shardings of several "
                                                                                       "results are not read yet"), TRUE))
          || !expect (s, "]", "to close the per-value shardings") || !expect (s, ">", "to close the attribute"))
        {
          g_free (r);
          return NULL;
        }
      return r;
    }
  if (!expect (s, "#sdy.sharding<", "(the Shardy sharding)") || !(r = sdy_body (s)))
    return NULL;
  if (!expect (s, ">", "to close #sdy.sharding<...>"))
    {
      g_free (r);
      return NULL;
    }
  return r;
}

/* {key = value, ...}: the mhlo.sharding or sdy.sharding value (transfer
 * full, or NULL); other entries are skipped. */
static gboolean
attr_dict (Sh *s, char **sharding)
{
  *sharding = NULL;
  if (!accept (s, "{"))
    return TRUE;
  if (accept (s, "}"))
    return TRUE;
  do
    {
      skip_ws (s);
      gsize kat = s->pos;
      g_autofree char *key = word (s);
      if (!key)
        {
          g_autofree char *found = describe (s);
          sh_error (s, kat, "expected an attribute name, found %s", found);
          return FALSE;
        }
      if (!expect (s, "=", "after the attribute name"))
        return FALSE;
      skip_ws (s);
      if (strcmp (key, "sdy.sharding") == 0)
        {
          g_free (*sharding);
          if (!(*sharding = sdy_attr (s)))
            return FALSE;
          continue;
        }
      if (strcmp (key, "mhlo.sharding") == 0)
        {
          g_free (*sharding);
          if (!(*sharding = string_lit (s)))
            return FALSE;
          continue;
        }
      /* skip one value: a string, or text up to ',' or '}' at depth 0 */
      int depth = 0;
      while (s->pos < s->len)
        {
          char c = s->t[s->pos];
          if (c == '"')
            {
              g_autofree char *ignored = string_lit (s);
              if (!ignored)
                return FALSE;
              continue;
            }
          if ((c == ',' || c == '}') && depth == 0)
            break;
          if (c == '{' || c == '[' || c == '(' || c == '<')
            depth++;
          else if (c == '}' || c == ']' || c == ')' || c == '>')
            depth--;
          s->pos++;
        }
    }
  while (accept (s, ","));
  return expect (s, "}", "to close the attributes");
}

/* One HLO instruction line, with the StableHLO offset in a comment so an
 * error the HLO reader finds maps back to the StableHLO text. */
static void
emit (Sh *s, gsize at, const char *name, const char *shape, const char *rest, const char *sharding)
{
  g_ptr_array_add (s->body, g_strdup_printf ("%s = %s %s%s%s /*@%" G_GSIZE_FORMAT "*/", name, shape, rest,
                                             sharding ? ", sharding=" : "", sharding ? sharding : "", at));
  g_hash_table_replace (s->shapes, g_strdup (name), g_strdup (shape));
  g_hash_table_replace (s->line_of, g_strdup (name), GUINT_TO_POINTER (s->body->len));
}

static const char *
elementwise_name (const char *op)
{
  static const char *const map[][2] = {
    { "add", "add" }, { "subtract", "subtract" }, { "multiply", "multiply" }, { "divide", "divide" },
    { "maximum", "maximum" }, { "minimum", "minimum" }, { "power", "power" }, { "remainder", "remainder" },
    { "and", "and" }, { "or", "or" }, { "xor", "xor" }, { "atan2", "atan2" }, { "abs", "abs" },
    { "negate", "negate" }, { "exponential", "exponential" }, { "log", "log" }, { "tanh", "tanh" },
    { "sqrt", "sqrt" }, { "rsqrt", "rsqrt" }, { "logistic", "logistic" }, { "sine", "sine" },
    { "cosine", "cosine" }, { "floor", "floor" }, { "ceil", "ceil" }, { "sign", "sign" },
    { "not", "not" }, { "log_plus_one", "log-plus-one" }, { "exponential_minus_one", "exponential-minus-one" },
    { "cbrt", "cbrt" }, { "tan", "tan" }, { "round_nearest_even", "round-nearest-even" },
    { "round_nearest_afz", "round-nearest-afz" }, { "is_finite", "is-finite" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (map); i++)
    if (strcmp (op, map[i][0]) == 0)
      return map[i][1];
  return NULL;
}

/* Operands %a, %b, ... (at least one) into "a, b". */
static gboolean
operands (Sh *s, GString *out, int *n)
{
  *n = 0;
  do
    {
      g_autofree char *o = ssa (s, "an operand");
      if (!o)
        return FALSE;
      if (!g_hash_table_contains (s->shapes, o))
        {
          sh_error (s, s->pos, "undefined value %%%s", o[0] == 'v' && g_ascii_isdigit (o[1]) ? o + 1 : o);
          return FALSE;
        }
      g_string_append_printf (out, "%s%s", *n ? ", " : "", o);
      (*n)++;
      /* a ',' before something other than an operand belongs to what follows */
      gsize save = s->pos;
      if (!accept (s, ","))
        break;
      skip_ws (s);
      if (CUR (s) != '%')
        {
          s->pos = save;
          break;
        }
    }
  while (TRUE);
  return TRUE;
}

/* dense<...>: a scalar (a splat) or nested [...] lists, as HLO's constant
 * text. Booleans and hex floats are refused. */
static char *
dense_value (Sh *s)
{
  if (!expect (s, "dense<", "after stablehlo.constant"))
    return NULL;
  GString *g = g_string_new (NULL);
  while (s->pos < s->len && s->t[s->pos] != '>')
    {
      char c = s->t[s->pos++];
      if (c == '[')
        g_string_append_c (g, '{');
      else if (c == ']')
        g_string_append_c (g, '}');
      else if (c == '"')
        {
          g_string_free (g, TRUE);
          sh_error (s, s->pos - 1, "hexadecimal or string constants are not read");
          return NULL;
        }
      else if (!g_ascii_isspace (c))
        g_string_append_c (g, c);
    }
  if (!expect (s, ">", "to close dense<...>"))
    {
      g_string_free (g, TRUE);
      return NULL;
    }
  return g_string_free (g, FALSE);
}

/* ", key = [..]" into out as "a,b" (the list's numbers). */
static gboolean
keyed_list (Sh *s, const char *key, GString *out)
{
  return expect (s, ",", key) && expect (s, key, "(KEY = [...])") && expect (s, "=", key) && int_list (s, out);
}

/* One number (dim = 0). transfer full; NULL after an error. */
static char *
number (Sh *s)
{
  skip_ws (s);
  gsize b = s->pos;
  while (s->pos < s->len && g_ascii_isdigit (s->t[s->pos]))
    s->pos++;
  if (s->pos == b)
    {
      g_autofree char *found = describe (s);
      sh_error (s, b, "expected a number, found %s", found);
      return NULL;
    }
  return g_strndup (s->t + b, s->pos - b);
}

/* Keeps a computation that is not the entry; text is taken (transfer full),
 * calls too (NULL: none). */
static void
add_func (Sh *s, const char *name, char *text, GPtrArray *calls, gsize at)
{
  Func *f = g_new0 (Func, 1);
  f->name = g_strdup (name);
  f->text = text;
  f->calls = calls ? calls : g_ptr_array_new_with_free_func (g_free);
  f->at = at;
  g_ptr_array_add (s->funcs, f);
}

/* MLIR prints a float that decimal would not round-trip (inf, nan, -inf as
 * JAX's max-reduction init) as its bits, 0xFF800000: rewritten as the
 * decimal or inf/nan HLO's constant text takes, by the element type. */
static char *
hex_floats (Sh *s, gsize at, const char *v, const char *shape)
{
  int bits = g_str_has_prefix (shape, "f32[") ? 32 : g_str_has_prefix (shape, "f64[") ? 64
             : g_str_has_prefix (shape, "bf16[") ? 16 : 0;
  GString *g = g_string_new (NULL);
  for (const char *p = v; *p;)
    {
      if (!(p[0] == '0' && (p[1] == 'x' || p[1] == 'X')))
        {
          g_string_append_c (g, *p++);
          continue;
        }
      const char *b = p + 2, *e = b;
      while (g_ascii_isxdigit (*e))
        e++;
      if (bits == 0 || e - b != bits / 4)
        {
          sh_error (s, at, "hexadecimal constant %.*s is not read for %.*s", (int) MIN (e - p, 20), p,
                    (int) (strchr (shape, '[') - shape), shape);
          g_string_free (g, TRUE);
          return NULL;
        }
      guint64 u = g_ascii_strtoull (b, NULL, 16);
      double d;
      if (bits == 64)
        memcpy (&d, &u, sizeof d);
      else
        {
          guint32 w = bits == 32 ? (guint32) u : (guint32) u << 16;
          float f;
          memcpy (&f, &w, sizeof f);
          d = f;
        }
      if (isnan (d))
        g_string_append (g, "nan");
      else if (isinf (d))
        g_string_append (g, d < 0 ? "-inf" : "inf");
      else
        {
          char buf[G_ASCII_DTOSTR_BUF_SIZE];
          g_string_append (g, g_ascii_formatd (buf, sizeof buf, bits == 64 ? "%.17g" : "%.9g", d));
        }
      p = e;
    }
  return g_string_free (g, FALSE);
}

/* A one-op reducer region (applies stablehlo.OP) as an HLO computation. */
static char *
reducer (Sh *s, const char *op, const char *scalar)
{
  char *name = g_strdup_printf ("reducer_%s_%d", op, s->n_reducers++);
  add_func (s, name,
            g_strdup_printf ("%s {\n  x = %s parameter(0)\n  y = %s parameter(1)\n  ROOT r = %s %s(x, y)\n}\n\n",
                             name, scalar, scalar, scalar, op),
            NULL, 0);
  return name;
}

/* Whether the reduce at the cursor is followed by "across" (the region
 * form) rather than "applies": looked at without moving. */
static gboolean
reduce_is_pretty_region (Sh *s)
{
  gsize save = s->pos;
  int depth = 0;
  while (s->pos < s->len)
    {
      char c = s->t[s->pos++];
      if (c == '(')
        depth++;
      else if (c == ')' && --depth <= 0)
        {
          /* (%x init: %c), (%y init: %d): a reduce of several operands */
          gsize after = s->pos;
          if (accept (s, ",") && accept (s, "("))
            {
              depth = 1;
              continue;
            }
          s->pos = after;
          break;
        }
      else if (c == '\n')
        break;
    }
  gboolean across = accept (s, "across");
  s->pos = save;
  return across;
}

static gboolean operation (Sh *s, char **returned, char **returned_shape);

/* A region as an HLO computation `name`, added to callees: the pretty form
 * "(%a: T, %b: T) { ... stablehlo.return %r : T }" (after "reducer") or the
 * generic "{ ^bb0(%a: T, %b: T): ... }". Its values are its own (the
 * enclosing function's tables are put aside meanwhile); several results
 * are refused where they stand. */
static gboolean
region (Sh *s, const char *name, gboolean generic, GPtrArray *targs, GPtrArray *ttypes, const char *tshape,
        int pairs)
{
  GPtrArray *obody = s->body;
  GHashTable *oshapes = s->shapes, *oline = s->line_of;
  s->body = g_ptr_array_new_with_free_func (g_free);
  s->shapes = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  s->line_of = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  skip_ws (s);
  gsize at = s->pos;
  if (generic && expect (s, "{", "to open the region") && expect (s, "^", "before the block name"))
    {
      g_autofree char *bb = word (s);
      if (!bb)
        sh_error (s, s->pos, "expected a block name after '^'");
    }
  if (targs)
    {
      /* a while's cond/body: one tuple parameter, its elements by the
       * names the loop gives them */
      emit (s, at, "state", tshape, "parameter(0)", NULL);
      for (guint i = 0; i < targs->len; i++)
        {
          g_autofree char *r = g_strdup_printf ("get-tuple-element(state), index=%u", i);
          emit (s, at, g_ptr_array_index (targs, i), g_ptr_array_index (ttypes, i), r, NULL);
        }
      expect (s, "{", "to open the region");
    }
  else if (pairs > 1)
    {
      /* reducer(%acc0: T, %x0: T) (%acc1: U, %x1: U): HLO's reducer takes
       * the accumulators first, then the values */
      for (int i = 0; i < pairs && !FAILED (s); i++)
        {
          if (!expect (s, "(", "to open a pair of reducer arguments"))
            break;
          for (int j = 0; j < 2 && !FAILED (s); j++)
            {
              skip_ws (s);
              gsize aat = s->pos;
              g_autofree char *arg = (j == 0 || expect (s, ",", "between the pair")) ? ssa (s, "a region argument") : NULL;
              g_autofree char *t = NULL;
              if (!arg || !expect (s, ":", "after the argument name") || !(t = tensor_type (s)))
                break;
              g_autofree char *rest = g_strdup_printf ("parameter(%d)", j * pairs + i);
              emit (s, aat, arg, t, rest, NULL);
            }
          if (!FAILED (s))
            expect (s, ")", "to close a pair of reducer arguments");
        }
    }
  else if (expect (s, "(", "to open the region's arguments") && !accept (s, ")"))
    {
      int k = 0;
      do
        {
          skip_ws (s);
          gsize aat = s->pos;
          g_autofree char *arg = ssa (s, "a region argument");
          g_autofree char *t = NULL;
          if (!arg || !expect (s, ":", "after the argument name") || !(t = tensor_type (s)))
            break;
          g_autofree char *rest = g_strdup_printf ("parameter(%d)", k++);
          emit (s, aat, arg, t, rest, NULL);
        }
      while (accept (s, ","));
      expect (s, ")", "to close the region's arguments");
    }
  if (!FAILED (s) && !targs)
    expect (s, generic ? ":" : "{", generic ? "after the block's arguments" : "to open the region");
  char *ret = NULL, *ret_shape = NULL;
  while (!FAILED (s) && !ret)
    {
      skip_ws (s);
      if (CUR (s) == '}' || CUR (s) == '\0')
        {
          sh_error (s, at, "region has no stablehlo.return");
          break;
        }
      operation (s, &ret, &ret_shape);
    }
  if (!FAILED (s))
    expect (s, "}", "to close the region");
  if (!FAILED (s))
    {
      guint li = GPOINTER_TO_UINT (g_hash_table_lookup (s->line_of, ret));
      char **line = (char **) &g_ptr_array_index (s->body, li - 1);
      char *rl = g_strconcat ("ROOT ", *line, NULL);
      g_free (*line);
      *line = rl;
      GString *g = g_string_new (NULL);
      g_string_append_printf (g, "%s {\n", name);
      for (guint i = 0; i < s->body->len; i++)
        g_string_append_printf (g, "  %s\n", (const char *) g_ptr_array_index (s->body, i));
      g_string_append (g, "}\n\n");
      add_func (s, name, g_string_free (g, FALSE), NULL, at);
    }
  g_free (ret);
  g_free (ret_shape);
  g_ptr_array_free (s->body, TRUE);
  g_hash_table_destroy (s->shapes);
  g_hash_table_destroy (s->line_of);
  s->body = obody;
  s->shapes = oshapes;
  s->line_of = oline;
  return !FAILED (s);
}

/* {dimensions = array<i64: 0, 1>} or the older dense<[0, 1]> : tensor<2xi64>
 * into out as "0,1". */
static gboolean
dims_attr (Sh *s, GString *out)
{
  if (!expect (s, "{", "to open the attributes") || !expect (s, "dimensions", "(the reduced dimensions)")
      || !expect (s, "=", "after dimensions"))
    return FALSE;
  if (accept (s, "array<i64"))
    {
      if (accept (s, ":"))
        do
          {
            g_autofree char *d = number (s);
            if (!d)
              return FALSE;
            g_string_append_printf (out, "%s%s", out->len ? "," : "", d);
          }
        while (accept (s, ","));
      if (!expect (s, ">", "to close array<i64: ...>"))
        return FALSE;
    }
  else
    {
      g_autofree char *t = NULL;
      if (!expect (s, "dense<", "(array<i64: ...> or dense<[...]>)") || !int_list (s, out)
          || !expect (s, ">", "to close dense<...>") || !expect (s, ":", "before the type")
          || !(t = tensor_type (s)))
        return FALSE;
    }
  return expect (s, "}", "to close the attributes");
}

/* The reduce of one operand with a region: HLO's reduce with the region as
 * to_apply. */
static gboolean
reduce_with_region (Sh *s, const char *x, const char *c, const char *dims, gboolean generic, GString *rest)
{
  g_autofree char *red = g_strdup_printf ("region_%d", s->n_reducers++);
  if (!region (s, red, generic, NULL, NULL, NULL, 1))
    return FALSE;
  g_string_printf (rest, "reduce(%s, %s), dimensions={%s}, to_apply=%s", x, c, dims, red);
  return TRUE;
}

/* n tensor types "T1, T2, ..." as the HLO tuple shape "(t1, t2, ...)",
 * each also added to types. transfer full; NULL after an error. */
static char *
tuple_types (Sh *s, int n, GPtrArray *types)
{
  GString *tt = g_string_new ("(");
  for (int i = 0; i < n; i++)
    {
      char *t = (i == 0 || expect (s, ",", "between the types")) ? tensor_type (s) : NULL;
      if (!t)
        {
          g_string_free (tt, TRUE);
          return NULL;
        }
      g_string_append_printf (tt, "%s%s", i ? ", " : "", t);
      g_ptr_array_add (types, t);
    }
  g_string_append_c (tt, ')');
  return g_string_free (tt, FALSE);
}

/* %r:N = stablehlo.while(%iterArg = %init, ...) : T1, ... cond { ... } do { ... }:
 * HLO's while over the tuple of the loop state, its results the state's
 * elements (get-tuple-element r.k, which %r#k names). */
static gboolean
while_loop (Sh *s, gsize at, const char *name, int nres)
{
  g_autoptr (GPtrArray) args = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) types = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GString) inits = g_string_new (NULL);
  if (!expect (s, "(", "after stablehlo.while"))
    return FALSE;
  if (!accept (s, ")"))
    {
      do
        {
          char *a = ssa (s, "a loop variable");
          if (!a)
            return FALSE;
          g_ptr_array_add (args, a);
          g_autofree char *v = expect (s, "=", "after the loop variable") ? ssa (s, "its initial value") : NULL;
          if (!v)
            return FALSE;
          if (!g_hash_table_contains (s->shapes, v))
            {
              sh_error (s, s->pos, "undefined value %%%s", v);
              return FALSE;
            }
          g_string_append_printf (inits, "%s%s", inits->len ? ", " : "", v);
        }
      while (accept (s, ","));
      if (!expect (s, ")", "to close the loop variables"))
        return FALSE;
    }
  if ((int) args->len != nres)
    {
      sh_error (s, at, "stablehlo.while has %u loop variables but %d results", args->len, nres);
      return FALSE;
    }
  if (!expect (s, ":", "before the loop variables' types"))
    return FALSE;
  g_autofree char *tshape = tuple_types (s, (int) args->len, types);
  if (!tshape)
    return FALSE;
  g_autofree char *cond = g_strdup_printf ("region_%d", s->n_reducers++);
  g_autofree char *body = g_strdup_printf ("region_%d", s->n_reducers++);
  if (!expect (s, "cond", "(the condition region)") || !region (s, cond, FALSE, args, types, tshape, 1)
      || !expect (s, "do", "(the body region)") || !region (s, body, FALSE, args, types, tshape, 1))
    return FALSE;
  g_autofree char *init = g_strconcat (name, ".init", NULL);
  g_autofree char *tr = g_strdup_printf ("tuple(%s)", inits->str);
  emit (s, at, init, tshape, tr, NULL);
  g_autofree char *wr = g_strdup_printf ("while(%s), condition=%s, body=%s", init, cond, body);
  emit (s, at, name, tshape, wr, NULL);
  for (guint i = 0; i < types->len; i++)
    {
      g_autofree char *en = g_strdup_printf ("%s.%u", name, i);
      g_autofree char *r = g_strdup_printf ("get-tuple-element(%s), index=%u", name, i);
      emit (s, at, en, g_ptr_array_index (types, i), r, NULL);
    }
  return TRUE;
}

/* %r:N = stablehlo.reduce(%x init: %c), (%y init: %d) across dimensions = [..]
 * : (...) -> (T, U) reducer(%a: t, %b: t) (%p: u, %q: u) { ... }: HLO's
 * variadic reduce (argmax is one), a tuple whose elements r.k %r#k names.
 * The cursor is after the first group and its ','. */
static gboolean
reduce_several (Sh *s, gsize at, const char *name, int nres, const char *x0, const char *c0)
{
  g_autoptr (GPtrArray) xs = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) cs = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (xs, g_strdup (x0));
  g_ptr_array_add (cs, g_strdup (c0));
  do
    {
      char *x = NULL, *c = NULL;
      if (!expect (s, "(", "to open an operand") || !(x = ssa (s, "a reduced operand")))
        return FALSE;
      g_ptr_array_add (xs, x);
      if (!expect (s, "init", "(init: %value)") || !expect (s, ":", "after init") || !(c = ssa (s, "an initial value")))
        return FALSE;
      g_ptr_array_add (cs, c);
      if (!g_hash_table_contains (s->shapes, x) || !g_hash_table_contains (s->shapes, c))
        {
          sh_error (s, at, "undefined operand of stablehlo.reduce");
          return FALSE;
        }
      if (!expect (s, ")", "to close the operand"))
        return FALSE;
    }
  while (accept (s, ","));
  int n = (int) xs->len;
  if (n != nres)
    {
      sh_error (s, at, "stablehlo.reduce has %d operands but %d results", n, nres);
      return FALSE;
    }
  g_autoptr (GString) dims = g_string_new (NULL);
  if (!expect (s, "across", "after the operands") || !expect (s, "dimensions", "after across")
      || !expect (s, "=", "after dimensions") || !int_list (s, dims) || !expect (s, ":", "before the types")
      || !expect (s, "(", "to open the operand types"))
    return FALSE;
  do
    {
      g_autofree char *t = tensor_type (s);
      if (!t)
        return FALSE;
    }
  while (accept (s, ","));
  if (!expect (s, ")", "to close the operand types") || !expect (s, "->", "before the result types")
      || !expect (s, "(", "to open the result types"))
    return FALSE;
  g_autoptr (GPtrArray) types = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *tshape = tuple_types (s, n, types);
  if (!tshape)
    return FALSE;
  g_autofree char *red = g_strdup_printf ("region_%d", s->n_reducers++);
  if (!expect (s, ")", "to close the result types") || !expect (s, "reducer", "to open the reducer region")
      || !region (s, red, FALSE, NULL, NULL, NULL, n))
    return FALSE;
  GString *r = g_string_new ("reduce(");
  for (int i = 0; i < n; i++)
    g_string_append_printf (r, "%s%s", i ? ", " : "", (const char *) g_ptr_array_index (xs, i));
  for (int i = 0; i < n; i++)
    g_string_append_printf (r, ", %s", (const char *) g_ptr_array_index (cs, i));
  g_string_append_printf (r, "), dimensions={%s}, to_apply=%s", dims->str, red);
  emit (s, at, name, tshape, r->str, NULL);
  g_string_free (r, TRUE);
  for (int i = 0; i < n; i++)
    {
      g_autofree char *en = g_strdup_printf ("%s.%d", name, i);
      g_autofree char *gr = g_strdup_printf ("get-tuple-element(%s), index=%d", name, i);
      emit (s, at, en, g_ptr_array_index (types, i), gr, NULL);
    }
  return TRUE;
}

static gboolean
operation (Sh *s, char **returned, char **returned_shape)
{
  skip_ws (s);
  gsize at = s->pos;
  if (accept (s, "return") || accept (s, "func.return") || accept (s, "stablehlo.return"))
    {
      GString *ops = g_string_new (NULL);
      int n;
      gboolean ok = operands (s, ops, &n);
      if (ok && n > 1)
        {
          /* a while body returns the loop state: HLO's tuple */
          if (!expect (s, ":", "before the result types"))
            {
              g_string_free (ops, TRUE);
              return FALSE;
            }
          GString *tt = g_string_new ("(");
          for (int i = 0; i < n && ok; i++)
            {
              g_autofree char *t = (i == 0 || expect (s, ",", "between the result types")) ? tensor_type (s) : NULL;
              ok = t != NULL;
              if (ok)
                g_string_append_printf (tt, "%s%s", i ? ", " : "", t);
            }
          g_string_append_c (tt, ')');
          if (ok)
            {
              g_autofree char *r = g_strdup_printf ("tuple(%s)", ops->str);
              emit (s, at, "result", tt->str, r, NULL);
              *returned = g_strdup ("result");
              *returned_shape = g_string_free (tt, FALSE);
            }
          else
            g_string_free (tt, TRUE);
          g_string_free (ops, TRUE);
          return ok;
        }
      g_autofree char *t = ok ? (expect (s, ":", "before the result types") ? tensor_type (s) : NULL) : NULL;
      if (!t)
        {
          g_string_free (ops, TRUE);
          return FALSE;
        }
      *returned = g_string_free (ops, FALSE);
      *returned_shape = g_steal_pointer (&t);
      return TRUE;
    }
  if (accept (s, "\"stablehlo.return\""))
    {
      /* the generic form: "stablehlo.return"(%r) : (T) -> () */
      GString *ops = g_string_new (NULL);
      int n = 0;
      g_autofree char *t = NULL;
      gboolean ok = expect (s, "(", "to open the returned values") && operands (s, ops, &n)
                    && expect (s, ")", "to close the returned values");
      if (ok && n != 1)
        {
          sh_error (s, at, "regions returning %d values are not read yet (one result)", n);
          ok = FALSE;
        }
      ok = ok && expect (s, ":", "before the types") && expect (s, "(", "to open the types") && (t = tensor_type (s))
           && expect (s, ")", "to close the types") && expect (s, "->", "before the result types")
           && expect (s, "(", "(no results)") && expect (s, ")", "(no results)");
      if (!ok)
        {
          g_string_free (ops, TRUE);
          return FALSE;
        }
      *returned = g_string_free (ops, FALSE);
      *returned_shape = g_steal_pointer (&t);
      return TRUE;
    }
  g_autofree char *name = ssa (s, "a result name or return");
  int nres = 1;
  if (name && CUR (s) == ':' && s->pos + 1 < s->len && g_ascii_isdigit (s->t[s->pos + 1]))
    {
      s->pos++;
      g_autofree char *k = number (s);
      nres = k ? (int) MIN (g_ascii_strtoll (k, NULL, 10), 4096) : 0;
    }
  if (!name || !expect (s, "=", "after the result name"))
    return FALSE;
  skip_ws (s);
  gsize opat = s->pos;
  /* the text is not NUL-terminated: compare within its length */
  gsize left = s->len - s->pos;
  if (nres != 1 && !(left >= 15 && memcmp (s->t + s->pos, "stablehlo.while", 15) == 0)
      && !(left >= 17 && memcmp (s->t + s->pos, "stablehlo.reduce(", 17) == 0))
    {
      sh_error (s, at, "operations with several results are not read yet (stablehlo.while and reduce are)");
      return FALSE;
    }
  gboolean generic = CUR (s) == '"';
  g_autofree char *op = generic ? string_lit (s) : word (s);
  if (generic && op && strcmp (op, "stablehlo.reduce") != 0)
    {
      sh_error (s, opat, "the generic form of %s is not read (only its pretty form)", op);
      return FALSE;
    }
  if (!op)
    {
      g_autofree char *found = describe (s);
      sh_error (s, opat, "expected an operation, found %s", found);
      return FALSE;
    }
  const char *bare = g_str_has_prefix (op, "stablehlo.") ? op + 10 : g_str_has_prefix (op, "chlo.") ? op + 5 : op;
  g_autoptr (GString) ops = g_string_new (NULL);
  g_autoptr (GString) rest = g_string_new (NULL);
  int n = 0;
  g_autofree char *shape = NULL;
  g_autofree char *sharding = NULL;
  /* chlo ops JAX leaves in: those that are one HLO instruction read as it,
   * the others (decompositions into several) are refused by name below */
  const char *ew = g_str_has_prefix (op, "stablehlo.") ? elementwise_name (bare)
                   : strcmp (op, "chlo.erf") == 0 ? "erf" : strcmp (op, "chlo.tan") == 0 ? "tan" : NULL;
  if (ew)
    {
      /* an attribute dictionary may carry the result's sharding */
      if (!operands (s, ops, &n) || !attr_dict (s, &sharding) || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "%s(%s)", ew, ops->str);
    }
  else if (strcmp (op, "stablehlo.convert") == 0 || strcmp (op, "stablehlo.reshape") == 0)
    {
      if (!operands (s, ops, &n) || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "%s(%s)", bare, ops->str);
    }
  else if (strcmp (op, "stablehlo.transpose") == 0 || strcmp (op, "stablehlo.broadcast_in_dim") == 0)
    {
      GString *dims = g_string_new ("{");
      gboolean ok = operands (s, ops, &n) && expect (s, ",", "before dims") && expect (s, "dims", "(dims = [...])")
                    && expect (s, "=", "after dims") && int_list (s, dims);
      g_string_append_c (dims, '}');
      if (ok)
        shape = result_type (s);
      g_string_printf (rest, "%s(%s), dimensions=%s", bare[0] == 't' ? "transpose" : "broadcast",
                       ops->str, dims->str);
      g_string_free (dims, TRUE);
      if (!shape)
        return FALSE;
    }
  else if (strcmp (op, "stablehlo.dot_general") == 0)
    {
      if (!operands (s, ops, &n))
        return FALSE;
      g_string_printf (rest, "dot(%s)", ops->str);
      while (accept (s, ","))
        {
          skip_ws (s);
          gsize kat = s->pos;
          g_autofree char *key = word (s);
          if (!key || !expect (s, "=", "after the attribute name"))
            return FALSE;
          if (strcmp (key, "batching_dims") == 0 || strcmp (key, "contracting_dims") == 0)
            {
              GString *l = g_string_new ("{"), *r = g_string_new ("{");
              gboolean ok = int_list (s, l) && expect (s, "x", "between the lhs and rhs dims") && int_list (s, r);
              const char *k = key[0] == 'b' ? "batch" : "contracting";
              g_string_append_printf (rest, ", lhs_%s_dims=%s}, rhs_%s_dims=%s}", k, l->str, k, r->str);
              g_string_free (l, TRUE);
              g_string_free (r, TRUE);
              if (!ok)
                return FALSE;
            }
          else if (strcmp (key, "precision") == 0)
            {
              /* [DEFAULT, HIGHEST] */
              if (!expect (s, "[", "to open the precisions"))
                return FALSE;
              GString *pr = g_string_new (NULL);
              do
                {
                  g_autofree char *w = word (s);
                  if (!w)
                    break;
                  g_string_append_printf (pr, "%s%s", pr->len ? "," : "", w);
                }
              while (accept (s, ","));
              gboolean ok = expect (s, "]", "to close the precisions");
              if (strcmp (pr->str, "DEFAULT,DEFAULT") != 0)
                g_string_append_printf (rest, ", operand_precision={%s}", pr->str);
              g_string_free (pr, TRUE);
              if (!ok)
                return FALSE;
            }
          else
            {
              sh_error (s, kat, "dot_general attribute '%s' is not read", key);
              return FALSE;
            }
        }
      if (!(shape = result_type (s)))
        return FALSE;
    }
  else if (strcmp (op, "stablehlo.constant") == 0)
    {
      g_autofree char *v = dense_value (s);
      if (!v || !(shape = result_type (s)))
        return FALSE;
      g_autofree char *dec = hex_floats (s, at, v, shape);
      if (!dec)
        return FALSE;
      g_string_printf (rest, "constant(%s)", dec);
    }
  else if (strcmp (op, "stablehlo.iota") == 0)
    {
      skip_ws (s);
      g_autofree char *k = word (s);
      gsize dat = s->pos;
      if (!k || strcmp (k, "dim") != 0 || !expect (s, "=", "after dim"))
        {
          sh_error (s, dat, "expected 'dim = N' after stablehlo.iota");
          return FALSE;
        }
      g_autofree char *d = word (s);
      if (!d || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "iota(), iota_dimension=%s", d);
    }
  else if (strcmp (op, "stablehlo.compare") == 0)
    {
      g_autofree char *dir = word (s);
      if (!dir || !expect (s, ",", "after the direction") || !operands (s, ops, &n))
        return FALSE;
      /* the comparison type (FLOAT, SIGNED, ...) follows */
      g_autofree char *ty = NULL;
      if (accept (s, ","))
        ty = word (s);
      if (!(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "compare(%s), direction=%s", ops->str, dir);
      if (ty && strcmp (ty, "TOTALORDER") == 0)
        g_string_append (rest, ", type=TOTALORDER");
    }
  else if (strcmp (op, "stablehlo.select") == 0)
    {
      if (!operands (s, ops, &n) || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "select(%s)", ops->str);
    }
  else if (generic)
    {
      /* "stablehlo.reduce"(%x, %c) ({ ^bb0(...): ... }) {dimensions = ...} : T */
      g_autoptr (GString) dims = g_string_new (NULL);
      if (!expect (s, "(", "to open the operands") || !operands (s, ops, &n) || !expect (s, ")", "to close the operands"))
        return FALSE;
      if (n != 2)
        {
          sh_error (s, at, "reduce of %d operands (several results) is not read yet", n / 2);
          return FALSE;
        }
      g_auto (GStrv) xc = g_strsplit (ops->str, ", ", 2);
      if (!expect (s, "(", "to open the region") || !reduce_with_region (s, xc[0], xc[1], "", TRUE, rest)
          || !expect (s, ")", "to close the region") || !dims_attr (s, dims) || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "reduce(%s, %s), dimensions={%s}, to_apply=region_%d", xc[0], xc[1], dims->str,
                       s->n_reducers - 1);
    }
  else if (strcmp (op, "stablehlo.reduce") == 0 && reduce_is_pretty_region (s))
    {
      /* stablehlo.reduce(%x init: %c) across dimensions = [..] : T reducer(%a: T, %b: T) { ... } */
      g_autoptr (GString) dims = g_string_new (NULL);
      g_autofree char *x = NULL, *c = NULL;
      if (!expect (s, "(", "after stablehlo.reduce") || !(x = ssa (s, "the reduced operand"))
          || !expect (s, "init", "(init: %value)") || !expect (s, ":", "after init") || !(c = ssa (s, "the initial value")))
        return FALSE;
      if (!g_hash_table_contains (s->shapes, x) || !g_hash_table_contains (s->shapes, c))
        {
          sh_error (s, at, "undefined operand of stablehlo.reduce");
          return FALSE;
        }
      if (!expect (s, ")", "to close the operand"))
        return FALSE;
      if (accept (s, ","))
        return reduce_several (s, at, name, nres, x, c);
      if (nres != 1)
        {
          sh_error (s, at, "stablehlo.reduce has 1 operand but %d results", nres);
          return FALSE;
        }
      if (!expect (s, "across", "after the operands") || !expect (s, "dimensions", "after across")
          || !expect (s, "=", "after dimensions") || !int_list (s, dims) || !(shape = result_type (s))
          || !expect (s, "reducer", "to open the reducer region") || !reduce_with_region (s, x, c, dims->str, FALSE, rest))
        return FALSE;
    }
  else if (strcmp (op, "stablehlo.reduce") == 0)
    {
      /* stablehlo.reduce(%x init: %c) applies stablehlo.add across dimensions = [1] */
      if (!expect (s, "(", "after stablehlo.reduce"))
        return FALSE;
      g_autofree char *x = ssa (s, "the reduced operand");
      if (!x || !expect (s, "init", "(init: %value)") || !expect (s, ":", "after init"))
        return FALSE;
      g_autofree char *c = ssa (s, "the initial value");
      if (!c || !expect (s, ")", "to close the operands") || !expect (s, "applies", "(applies stablehlo.OP)"))
        {
          if (!FAILED (s))
            sh_error (s, s->pos, "reduce with a region body is not read yet (the applies form is)");
          return FALSE;
        }
      skip_ws (s);
      gsize rat = s->pos;
      g_autofree char *rop = word (s);
      const char *hop = rop && g_str_has_prefix (rop, "stablehlo.") ? elementwise_name (rop + 10) : NULL;
      if (!hop)
        {
          sh_error (s, rat, "reducer '%s' is not read", rop ? rop : "?");
          return FALSE;
        }
      GString *dims = g_string_new ("{");
      gboolean ok = expect (s, "across", "after the reducer") && expect (s, "dimensions", "after across")
                    && expect (s, "=", "after dimensions") && int_list (s, dims);
      g_string_append_c (dims, '}');
      if (ok)
        shape = result_type (s);
      const char *cs = g_hash_table_lookup (s->shapes, c);
      if (shape && !cs)
        sh_error (s, at, "undefined value %%%s", c);
      if (!shape || !cs)
        {
          g_string_free (dims, TRUE);
          return FALSE;
        }
      g_autofree char *scalar = g_strndup (cs, (gsize) (strchr (cs, '[') - cs));
      g_autofree char *sc = g_strconcat (scalar, "[]", NULL);
      g_autofree char *red = reducer (s, hop, sc);
      g_string_printf (rest, "reduce(%s, %s), dimensions=%s, to_apply=%s", x, c, dims->str, red);
      g_string_free (dims, TRUE);
    }
  else if (strcmp (op, "stablehlo.concatenate") == 0)
    {
      /* stablehlo.concatenate %a, %b, dim = 0 */
      g_autofree char *d = NULL;
      if (!operands (s, ops, &n) || !expect (s, ",", "before dim") || !expect (s, "dim", "(dim = N)")
          || !expect (s, "=", "after dim") || !(d = number (s)) || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "concatenate(%s), dimensions={%s}", ops->str, d);
    }
  else if (strcmp (op, "stablehlo.slice") == 0)
    {
      /* stablehlo.slice %a [1:3, 0:4:2]: HLO's slice={[1:3], [0:4:2]} */
      if (!operands (s, ops, &n) || !expect (s, "[", "to open the slice ranges"))
        return FALSE;
      GString *r = g_string_new (NULL);
      if (!accept (s, "]"))
        {
          do
            {
              g_autofree char *a = number (s);
              g_autofree char *b = a && expect (s, ":", "in a range") ? number (s) : NULL;
              g_autofree char *st = b && accept (s, ":") ? number (s) : NULL;
              if (!b || FAILED (s))
                break;
              g_string_append_printf (r, "%s[%s:%s%s%s]", r->len ? ", " : "", a, b, st ? ":" : "", st ? st : "");
            }
          while (accept (s, ","));
          expect (s, "]", "to close the slice ranges");
        }
      if (!FAILED (s))
        shape = result_type (s);
      g_string_printf (rest, "slice(%s), slice={%s}", ops->str, r->str);
      g_string_free (r, TRUE);
      if (!shape)
        return FALSE;
    }
  else if (strcmp (op, "stablehlo.pad") == 0)
    {
      /* low = [..], high = [..], interior = [..]: HLO's padding=l_h_ixl_h_i */
      g_autoptr (GString) lo = g_string_new (NULL);
      g_autoptr (GString) hi = g_string_new (NULL);
      g_autoptr (GString) in = g_string_new (NULL);
      if (!operands (s, ops, &n) || !keyed_list (s, "low", lo) || !keyed_list (s, "high", hi)
          || !keyed_list (s, "interior", in) || !(shape = result_type (s)))
        return FALSE;
      g_auto (GStrv) l = g_strsplit (lo->str, ",", -1), h = g_strsplit (hi->str, ",", -1),
                     i = g_strsplit (in->str, ",", -1);
      guint nd = g_strv_length (l);
      if (g_strv_length (h) != nd || g_strv_length (i) != nd)
        {
          sh_error (s, at, "pad's low, high and interior lists differ in length");
          return FALSE;
        }
      g_string_printf (rest, "pad(%s), padding=", ops->str);
      for (guint k = 0; k < nd; k++)
        g_string_append_printf (rest, "%s%s_%s_%s", k ? "x" : "", l[k], h[k], i[k]);
    }
  else if (strcmp (op, "stablehlo.dynamic_slice") == 0)
    {
      g_autoptr (GString) sz = g_string_new (NULL);
      if (!operands (s, ops, &n) || !keyed_list (s, "sizes", sz) || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "dynamic-slice(%s), dynamic_slice_sizes={%s}", ops->str, sz->str);
    }
  else if (strcmp (op, "stablehlo.dynamic_update_slice") == 0)
    {
      if (!operands (s, ops, &n) || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "dynamic-update-slice(%s)", ops->str);
    }
  else if (strcmp (op, "stablehlo.while") == 0)
    return while_loop (s, at, name, nres);
  else if (strcmp (op, "sdy.sharding_constraint") == 0)
    {
      /* Shardy's with_sharding_constraint: the custom-call GSPMD has for it */
      if (!operands (s, ops, &n) || !expect (s, "<", "to open the sharding") || !(sharding = sdy_body (s))
          || !expect (s, ">", "to close the sharding") || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "custom-call(%s), custom_call_target=\"Sharding\"", ops->str);
    }
  else if (strcmp (op, "stablehlo.custom_call") == 0)
    {
      skip_ws (s);
      gsize tat = s->pos;
      if (!accept (s, "@"))
        {
          sh_error (s, tat, "expected @target after stablehlo.custom_call");
          return FALSE;
        }
      g_autofree char *target = word (s);
      if (!target || !expect (s, "(", "after the target") || !operands (s, ops, &n)
          || !expect (s, ")", "to close the operands") || !attr_dict (s, &sharding)
          || !(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "custom-call(%s), custom_call_target=\"%s\"", ops->str, target);
    }
  else if (strcmp (op, "call") == 0 || strcmp (op, "func.call") == 0)
    {
      skip_ws (s);
      if (!expect (s, "@", "before the callee"))
        return FALSE;
      g_autofree char *callee = word (s);
      if (!callee || !expect (s, "(", "after the callee"))
        return FALSE;
      if (!accept (s, ")"))
        {
          if (!operands (s, ops, &n) || !expect (s, ")", "to close the arguments"))
            return FALSE;
        }
      if (!(shape = result_type (s)))
        return FALSE;
      g_string_printf (rest, "call(%s), to_apply=%s", ops->str, callee);
      if (s->calls)
        g_ptr_array_add (s->calls, g_strdup (callee));
    }
  else if (g_str_has_prefix (op, "chlo."))
    {
      sh_error (s, opat, "%s has no single HLO instruction and is not read; JAX's as_text(dialect=\"hlo\") "
                "writes it as the HLO it expands to", op);
      return FALSE;
    }
  else
    {
      sh_error (s, opat, "operation %s is not read yet (doc/hlo.md lists what the StableHLO reader takes)", op);
      return FALSE;
    }
  emit (s, at, name, shape, rest->str, sharding);
  return TRUE;
}

/* func.func [public|private] @name(%arg: T {attrs}, ...) -> (T {attrs}) { ... } */
static gboolean
function (Sh *s)
{
  skip_ws (s);
  gsize at = s->pos;
  (void) (accept (s, "public") || accept (s, "private"));
  if (!expect (s, "@", "before the function name"))
    return FALSE;
  g_autofree char *fname = word (s);
  if (!fname || !expect (s, "(", "to open the arguments"))
    return FALSE;
  g_hash_table_remove_all (s->shapes);
  g_hash_table_remove_all (s->line_of);
  s->body = g_ptr_array_new_with_free_func (g_free);
  s->calls = g_ptr_array_new_with_free_func (g_free);
  int k = 0;
  if (!accept (s, ")"))
    {
      do
        {
          skip_ws (s);
          gsize aat = s->pos;
          g_autofree char *arg = ssa (s, "an argument");
          g_autofree char *t = NULL, *sh = NULL;
          if (!arg || !expect (s, ":", "after the argument name") || !(t = tensor_type (s))
              || !attr_dict (s, &sh))
            break;
          g_autofree char *rest = g_strdup_printf ("parameter(%d)", k++);
          emit (s, aat, arg, t, rest, sh);
        }
      while (accept (s, ","));
      expect (s, ")", "to close the arguments");
    }
  /* results: -> T, -> (T {attrs}, ...) */
  g_autofree char *out_sharding = NULL;
  if (!FAILED (s) && accept (s, "->"))
    {
      gboolean paren = accept (s, "(");
      g_autofree char *t = tensor_type (s);
      if (t && paren)
        attr_dict (s, &out_sharding); /* unparenthesized, a '{' opens the body */
      if (t && paren && accept (s, ","))
        sh_error (s, s->pos, "functions returning several values are not read yet (one result)");
      if (t && paren && !FAILED (s))
        expect (s, ")", "to close the result types");
    }
  /* attributes {...} of the function itself */
  if (!FAILED (s) && accept (s, "attributes"))
    {
      g_autofree char *ignored = NULL;
      attr_dict (s, &ignored);
    }
  if (!FAILED (s))
    expect (s, "{", "to open the function body");
  char *ret = NULL, *ret_shape = NULL;
  while (!FAILED (s) && !ret)
    {
      skip_ws (s);
      if (CUR (s) == '}' || CUR (s) == '\0')
        {
          sh_error (s, at, "function @%s has no return", fname);
          break;
        }
      operation (s, &ret, &ret_shape);
    }
  if (!FAILED (s))
    expect (s, "}", "to close the function body");
  gboolean is_main = strcmp (fname, "main") == 0;
  if (!FAILED (s))
    {
      /* The returned value is the root; the result's sharding is its
       * sharding (XLA's HLO of the program puts it there), unless it has
       * another one: then a copy with the result's sharding is the root. */
      guint li = GPOINTER_TO_UINT (g_hash_table_lookup (s->line_of, ret));
      char **line = (char **) &g_ptr_array_index (s->body, li - 1);
      gboolean sharded = strstr (*line, ", sharding=") != NULL;
      if (out_sharding && sharded)
        {
          g_autofree char *r = g_strdup_printf ("copy(%s)", ret);
          g_autofree char *nm = g_strconcat (ret, ".result", NULL);
          emit (s, at, nm, ret_shape, r, out_sharding);
          line = (char **) &g_ptr_array_index (s->body, s->body->len - 1);
        }
      else if (out_sharding)
        {
          char *c = strstr (*line, " /*@");
          char *nl = g_strdup_printf ("%.*s, sharding=%s%s", (int) (c - *line), *line, out_sharding, c);
          g_free (*line);
          *line = nl;
        }
      char *rl = g_strconcat ("ROOT ", *line, NULL);
      g_free (*line);
      *line = rl;
      GString *dst = is_main ? s->entry : g_string_new (NULL);
      g_string_append_printf (dst, "%s%s {\n", is_main ? "ENTRY " : "", fname);
      for (guint i = 0; i < s->body->len; i++)
        g_string_append_printf (dst, "  %s\n", (const char *) g_ptr_array_index (s->body, i));
      g_string_append (dst, "}\n\n");
      if (!is_main)
        {
          add_func (s, fname, g_string_free (dst, FALSE), g_steal_pointer (&s->calls), at);
        }
    }
  g_clear_pointer (&s->calls, g_ptr_array_unref);
  g_free (ret);
  g_free (ret_shape);
  g_ptr_array_free (s->body, TRUE);
  s->body = NULL;
  return !FAILED (s);
}

/* Appends f after the functions it calls (depth first, in file order, so
 * the output is the same for the same text); a cycle is refused, as HLO
 * has no recursion. */
static void
place (Sh *s, Func *f, GString *out)
{
  if (f->state == 2 || FAILED (s))
    return;
  if (f->state == 1)
    {
      sh_error (s, f->at, "function @%s calls itself (directly or through others): HLO has no recursion", f->name);
      return;
    }
  f->state = 1;
  for (guint i = 0; i < f->calls->len; i++)
    for (guint j = 0; j < s->funcs->len; j++)
      {
        Func *g = g_ptr_array_index (s->funcs, j);
        if (strcmp (g->name, g_ptr_array_index (f->calls, i)) == 0)
          place (s, g, out);
      }
  f->state = 2;
  g_string_append (out, f->text);
}

gboolean
ps_stablehlo_looks_like (const char *text, gsize len)
{
  Sh s = { .t = text, .len = len };
  skip_ws (&s);
  return accept (&s, "module @") || accept (&s, "module attributes") || accept (&s, "module {")
         || accept (&s, "func.func");
}

char *
ps_stablehlo_to_hlo_text (const char *text, gsize len, const char *filename, GError **error)
{
  Sh s = { .t = text, .len = len, .file = filename ? filename : "<stablehlo>" };
  s.callees = g_string_new (NULL);
  s.entry = g_string_new (NULL);
  s.shapes = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  s.line_of = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  s.funcs = g_ptr_array_new_with_free_func (func_free);
  s.meshes = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, mesh_free);
  gboolean wrapped = accept (&s, "module");
  if (wrapped)
    {
      if (accept (&s, "@"))
        s.module_name = word (&s);
      if (accept (&s, "attributes"))
        {
          /* mhlo.num_partitions = 2 : i32 */
          if (expect (&s, "{", "to open the module attributes") && !accept (&s, "}"))
            do
              {
                g_autofree char *key = word (&s);
                if (!key || !expect (&s, "=", "after the attribute name"))
                  break;
                skip_ws (&s);
                gsize vb = s.pos;
                int depth = 0;
                while (s.pos < s.len && !((s.t[s.pos] == ',' || s.t[s.pos] == '}') && depth == 0))
                  {
                    char c = s.t[s.pos++];
                    if (c == '{' || c == '[' || c == '<' || c == '(')
                      depth++;
                    else if (c == '}' || c == ']' || c == '>' || c == ')')
                      depth--;
                  }
                if (strcmp (key, "mhlo.num_partitions") == 0)
                  s.num_partitions = g_ascii_strtoll (s.t + vb, NULL, 10);
              }
            while (!FAILED (&s) && accept (&s, ","));
          if (!FAILED (&s))
            expect (&s, "}", "to close the module attributes");
        }
      if (!FAILED (&s))
        expect (&s, "{", "to open the module");
    }
  int n_funcs = 0;
  while (!FAILED (&s))
    {
      skip_ws (&s);
      if (CUR (&s) == '\0' || (wrapped && CUR (&s) == '}'))
        break;
      if (CUR (&s) == '#')
        {
          while (s.pos < s.len && s.t[s.pos] != '\n')
            s.pos++;
          continue;
        }
      if (accept (&s, "sdy.mesh"))
        {
          sdy_mesh (&s);
          continue;
        }
      if (!expect (&s, "func.func", "(a function or sdy.mesh)"))
        break;
      if (function (&s))
        n_funcs++;
    }
  if (!FAILED (&s) && wrapped)
    expect (&s, "}", "to close the module");
  if (!FAILED (&s) && s.entry->len == 0)
    sh_error (&s, 0, "no function @main");
  for (guint i = 0; i < s.funcs->len; i++)
    place (&s, g_ptr_array_index (s.funcs, i), s.callees);
  char *out = NULL;
  if (!FAILED (&s))
    {
      GString *h = g_string_new (NULL);
      g_string_append_printf (h, "HloModule %s", s.module_name ? s.module_name : "stablehlo");
      if (s.num_partitions > 0)
        g_string_append_printf (h, ", num_partitions=%" G_GINT64_FORMAT, s.num_partitions);
      g_string_append_printf (h, "\n\n%s%s", s.callees->str, s.entry->str);
      out = g_string_free (h, FALSE);
    }
  else
    g_propagate_error (error, s.err);
  g_string_free (s.callees, TRUE);
  g_string_free (s.entry, TRUE);
  g_hash_table_destroy (s.shapes);
  g_hash_table_destroy (s.line_of);
  g_ptr_array_unref (s.funcs);
  g_hash_table_destroy (s.meshes);
  g_free (s.module_name);
  return out;
}

/* An error of the HLO reader at line L of the made text, back at the
 * StableHLO offset that line's comment names. */
static void
map_error (GError **error, GError *e, const char *hlo, const char *text, gsize len, const char *file)
{
  const char *msg = e->message;
  const char *p = strstr (msg, "<made>:");
  long line = p ? strtol (p + 7, NULL, 10) : 0;
  const char *colon = p ? strchr (p + 7, ':') : NULL;
  const char *what = colon ? strchr (colon + 1, ':') : NULL;
  what = what ? what + 2 : msg;
  const char *l = hlo;
  for (long i = 1; l && i < line; i++)
    {
      l = strchr (l, '\n');
      if (l)
        l++;
    }
  const char *at = l ? strstr (l, "/*@") : NULL;
  const char *eol = l ? strchr (l, '\n') : NULL;
  if (at && (!eol || at < eol))
    {
      gsize off = (gsize) g_ascii_strtoull (at + 3, NULL, 10);
      int ln = 1, col = 1;
      for (gsize i = 0; i < off && i < len; i++)
        {
          if (text[i] == '\n')
            ln++, col = 1;
          else
            col++;
        }
      ps_set_error_at (error, e->code, file, ln, col, "%s", what);
    }
  else
    ps_set_error_at (error, e->code, file, 0, 0, "%s", what);
  g_error_free (e);
}

PsModule *
ps_stablehlo_parse (const char *text, gsize len, const char *filename, GError **error)
{
  const char *file = filename ? filename : "<stablehlo>";
  g_autofree char *hlo = ps_stablehlo_to_hlo_text (text, len, file, error);
  if (!hlo)
    return NULL;
  GError *e = NULL;
  PsModule *m = ps_hlo_parse (hlo, strlen (hlo), "<made>", &e);
  if (!m)
    {
      map_error (error, e, hlo, text, len, file);
      return NULL;
    }
  g_free (m->source_name);
  m->source_name = g_strdup (file);
  return m;
}
