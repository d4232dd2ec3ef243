/* The StableHLO reader's operation table: each operation as one HLO
 * instruction line (a few, as while, as several). See stablehlo.h and
 * stablehlo_private.h. */
#include "config.h"

#include <string.h>

#include "partitioner/hlo/stablehlo_private.h"

/* One HLO instruction line, with the StableHLO offset in a comment so an
 * error the HLO reader finds maps back to the StableHLO text. */
void
sl_emit (Sl *s, gsize at, const char *name, const char *shape, const char *rest, const char *sharding)
{
  g_ptr_array_add (s->body, g_strdup_printf ("%s = %s %s%s%s /*@%" G_GSIZE_FORMAT "*/", name, shape, rest,
                                             sharding ? ", sharding=" : "", sharding ? sharding : "", at));
  g_hash_table_replace (s->shapes, g_strdup (name), g_strdup (shape));
  g_hash_table_replace (s->line_of, g_strdup (name), GUINT_TO_POINTER (s->body->len));
}

static const char *
sl_elementwise_name (const char *op)
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
gboolean
sl_operands (Sl *s, GString *out, int *n)
{
  *n = 0;
  do
    {
      g_autofree char *o = sl_ssa (s, "an operand");
      if (!o)
        return FALSE;
      if (!g_hash_table_contains (s->shapes, o))
        {
          sl_error (s, s->pos, "undefined value %%%s", o[0] == 'v' && g_ascii_isdigit (o[1]) ? o + 1 : o);
          return FALSE;
        }
      g_string_append_printf (out, "%s%s", *n ? ", " : "", o);
      (*n)++;
      /* a ',' before something other than an operand belongs to what follows */
      gsize save = s->pos;
      if (!sl_accept (s, ","))
        break;
      sl_skip_ws (s);
      if (SL_CUR (s) != '%')
        {
          s->pos = save;
          break;
        }
    }
  while (TRUE);
  return TRUE;
}

gboolean
sl_operation (Sl *s, char **returned, char **returned_shape)
{
  sl_skip_ws (s);
  gsize at = s->pos;
  if (sl_accept (s, "return") || sl_accept (s, "func.return") || sl_accept (s, "stablehlo.return"))
    {
      GString *ops = g_string_new (NULL);
      int n;
      gboolean ok = sl_operands (s, ops, &n);
      if (ok && n > 1)
        {
          /* a while body returns the loop state: HLO's tuple */
          if (!sl_expect (s, ":", "before the result types"))
            {
              g_string_free (ops, TRUE);
              return FALSE;
            }
          GString *tt = g_string_new ("(");
          for (int i = 0; i < n && ok; i++)
            {
              g_autofree char *t = (i == 0 || sl_expect (s, ",", "between the result types")) ? sl_tensor_type (s) : NULL;
              ok = t != NULL;
              if (ok)
                g_string_append_printf (tt, "%s%s", i ? ", " : "", t);
            }
          g_string_append_c (tt, ')');
          if (ok)
            {
              g_autofree char *r = g_strdup_printf ("tuple(%s)", ops->str);
              sl_emit (s, at, "result", tt->str, r, NULL);
              *returned = g_strdup ("result");
              *returned_shape = g_string_free (tt, FALSE);
            }
          else
            g_string_free (tt, TRUE);
          g_string_free (ops, TRUE);
          return ok;
        }
      g_autofree char *t = ok ? (sl_expect (s, ":", "before the result types") ? sl_tensor_type (s) : NULL) : NULL;
      if (!t)
        {
          g_string_free (ops, TRUE);
          return FALSE;
        }
      *returned = g_string_free (ops, FALSE);
      *returned_shape = g_steal_pointer (&t);
      return TRUE;
    }
  if (sl_accept (s, "\"stablehlo.return\""))
    {
      /* the generic form: "stablehlo.return"(%r) : (T) -> () */
      GString *ops = g_string_new (NULL);
      int n = 0;
      g_autofree char *t = NULL;
      gboolean ok = sl_expect (s, "(", "to open the returned values") && sl_operands (s, ops, &n)
                    && sl_expect (s, ")", "to close the returned values");
      if (ok && n != 1)
        {
          sl_error (s, at, "regions returning %d values are not read yet (one result)", n);
          ok = FALSE;
        }
      ok = ok && sl_expect (s, ":", "before the types") && sl_expect (s, "(", "to open the types") && (t = sl_tensor_type (s))
           && sl_expect (s, ")", "to close the types") && sl_expect (s, "->", "before the result types")
           && sl_expect (s, "(", "(no results)") && sl_expect (s, ")", "(no results)");
      if (!ok)
        {
          g_string_free (ops, TRUE);
          return FALSE;
        }
      *returned = g_string_free (ops, FALSE);
      *returned_shape = g_steal_pointer (&t);
      return TRUE;
    }
  g_autofree char *name = sl_ssa (s, "a result name or return");
  int nres = 1;
  if (name && SL_CUR (s) == ':' && s->pos + 1 < s->len && g_ascii_isdigit (s->t[s->pos + 1]))
    {
      s->pos++;
      g_autofree char *k = sl_number (s);
      nres = k ? (int) MIN (g_ascii_strtoll (k, NULL, 10), 4096) : 0;
    }
  if (!name || !sl_expect (s, "=", "after the result name"))
    return FALSE;
  sl_skip_ws (s);
  gsize opat = s->pos;
  /* the text is not NUL-terminated: compare within its length */
  gsize left = s->len - s->pos;
  if (nres != 1 && !(left >= 15 && memcmp (s->t + s->pos, "stablehlo.while", 15) == 0)
      && !(left >= 19 && memcmp (s->t + s->pos, "\"stablehlo.scatter\"", 19) == 0)
      && !(left >= 16 && memcmp (s->t + s->pos, "\"stablehlo.sort\"", 16) == 0)
      && !(left >= 17 && memcmp (s->t + s->pos, "stablehlo.reduce(", 17) == 0)
      && !(left >= 6 && memcmp (s->t + s->pos, "call @", 6) == 0)
      && !(left >= 11 && memcmp (s->t + s->pos, "func.call @", 11) == 0))
    {
      sl_error (s, at, "operations with several results are not read yet (stablehlo.while, reduce, scatter, sort and call are)");
      return FALSE;
    }
  gboolean generic = SL_CUR (s) == '"';
  g_autofree char *op = generic ? sl_string_lit (s) : sl_word (s);
  if (generic && op && strcmp (op, "stablehlo.reduce") != 0 && strcmp (op, "stablehlo.gather") != 0
      && strcmp (op, "stablehlo.scatter") != 0 && strcmp (op, "stablehlo.convolution") != 0
      && strcmp (op, "stablehlo.sort") != 0)
    {
      sl_error (s, opat, "the generic form of %s is not read (only its pretty form)", op);
      return FALSE;
    }
  if (!op)
    {
      g_autofree char *found = sl_describe (s);
      sl_error (s, opat, "expected an operation, found %s", found);
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
  const char *ew = g_str_has_prefix (op, "stablehlo.") ? sl_elementwise_name (bare)
                   : strcmp (op, "chlo.erf") == 0 ? "erf" : strcmp (op, "chlo.tan") == 0 ? "tan" : NULL;
  if (ew)
    {
      /* an attribute dictionary may carry the result's sharding */
      if (!sl_operands (s, ops, &n) || !sl_attr_dict (s, &sharding) || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "%s(%s)", ew, ops->str);
    }
  else if (strcmp (op, "stablehlo.convert") == 0 || strcmp (op, "stablehlo.reshape") == 0)
    {
      if (!sl_operands (s, ops, &n) || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "%s(%s)", bare, ops->str);
    }
  else if (strcmp (op, "stablehlo.transpose") == 0 || strcmp (op, "stablehlo.broadcast_in_dim") == 0)
    {
      GString *dims = g_string_new ("{");
      gboolean ok = sl_operands (s, ops, &n) && sl_expect (s, ",", "before dims") && sl_expect (s, "dims", "(dims = [...])")
                    && sl_expect (s, "=", "after dims") && sl_int_list (s, dims);
      g_string_append_c (dims, '}');
      if (ok)
        shape = sl_result_type (s);
      g_string_printf (rest, "%s(%s), dimensions=%s", bare[0] == 't' ? "transpose" : "broadcast",
                       ops->str, dims->str);
      g_string_free (dims, TRUE);
      if (!shape)
        return FALSE;
    }
  else if (strcmp (op, "stablehlo.dot_general") == 0)
    {
      if (!sl_operands (s, ops, &n))
        return FALSE;
      g_string_printf (rest, "dot(%s)", ops->str);
      while (sl_accept (s, ","))
        {
          sl_skip_ws (s);
          gsize kat = s->pos;
          g_autofree char *key = sl_word (s);
          if (!key || !sl_expect (s, "=", "after the attribute name"))
            return FALSE;
          if (strcmp (key, "batching_dims") == 0 || strcmp (key, "contracting_dims") == 0)
            {
              GString *l = g_string_new ("{"), *r = g_string_new ("{");
              gboolean ok = sl_int_list (s, l) && sl_expect (s, "x", "between the lhs and rhs dims") && sl_int_list (s, r);
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
              if (!sl_expect (s, "[", "to open the precisions"))
                return FALSE;
              GString *pr = g_string_new (NULL);
              do
                {
                  g_autofree char *w = sl_word (s);
                  if (!w)
                    break;
                  g_string_append_printf (pr, "%s%s", pr->len ? "," : "", w);
                }
              while (sl_accept (s, ","));
              gboolean ok = sl_expect (s, "]", "to close the precisions");
              if (strcmp (pr->str, "DEFAULT,DEFAULT") != 0)
                g_string_append_printf (rest, ", operand_precision={%s}", pr->str);
              g_string_free (pr, TRUE);
              if (!ok)
                return FALSE;
            }
          else
            {
              sl_error (s, kat, "dot_general attribute '%s' is not read", key);
              return FALSE;
            }
        }
      if (!(shape = sl_result_type (s)))
        return FALSE;
    }
  else if (strcmp (op, "stablehlo.constant") == 0)
    {
      g_autofree char *v = sl_dense_value (s);
      if (!v || !(shape = sl_result_type (s)))
        return FALSE;
      g_autofree char *dec = sl_hex_floats (s, at, v, shape);
      if (!dec)
        return FALSE;
      g_string_printf (rest, "constant(%s)", dec);
    }
  else if (strcmp (op, "stablehlo.iota") == 0)
    {
      sl_skip_ws (s);
      g_autofree char *k = sl_word (s);
      gsize dat = s->pos;
      if (!k || strcmp (k, "dim") != 0 || !sl_expect (s, "=", "after dim"))
        {
          sl_error (s, dat, "expected 'dim = N' after stablehlo.iota");
          return FALSE;
        }
      g_autofree char *d = sl_word (s);
      if (!d || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "iota(), iota_dimension=%s", d);
    }
  else if (strcmp (op, "stablehlo.compare") == 0)
    {
      g_autofree char *dir = sl_word (s);
      if (!dir || !sl_expect (s, ",", "after the direction") || !sl_operands (s, ops, &n))
        return FALSE;
      /* the comparison type (FLOAT, SIGNED, ...) follows */
      g_autofree char *ty = NULL;
      if (sl_accept (s, ","))
        ty = sl_word (s);
      if (!(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "compare(%s), direction=%s", ops->str, dir);
      if (ty && strcmp (ty, "TOTALORDER") == 0)
        g_string_append (rest, ", type=TOTALORDER");
    }
  else if (strcmp (op, "stablehlo.select") == 0)
    {
      if (!sl_operands (s, ops, &n) || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "select(%s)", ops->str);
    }
  else if (strcmp (op, "stablehlo.convolution") == 0)
    {
      if (!sl_convolution (s, at, generic, rest, &shape, &sharding))
        return FALSE;
    }
  else if (strcmp (op, "stablehlo.gather") == 0 && generic)
    {
      if (!sl_gather (s, at, rest, &shape, &sharding))
        return FALSE;
    }
  else if ((strcmp (op, "stablehlo.scatter") == 0 || strcmp (op, "stablehlo.sort") == 0) && generic)
    {
      gboolean sort = strcmp (op, "stablehlo.sort") == 0;
      if (!(sort ? sl_sort : sl_scatter) (s, at, name, nres, rest, &shape, &sharding))
        return FALSE;
      if (!shape)
        return TRUE; /* several results: emitted */
    }
  else if (generic)
    {
      /* "stablehlo.reduce"(%x, %c) ({ ^bb0(...): ... }) {dimensions = ...} : T */
      g_autoptr (GString) dims = g_string_new (NULL);
      if (!sl_expect (s, "(", "to open the operands") || !sl_operands (s, ops, &n) || !sl_expect (s, ")", "to close the operands"))
        return FALSE;
      if (n != 2)
        {
          sl_error (s, at, "reduce of %d operands (several results) is not read yet", n / 2);
          return FALSE;
        }
      g_auto (GStrv) xc = g_strsplit (ops->str, ", ", 2);
      if (!sl_expect (s, "(", "to open the region") || !sl_reduce_with_region (s, xc[0], xc[1], "", TRUE, rest)
          || !sl_expect (s, ")", "to close the region") || !sl_dims_attr (s, dims) || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "reduce(%s, %s), dimensions={%s}, to_apply=region_%d", xc[0], xc[1], dims->str,
                       s->n_reducers - 1);
    }
  else if (strcmp (op, "stablehlo.reduce") == 0 && sl_reduce_is_pretty_region (s))
    {
      /* stablehlo.reduce(%x init: %c) across dimensions = [..] : T reducer(%a: T, %b: T) { ... } */
      g_autoptr (GString) dims = g_string_new (NULL);
      g_autofree char *x = NULL, *c = NULL;
      if (!sl_expect (s, "(", "after stablehlo.reduce") || !(x = sl_ssa (s, "the reduced operand"))
          || !sl_expect (s, "init", "(init: %value)") || !sl_expect (s, ":", "after init") || !(c = sl_ssa (s, "the initial value")))
        return FALSE;
      if (!g_hash_table_contains (s->shapes, x) || !g_hash_table_contains (s->shapes, c))
        {
          sl_error (s, at, "undefined operand of stablehlo.reduce");
          return FALSE;
        }
      if (!sl_expect (s, ")", "to close the operand"))
        return FALSE;
      if (sl_accept (s, ","))
        return sl_reduce_several (s, at, name, nres, x, c);
      if (nres != 1)
        {
          sl_error (s, at, "stablehlo.reduce has 1 operand but %d results", nres);
          return FALSE;
        }
      if (!sl_expect (s, "across", "after the operands") || !sl_expect (s, "dimensions", "after across")
          || !sl_expect (s, "=", "after dimensions") || !sl_int_list (s, dims) || !(shape = sl_result_type (s))
          || !sl_expect (s, "reducer", "to open the reducer region") || !sl_reduce_with_region (s, x, c, dims->str, FALSE, rest))
        return FALSE;
    }
  else if (strcmp (op, "stablehlo.reduce") == 0)
    {
      /* stablehlo.reduce(%x init: %c) applies stablehlo.add across dimensions = [1] */
      if (!sl_expect (s, "(", "after stablehlo.reduce"))
        return FALSE;
      g_autofree char *x = sl_ssa (s, "the reduced operand");
      if (!x || !sl_expect (s, "init", "(init: %value)") || !sl_expect (s, ":", "after init"))
        return FALSE;
      g_autofree char *c = sl_ssa (s, "the initial value");
      if (!c || !sl_expect (s, ")", "to close the operands") || !sl_expect (s, "applies", "(applies stablehlo.OP)"))
        {
          if (!SL_FAILED (s))
            sl_error (s, s->pos, "reduce with a region body is not read yet (the applies form is)");
          return FALSE;
        }
      sl_skip_ws (s);
      gsize rat = s->pos;
      g_autofree char *rop = sl_word (s);
      const char *hop = rop && g_str_has_prefix (rop, "stablehlo.") ? sl_elementwise_name (rop + 10) : NULL;
      if (!hop)
        {
          sl_error (s, rat, "reducer '%s' is not read", rop ? rop : "?");
          return FALSE;
        }
      GString *dims = g_string_new ("{");
      gboolean ok = sl_expect (s, "across", "after the reducer") && sl_expect (s, "dimensions", "after across")
                    && sl_expect (s, "=", "after dimensions") && sl_int_list (s, dims);
      g_string_append_c (dims, '}');
      if (ok)
        shape = sl_result_type (s);
      const char *cs = g_hash_table_lookup (s->shapes, c);
      if (shape && !cs)
        sl_error (s, at, "undefined value %%%s", c);
      if (!shape || !cs)
        {
          g_string_free (dims, TRUE);
          return FALSE;
        }
      g_autofree char *scalar = g_strndup (cs, (gsize) (strchr (cs, '[') - cs));
      g_autofree char *sc = g_strconcat (scalar, "[]", NULL);
      g_autofree char *red = sl_reducer (s, hop, sc);
      g_string_printf (rest, "reduce(%s, %s), dimensions=%s, to_apply=%s", x, c, dims->str, red);
      g_string_free (dims, TRUE);
    }
  else if (strcmp (op, "stablehlo.concatenate") == 0)
    {
      /* stablehlo.concatenate %a, %b, dim = 0 */
      g_autofree char *d = NULL;
      if (!sl_operands (s, ops, &n) || !sl_expect (s, ",", "before dim") || !sl_expect (s, "dim", "(dim = N)")
          || !sl_expect (s, "=", "after dim") || !(d = sl_number (s)) || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "concatenate(%s), dimensions={%s}", ops->str, d);
    }
  else if (strcmp (op, "stablehlo.get_dimension_size") == 0 || strcmp (op, "stablehlo.set_dimension_size") == 0)
    {
      /* stablehlo.get_dimension_size %a, dim = 0 and set_dimension_size
       * %a, %n, dim = 0: HLO's get-/set-dimension-size, dimensions={0} */
      g_autofree char *d = NULL;
      if (!sl_operands (s, ops, &n) || !sl_expect (s, ",", "before dim") || !sl_expect (s, "dim", "(dim = N)")
          || !sl_expect (s, "=", "after dim") || !(d = sl_number (s)) || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "%s-dimension-size(%s), dimensions={%s}", bare[0] == 'g' ? "get" : "set", ops->str, d);
    }
  else if (strcmp (op, "stablehlo.slice") == 0)
    {
      /* stablehlo.slice %a [1:3, 0:4:2]: HLO's slice={[1:3], [0:4:2]} */
      if (!sl_operands (s, ops, &n) || !sl_expect (s, "[", "to open the slice ranges"))
        return FALSE;
      GString *r = g_string_new (NULL);
      if (!sl_accept (s, "]"))
        {
          do
            {
              g_autofree char *a = sl_number (s);
              g_autofree char *b = a && sl_expect (s, ":", "in a range") ? sl_number (s) : NULL;
              g_autofree char *st = b && sl_accept (s, ":") ? sl_number (s) : NULL;
              if (!b || SL_FAILED (s))
                break;
              g_string_append_printf (r, "%s[%s:%s%s%s]", r->len ? ", " : "", a, b, st ? ":" : "", st ? st : "");
            }
          while (sl_accept (s, ","));
          sl_expect (s, "]", "to close the slice ranges");
        }
      if (!SL_FAILED (s))
        shape = sl_result_type (s);
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
      if (!sl_operands (s, ops, &n) || !sl_keyed_list (s, "low", lo) || !sl_keyed_list (s, "high", hi)
          || !sl_keyed_list (s, "interior", in) || !(shape = sl_result_type (s)))
        return FALSE;
      g_auto (GStrv) l = g_strsplit (lo->str, ",", -1), h = g_strsplit (hi->str, ",", -1),
                     i = g_strsplit (in->str, ",", -1);
      guint nd = g_strv_length (l);
      if (g_strv_length (h) != nd || g_strv_length (i) != nd)
        {
          sl_error (s, at, "pad's low, high and interior lists differ in length");
          return FALSE;
        }
      g_string_printf (rest, "pad(%s), padding=", ops->str);
      for (guint k = 0; k < nd; k++)
        g_string_append_printf (rest, "%s%s_%s_%s", k ? "x" : "", l[k], h[k], i[k]);
    }
  else if (strcmp (op, "stablehlo.dynamic_slice") == 0)
    {
      g_autoptr (GString) sz = g_string_new (NULL);
      if (!sl_operands (s, ops, &n) || !sl_keyed_list (s, "sizes", sz) || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "dynamic-slice(%s), dynamic_slice_sizes={%s}", ops->str, sz->str);
    }
  else if (strcmp (op, "stablehlo.dynamic_update_slice") == 0)
    {
      if (!sl_operands (s, ops, &n) || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "dynamic-update-slice(%s)", ops->str);
    }
  else if (strcmp (op, "stablehlo.while") == 0)
    return sl_while_loop (s, at, name, nres);
  else if (strcmp (op, "sdy.sharding_constraint") == 0)
    {
      /* Shardy's with_sharding_constraint: the custom-call GSPMD has for it */
      if (!sl_operands (s, ops, &n) || !sl_expect (s, "<", "to open the sharding") || !(sharding = sl_sdy_body (s))
          || !sl_expect (s, ">", "to close the sharding") || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "custom-call(%s), custom_call_target=\"Sharding\"", ops->str);
    }
  else if (strcmp (op, "stablehlo.custom_call") == 0)
    {
      sl_skip_ws (s);
      gsize tat = s->pos;
      if (!sl_accept (s, "@"))
        {
          sl_error (s, tat, "expected @target after stablehlo.custom_call");
          return FALSE;
        }
      g_autofree char *target = sl_word (s);
      if (!target || !sl_expect (s, "(", "after the target") || !sl_operands (s, ops, &n)
          || !sl_expect (s, ")", "to close the operands") || !sl_attr_dict (s, &sharding)
          || !(shape = sl_result_type (s)))
        return FALSE;
      g_string_printf (rest, "custom-call(%s), custom_call_target=\"%s\"", ops->str, target);
    }
  else if (strcmp (op, "call") == 0 || strcmp (op, "func.call") == 0)
    {
      sl_skip_ws (s);
      if (!sl_expect (s, "@", "before the callee"))
        return FALSE;
      g_autofree char *callee = sl_word (s);
      if (!callee || !sl_expect (s, "(", "after the callee"))
        return FALSE;
      if (!sl_accept (s, ")"))
        {
          if (!sl_operands (s, ops, &n) || !sl_expect (s, ")", "to close the arguments"))
            return FALSE;
        }
      if (s->calls)
        g_ptr_array_add (s->calls, g_strdup (callee));
      g_string_printf (rest, "call(%s), to_apply=%s", ops->str, callee);
      if (nres > 1)
        {
          /* %r:N = call @f(...) : (...) -> (T1, ...): the callee returns a
           * tuple, %r#k its element r.k */
          g_autoptr (GPtrArray) types = g_ptr_array_new_with_free_func (g_free);
          g_autofree char *tshape = NULL;
          if (!sl_expect (s, ":", "before the types") || !sl_expect (s, "(", "to open the argument types"))
            return FALSE;
          if (!sl_accept (s, ")"))
            {
              do
                {
                  g_autofree char *t = sl_tensor_type (s);
                  if (!t)
                    return FALSE;
                }
              while (sl_accept (s, ","));
              if (!sl_expect (s, ")", "to close the argument types"))
                return FALSE;
            }
          if (!sl_expect (s, "->", "before the result types") || !sl_expect (s, "(", "to open the result types")
              || !(tshape = sl_tuple_types (s, nres, types)) || !sl_expect (s, ")", "to close the result types"))
            return FALSE;
          sl_emit (s, at, name, tshape, rest->str, NULL);
          for (int i = 0; i < nres; i++)
            {
              g_autofree char *en = g_strdup_printf ("%s.%d", name, i);
              g_autofree char *gr = g_strdup_printf ("get-tuple-element(%s), index=%d", name, i);
              sl_emit (s, at, en, g_ptr_array_index (types, i), gr, NULL);
            }
          return TRUE;
        }
      if (!(shape = sl_result_type (s)))
        return FALSE;
    }
  else if (g_str_has_prefix (op, "chlo."))
    {
      sl_error (s, opat, "%s has no single HLO instruction and is not read; JAX's as_text(dialect=\"hlo\") "
                "writes it as the HLO it expands to", op);
      return FALSE;
    }
  else
    {
      sl_error (s, opat, "operation %s is not read yet (doc/hlo.md lists what the StableHLO reader takes)", op);
      return FALSE;
    }
  sl_emit (s, at, name, shape, rest->str, sharding);
  return TRUE;
}
