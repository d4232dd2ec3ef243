/* StableHLO (MLIR) text to HLO text to the IR: see stablehlo.h. This file
 * reads the module and its functions, places each computation after those
 * it calls, and hands the HLO text to the HLO reader; the operations are
 * stablehlo_ops.c's. */
#include "config.h"

#include <string.h>

#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/stablehlo.h"
#include "partitioner/hlo/stablehlo_private.h"

/* A non-entry function's HLO text and what it calls: HLO wants a
 * computation before its callers, MLIR takes them in any order. */
typedef struct {
  char *name, *text;
  GPtrArray *calls;
  int state;                 /* 0 not placed, 1 being placed, 2 placed */
  gsize at;
} Func;

static void
sl_func_free (gpointer p)
{
  Func *f = p;
  g_free (f->name);
  g_free (f->text);
  g_ptr_array_unref (f->calls);
  g_free (f);
}

/* Keeps a computation that is not the entry; text is taken (transfer full),
 * calls too (NULL: none). */
void
sl_add_func (Sl *s, const char *name, char *text, GPtrArray *calls, gsize at)
{
  Func *f = g_new0 (Func, 1);
  f->name = g_strdup (name);
  f->text = text;
  f->calls = calls ? calls : g_ptr_array_new_with_free_func (g_free);
  f->at = at;
  g_ptr_array_add (s->funcs, f);
}

/* func.func [public|private] @name(%arg: T {attrs}, ...) -> (T {attrs}) { ... } */
static gboolean
sl_function (Sl *s)
{
  sl_skip_ws (s);
  gsize at = s->pos;
  (void) (sl_accept (s, "public") || sl_accept (s, "private"));
  if (!sl_expect (s, "@", "before the function name"))
    return FALSE;
  g_autofree char *fname = sl_word (s);
  if (!fname || !sl_expect (s, "(", "to open the arguments"))
    return FALSE;
  g_hash_table_remove_all (s->shapes);
  g_hash_table_remove_all (s->line_of);
  s->body = g_ptr_array_new_with_free_func (g_free);
  s->calls = g_ptr_array_new_with_free_func (g_free);
  int k = 0;
  if (!sl_accept (s, ")"))
    {
      do
        {
          sl_skip_ws (s);
          gsize aat = s->pos;
          g_autofree char *arg = sl_ssa (s, "an argument");
          g_autofree char *t = NULL, *sh = NULL;
          if (!arg || !sl_expect (s, ":", "after the argument name") || !(t = sl_tensor_type (s))
              || !sl_attr_dict (s, &sh))
            break;
          g_autofree char *rest = g_strdup_printf ("parameter(%d)", k++);
          sl_emit (s, aat, arg, t, rest, sh);
        }
      while (sl_accept (s, ","));
      sl_expect (s, ")", "to close the arguments");
    }
  /* results: -> T, -> (T {attrs}, ...) */
  g_autofree char *out_sharding = NULL;
  int n_out = 1;
  if (!SL_FAILED (s) && sl_accept (s, "->"))
    {
      gboolean paren = sl_accept (s, "(");
      g_autofree char *t = sl_tensor_type (s);
      if (t && paren)
        sl_attr_dict (s, &out_sharding); /* unparenthesized, a '{' opens the body */
      if (t && paren && !SL_FAILED (s) && sl_accept (s, ","))
        {
          /* several results: HLO returns their tuple, whose sharding is a
           * tuple sharding with {replicated} for a result that has none, as
           * XLA's translation does (CreateTupleSharding in
           * xla/hlo/translate/mhlo_to_hlo/mlir_hlo_to_hlo.cc) */
          GPtrArray *outs = g_ptr_array_new_with_free_func (g_free);
          g_ptr_array_add (outs, g_steal_pointer (&out_sharding));
          gboolean any = outs->pdata[0] != NULL;
          do
            {
              g_autofree char *tk = sl_tensor_type (s);
              char *sk = NULL;
              if (!tk || !sl_attr_dict (s, &sk))
                break;
              any = any || sk != NULL;
              g_ptr_array_add (outs, sk);
            }
          while (sl_accept (s, ","));
          n_out = (int) outs->len;
          if (any && !SL_FAILED (s))
            {
              GString *g = g_string_new ("{");
              for (guint i = 0; i < outs->len; i++)
                g_string_append_printf (g, "%s%s", i ? ", " : "",
                                        outs->pdata[i] ? (const char *) outs->pdata[i] : "{replicated}");
              g_string_append_c (g, '}');
              out_sharding = g_string_free (g, FALSE);
            }
          g_ptr_array_unref (outs);
        }
      if (t && paren && !SL_FAILED (s))
        sl_expect (s, ")", "to close the result types");
    }
  /* attributes {...} of the function itself */
  if (!SL_FAILED (s) && sl_accept (s, "attributes"))
    {
      g_autofree char *ignored = NULL;
      sl_attr_dict (s, &ignored);
    }
  if (!SL_FAILED (s))
    sl_expect (s, "{", "to open the function body");
  char *ret = NULL, *ret_shape = NULL;
  while (!SL_FAILED (s) && !ret)
    {
      sl_skip_ws (s);
      if (SL_CUR (s) == '}' || SL_CUR (s) == '\0')
        {
          sl_error (s, at, "function @%s has no return", fname);
          break;
        }
      sl_operation (s, &ret, &ret_shape);
    }
  if (!SL_FAILED (s))
    sl_expect (s, "}", "to close the function body");
  gboolean is_main = strcmp (fname, "main") == 0;
  if (!SL_FAILED (s))
    {
      /* The returned value is the root; the result's sharding is its
       * sharding (XLA's HLO of the program puts it there), unless it has
       * another one: then a copy with the result's sharding is the root. */
      int n_ret = 1;
      if (ret_shape[0] == '(')
        {
          int depth = 0;
          for (const char *c = ret_shape; *c; c++)
            {
              depth += *c == '(' || *c == '[' ? 1 : *c == ')' || *c == ']' ? -1 : 0;
              n_ret += *c == ',' && depth == 1;
            }
        }
      if (n_ret != n_out)
        sl_error (s, at, "function @%s returns %d value%s but its type has %d results", fname, n_ret, n_ret == 1 ? "" : "s", n_out);
    }
  if (!SL_FAILED (s))
    {
      guint li = GPOINTER_TO_UINT (g_hash_table_lookup (s->line_of, ret));
      char **line = (char **) &g_ptr_array_index (s->body, li - 1);
      gboolean sharded = strstr (*line, ", sharding=") != NULL;
      if (out_sharding && sharded)
        {
          g_autofree char *r = g_strdup_printf ("copy(%s)", ret);
          g_autofree char *nm = g_strconcat (ret, ".result", NULL);
          sl_emit (s, at, nm, ret_shape, r, out_sharding);
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
          sl_add_func (s, fname, g_string_free (dst, FALSE), g_steal_pointer (&s->calls), at);
        }
    }
  g_clear_pointer (&s->calls, g_ptr_array_unref);
  g_free (ret);
  g_free (ret_shape);
  g_ptr_array_free (s->body, TRUE);
  s->body = NULL;
  return !SL_FAILED (s);
}

/* Appends f after the functions it calls (depth first, in file order, so
 * the output is the same for the same text); a cycle is refused, as HLO
 * has no recursion. */
static void
sl_place (Sl *s, Func *f, GString *out)
{
  if (f->state == 2 || SL_FAILED (s))
    return;
  if (f->state == 1)
    {
      sl_error (s, f->at, "function @%s calls itself (directly or through others): HLO has no recursion", f->name);
      return;
    }
  f->state = 1;
  for (guint i = 0; i < f->calls->len; i++)
    for (guint j = 0; j < s->funcs->len; j++)
      {
        Func *g = g_ptr_array_index (s->funcs, j);
        if (strcmp (g->name, g_ptr_array_index (f->calls, i)) == 0)
          sl_place (s, g, out);
      }
  f->state = 2;
  g_string_append (out, f->text);
}

gboolean
ps_stablehlo_looks_like (const char *text, gsize len)
{
  Sl s = { .t = text, .len = len };
  sl_skip_ws (&s);
  return sl_accept (&s, "module @") || sl_accept (&s, "module attributes") || sl_accept (&s, "module {")
         || sl_accept (&s, "func.func");
}

char *
ps_stablehlo_to_hlo_text (const char *text, gsize len, const char *filename, GError **error)
{
  Sl s = { .t = text, .len = len, .file = filename ? filename : "<stablehlo>" };
  s.callees = g_string_new (NULL);
  s.entry = g_string_new (NULL);
  s.shapes = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  s.line_of = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  s.funcs = g_ptr_array_new_with_free_func (sl_func_free);
  s.meshes = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, sl_mesh_free);
  gboolean wrapped = sl_accept (&s, "module");
  if (wrapped)
    {
      if (sl_accept (&s, "@"))
        s.module_name = sl_word (&s);
      if (sl_accept (&s, "attributes"))
        {
          /* mhlo.num_partitions = 2 : i32 */
          if (sl_expect (&s, "{", "to open the module attributes") && !sl_accept (&s, "}"))
            do
              {
                g_autofree char *key = sl_word (&s);
                if (!key || !sl_expect (&s, "=", "after the attribute name"))
                  break;
                sl_skip_ws (&s);
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
            while (!SL_FAILED (&s) && sl_accept (&s, ","));
          if (!SL_FAILED (&s))
            sl_expect (&s, "}", "to close the module attributes");
        }
      if (!SL_FAILED (&s))
        sl_expect (&s, "{", "to open the module");
    }
  int n_funcs = 0;
  while (!SL_FAILED (&s))
    {
      sl_skip_ws (&s);
      if (SL_CUR (&s) == '\0' || (wrapped && SL_CUR (&s) == '}'))
        break;
      if (SL_CUR (&s) == '#')
        {
          while (s.pos < s.len && s.t[s.pos] != '\n')
            s.pos++;
          continue;
        }
      if (sl_accept (&s, "sdy.mesh"))
        {
          sl_sdy_mesh (&s);
          continue;
        }
      if (!sl_expect (&s, "func.func", "(a function or sdy.mesh)"))
        break;
      if (sl_function (&s))
        n_funcs++;
    }
  if (!SL_FAILED (&s) && wrapped)
    sl_expect (&s, "}", "to close the module");
  if (!SL_FAILED (&s) && s.entry->len == 0)
    sl_error (&s, 0, "no function @main");
  for (guint i = 0; i < s.funcs->len; i++)
    sl_place (&s, g_ptr_array_index (s.funcs, i), s.callees);
  char *out = NULL;
  if (!SL_FAILED (&s))
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
      ps_hlo_made_error_to_source (error, e, hlo, text, len, file);
      return NULL;
    }
  g_free (m->source_name);
  m->source_name = g_strdup (file);
  return m;
}

