/* The StableHLO reader's regions (a reducer's or a loop's body) as HLO
 * computations, and the operations that hold them: reduce of one or
 * several operands, while. See stablehlo.h and stablehlo_private.h. */
#include "config.h"

#include <string.h>

#include "partitioner/hlo/stablehlo_private.h"

/* A one-op reducer region (applies stablehlo.OP) as an HLO computation. */
char *
sl_reducer (Sl *s, const char *op, const char *scalar)
{
  char *name = g_strdup_printf ("reducer_%s_%d", op, s->n_reducers++);
  sl_add_func (s, name,
            g_strdup_printf ("%s {\n  x = %s parameter(0)\n  y = %s parameter(1)\n  ROOT r = %s %s(x, y)\n}\n\n",
                             name, scalar, scalar, scalar, op),
            NULL, 0);
  return name;
}

/* Whether the reduce at the cursor is followed by "across" (the region
 * form) rather than "applies": looked at without moving. */
gboolean
sl_reduce_is_pretty_region (Sl *s)
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
          if (sl_accept (s, ",") && sl_accept (s, "("))
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
  gboolean across = sl_accept (s, "across");
  s->pos = save;
  return across;
}

/* A region as an HLO computation `name`, added to callees: the pretty form
 * "(%a: T, %b: T) { ... stablehlo.return %r : T }" (after "reducer") or the
 * generic "{ ^bb0(%a: T, %b: T): ... }". Its values are its own (the
 * enclosing function's tables are put aside meanwhile); several results
 * are refused where they stand. */
gboolean
sl_region (Sl *s, const char *name, gboolean generic, GPtrArray *targs, GPtrArray *ttypes, const char *tshape,
        int pairs)
{
  GPtrArray *obody = s->body;
  GHashTable *oshapes = s->shapes, *oline = s->line_of;
  s->body = g_ptr_array_new_with_free_func (g_free);
  s->shapes = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  s->line_of = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  sl_skip_ws (s);
  gsize at = s->pos;
  if (generic && sl_expect (s, "{", "to open the region") && sl_expect (s, "^", "before the block name"))
    {
      g_autofree char *bb = sl_word (s);
      if (!bb)
        sl_error (s, s->pos, "expected a block name after '^'");
    }
  if (targs)
    {
      /* a while's cond/body: one tuple parameter, its elements by the
       * names the loop gives them */
      sl_emit (s, at, "state", tshape, "parameter(0)", NULL);
      for (guint i = 0; i < targs->len; i++)
        {
          g_autofree char *r = g_strdup_printf ("get-tuple-element(state), index=%u", i);
          sl_emit (s, at, g_ptr_array_index (targs, i), g_ptr_array_index (ttypes, i), r, NULL);
        }
      sl_expect (s, "{", "to open the region");
    }
  else if (pairs > 1)
    {
      /* reducer(%acc0: T, %x0: T) (%acc1: U, %x1: U): HLO's reducer takes
       * the accumulators first, then the values */
      for (int i = 0; i < pairs && !SL_FAILED (s); i++)
        {
          if (!sl_expect (s, "(", "to open a pair of reducer arguments"))
            break;
          for (int j = 0; j < 2 && !SL_FAILED (s); j++)
            {
              sl_skip_ws (s);
              gsize aat = s->pos;
              g_autofree char *arg = (j == 0 || sl_expect (s, ",", "between the pair")) ? sl_ssa (s, "a region argument") : NULL;
              g_autofree char *t = NULL;
              if (!arg || !sl_expect (s, ":", "after the argument name") || !(t = sl_tensor_type (s)))
                break;
              g_autofree char *rest = g_strdup_printf ("parameter(%d)", j * pairs + i);
              sl_emit (s, aat, arg, t, rest, NULL);
            }
          if (!SL_FAILED (s))
            sl_expect (s, ")", "to close a pair of reducer arguments");
        }
    }
  else if (sl_expect (s, "(", "to open the region's arguments") && !sl_accept (s, ")"))
    {
      int k = 0;
      do
        {
          sl_skip_ws (s);
          gsize aat = s->pos;
          g_autofree char *arg = sl_ssa (s, "a region argument");
          g_autofree char *t = NULL;
          if (!arg || !sl_expect (s, ":", "after the argument name") || !(t = sl_tensor_type (s)))
            break;
          g_autofree char *rest = g_strdup_printf ("parameter(%d)", k++);
          sl_emit (s, aat, arg, t, rest, NULL);
        }
      while (sl_accept (s, ","));
      sl_expect (s, ")", "to close the region's arguments");
    }
  if (!SL_FAILED (s) && !targs)
    sl_expect (s, generic ? ":" : "{", generic ? "after the block's arguments" : "to open the region");
  char *ret = NULL, *ret_shape = NULL;
  while (!SL_FAILED (s) && !ret)
    {
      sl_skip_ws (s);
      if (SL_CUR (s) == '}' || SL_CUR (s) == '\0')
        {
          sl_error (s, at, "region has no stablehlo.return");
          break;
        }
      sl_operation (s, &ret, &ret_shape);
    }
  if (!SL_FAILED (s))
    sl_expect (s, "}", "to close the region");
  if (!SL_FAILED (s))
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
      sl_add_func (s, name, g_string_free (g, FALSE), NULL, at);
    }
  g_free (ret);
  g_free (ret_shape);
  g_ptr_array_free (s->body, TRUE);
  g_hash_table_destroy (s->shapes);
  g_hash_table_destroy (s->line_of);
  s->body = obody;
  s->shapes = oshapes;
  s->line_of = oline;
  return !SL_FAILED (s);
}

/* {dimensions = array<i64: 0, 1>} or the older dense<[0, 1]> : tensor<2xi64>
 * into out as "0,1". */
gboolean
sl_dims_attr (Sl *s, GString *out)
{
  if (!sl_expect (s, "{", "to open the attributes") || !sl_expect (s, "dimensions", "(the reduced dimensions)")
      || !sl_expect (s, "=", "after dimensions"))
    return FALSE;
  if (sl_accept (s, "array<i64"))
    {
      if (sl_accept (s, ":"))
        do
          {
            g_autofree char *d = sl_number (s);
            if (!d)
              return FALSE;
            g_string_append_printf (out, "%s%s", out->len ? "," : "", d);
          }
        while (sl_accept (s, ","));
      if (!sl_expect (s, ">", "to close array<i64: ...>"))
        return FALSE;
    }
  else
    {
      g_autofree char *t = NULL;
      if (!sl_expect (s, "dense<", "(array<i64: ...> or dense<[...]>)") || !sl_int_list (s, out)
          || !sl_expect (s, ">", "to close dense<...>") || !sl_expect (s, ":", "before the type")
          || !(t = sl_tensor_type (s)))
        return FALSE;
    }
  return sl_expect (s, "}", "to close the attributes");
}

/* The reduce of one operand with a region: HLO's reduce with the region as
 * to_apply. */
gboolean
sl_reduce_with_region (Sl *s, const char *x, const char *c, const char *dims, gboolean generic, GString *rest)
{
  g_autofree char *red = g_strdup_printf ("region_%d", s->n_reducers++);
  if (!sl_region (s, red, generic, NULL, NULL, NULL, 1))
    return FALSE;
  g_string_printf (rest, "reduce(%s, %s), dimensions={%s}, to_apply=%s", x, c, dims, red);
  return TRUE;
}

/* n tensor types "T1, T2, ..." as the HLO tuple shape "(t1, t2, ...)",
 * each also added to types. transfer full; NULL after an error. */
char *
sl_tuple_types (Sl *s, int n, GPtrArray *types)
{
  GString *tt = g_string_new ("(");
  for (int i = 0; i < n; i++)
    {
      char *t = (i == 0 || sl_expect (s, ",", "between the types")) ? sl_tensor_type (s) : NULL;
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
gboolean
sl_while_loop (Sl *s, gsize at, const char *name, int nres)
{
  g_autoptr (GPtrArray) args = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) types = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GString) inits = g_string_new (NULL);
  if (!sl_expect (s, "(", "after stablehlo.while"))
    return FALSE;
  if (!sl_accept (s, ")"))
    {
      do
        {
          char *a = sl_ssa (s, "a loop variable");
          if (!a)
            return FALSE;
          g_ptr_array_add (args, a);
          g_autofree char *v = sl_expect (s, "=", "after the loop variable") ? sl_ssa (s, "its initial value") : NULL;
          if (!v)
            return FALSE;
          if (!g_hash_table_contains (s->shapes, v))
            {
              sl_error (s, s->pos, "undefined value %%%s", v);
              return FALSE;
            }
          g_string_append_printf (inits, "%s%s", inits->len ? ", " : "", v);
        }
      while (sl_accept (s, ","));
      if (!sl_expect (s, ")", "to close the loop variables"))
        return FALSE;
    }
  if ((int) args->len != nres)
    {
      sl_error (s, at, "stablehlo.while has %u loop variables but %d results", args->len, nres);
      return FALSE;
    }
  if (!sl_expect (s, ":", "before the loop variables' types"))
    return FALSE;
  g_autofree char *tshape = sl_tuple_types (s, (int) args->len, types);
  if (!tshape)
    return FALSE;
  g_autofree char *cond = g_strdup_printf ("region_%d", s->n_reducers++);
  g_autofree char *body = g_strdup_printf ("region_%d", s->n_reducers++);
  if (!sl_expect (s, "cond", "(the condition region)") || !sl_region (s, cond, FALSE, args, types, tshape, 1)
      || !sl_expect (s, "do", "(the body region)") || !sl_region (s, body, FALSE, args, types, tshape, 1))
    return FALSE;
  g_autofree char *init = g_strconcat (name, ".init", NULL);
  g_autofree char *tr = g_strdup_printf ("tuple(%s)", inits->str);
  sl_emit (s, at, init, tshape, tr, NULL);
  g_autofree char *wr = g_strdup_printf ("while(%s), condition=%s, body=%s", init, cond, body);
  sl_emit (s, at, name, tshape, wr, NULL);
  for (guint i = 0; i < types->len; i++)
    {
      g_autofree char *en = g_strdup_printf ("%s.%u", name, i);
      g_autofree char *r = g_strdup_printf ("get-tuple-element(%s), index=%u", name, i);
      sl_emit (s, at, en, g_ptr_array_index (types, i), r, NULL);
    }
  return TRUE;
}

/* %r:N = stablehlo.reduce(%x init: %c), (%y init: %d) across dimensions = [..]
 * : (...) -> (T, U) reducer(%a: t, %b: t) (%p: u, %q: u) { ... }: HLO's
 * variadic reduce (argmax is one), a tuple whose elements r.k %r#k names.
 * The cursor is after the first group and its ','. */
gboolean
sl_reduce_several (Sl *s, gsize at, const char *name, int nres, const char *x0, const char *c0)
{
  g_autoptr (GPtrArray) xs = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) cs = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (xs, g_strdup (x0));
  g_ptr_array_add (cs, g_strdup (c0));
  do
    {
      char *x = NULL, *c = NULL;
      if (!sl_expect (s, "(", "to open an operand") || !(x = sl_ssa (s, "a reduced operand")))
        return FALSE;
      g_ptr_array_add (xs, x);
      if (!sl_expect (s, "init", "(init: %value)") || !sl_expect (s, ":", "after init") || !(c = sl_ssa (s, "an initial value")))
        return FALSE;
      g_ptr_array_add (cs, c);
      if (!g_hash_table_contains (s->shapes, x) || !g_hash_table_contains (s->shapes, c))
        {
          sl_error (s, at, "undefined operand of stablehlo.reduce");
          return FALSE;
        }
      if (!sl_expect (s, ")", "to close the operand"))
        return FALSE;
    }
  while (sl_accept (s, ","));
  int n = (int) xs->len;
  if (n != nres)
    {
      sl_error (s, at, "stablehlo.reduce has %d operands but %d results", n, nres);
      return FALSE;
    }
  g_autoptr (GString) dims = g_string_new (NULL);
  if (!sl_expect (s, "across", "after the operands") || !sl_expect (s, "dimensions", "after across")
      || !sl_expect (s, "=", "after dimensions") || !sl_int_list (s, dims) || !sl_expect (s, ":", "before the types")
      || !sl_expect (s, "(", "to open the operand types"))
    return FALSE;
  do
    {
      g_autofree char *t = sl_tensor_type (s);
      if (!t)
        return FALSE;
    }
  while (sl_accept (s, ","));
  if (!sl_expect (s, ")", "to close the operand types") || !sl_expect (s, "->", "before the result types")
      || !sl_expect (s, "(", "to open the result types"))
    return FALSE;
  g_autoptr (GPtrArray) types = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *tshape = sl_tuple_types (s, n, types);
  if (!tshape)
    return FALSE;
  g_autofree char *red = g_strdup_printf ("region_%d", s->n_reducers++);
  if (!sl_expect (s, ")", "to close the result types") || !sl_expect (s, "reducer", "to open the reducer region")
      || !sl_region (s, red, FALSE, NULL, NULL, NULL, n))
    return FALSE;
  GString *r = g_string_new ("reduce(");
  for (int i = 0; i < n; i++)
    g_string_append_printf (r, "%s%s", i ? ", " : "", (const char *) g_ptr_array_index (xs, i));
  for (int i = 0; i < n; i++)
    g_string_append_printf (r, ", %s", (const char *) g_ptr_array_index (cs, i));
  g_string_append_printf (r, "), dimensions={%s}, to_apply=%s", dims->str, red);
  sl_emit (s, at, name, tshape, r->str, NULL);
  g_string_free (r, TRUE);
  for (int i = 0; i < n; i++)
    {
      g_autofree char *en = g_strdup_printf ("%s.%d", name, i);
      g_autofree char *gr = g_strdup_printf ("get-tuple-element(%s), index=%d", name, i);
      sl_emit (s, at, en, g_ptr_array_index (types, i), gr, NULL);
    }
  return TRUE;
}
