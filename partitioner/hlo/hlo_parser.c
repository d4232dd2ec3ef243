/* The HLO text reader (hlo_parser.h). A hand-written recursive-descent
 * parser over the whole text: HLO instructions may span lines and comments
 * may appear anywhere, so nothing here works line by line. Positions are byte
 * offsets turned into LINE:COL only when an error is reported. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/hlo/hlo_private.h"
#include "partitioner/hlo/hlo_lexer.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_proto.h"
#include "partitioner/hlo/stablehlo.h"
#include "partitioner/ir/async.h"
#include "partitioner/ir/sharding.h"



/* A splat constant is stored dense: at most this many elements (64 MiB of
 * f32), far above what a dump's splats hold (scalars broadcast by XLA are
 * small; large zeros are broadcasts). */
#define PS_MAX_SPLAT_ELEMENTS (1 << 24)

/* Called-computation references an instruction wrote, by key. */
typedef struct {
  PsComputation *to_apply, *condition, *body, *on_true, *on_false, *select, *scatter;
  GPtrArray *list;           /* branch_computations / called_computations */
  gsize list_pos;
  gboolean list_is_branches;
} Called;

/* Which computation-valued attributes an opcode takes. */
static gboolean
takes_computation (PsOpcode op, const char *key)
{
  if (strcmp (key, "to_apply") == 0)
    switch (op)
      {
      case PS_OP_REDUCE: case PS_OP_REDUCE_WINDOW: case PS_OP_SCATTER: case PS_OP_SORT:
      case PS_OP_MAP: case PS_OP_ALL_REDUCE: case PS_OP_REDUCE_SCATTER: case PS_OP_CALL:
      case PS_OP_CALL_START: case PS_OP_ALL_REDUCE_START:
        return TRUE;
      default:
        return FALSE;
      }
  if (strcmp (key, "condition") == 0 || strcmp (key, "body") == 0)
    return op == PS_OP_WHILE;
  if (strcmp (key, "true_computation") == 0 || strcmp (key, "false_computation") == 0
      || strcmp (key, "branch_computations") == 0)
    return op == PS_OP_CONDITIONAL;
  if (strcmp (key, "select") == 0 || strcmp (key, "scatter") == 0)
    return op == PS_OP_SELECT_AND_SCATTER;
  if (strcmp (key, "called_computations") == 0)
    return op == PS_OP_CUSTOM_CALL;
  if (strcmp (key, "calls") == 0)
    return op == PS_OP_FUSION || op == PS_OP_ASYNC_START || op == PS_OP_ASYNC_UPDATE
           || op == PS_OP_ASYNC_DONE;
  return FALSE;
}

static gboolean
is_computation_key (const char *key)
{
  static const char *const keys[] = { "to_apply", "condition", "body", "true_computation",
                                      "false_computation", "branch_computations", "select",
                                      "scatter", "called_computations", "calls" };
  for (gsize i = 0; i < G_N_ELEMENTS (keys); i++)
    if (strcmp (key, keys[i]) == 0)
      return TRUE;
  return FALSE;
}

static gboolean
parse_computation_list (PsHloReader *p, Called *cl)
{
  if (!ps_hlo_expect (p, '{', "to open the list of computations"))
    return FALSE;
  if (!cl->list)
    cl->list = g_ptr_array_new ();
  if (ps_hlo_accept (p, '}'))
    return TRUE;
  do
    {
      PsComputation *c = ps_hlo_computation_ref (p);
      if (!c)
        return FALSE;
      g_ptr_array_add (cl->list, c);
    }
  while (ps_hlo_accept (p, ','));
  return ps_hlo_expect (p, '}', "to close the list of computations");
}

static gboolean
is_batch_norm (PsOpcode op)
{
  return op == PS_OP_BATCH_NORM_TRAINING || op == PS_OP_BATCH_NORM_INFERENCE
         || op == PS_OP_BATCH_NORM_GRAD;
}

/* epsilon=0.001: a float (XLA keeps it as one), finite. */
static gboolean
parse_epsilon (PsHloReader *p, PsInstr *in)
{
  gsize s, e;
  if (!ps_hlo_token (p, "+-.", &s, &e))
    return FALSE;
  PsLiteral *lit = ps_literal_new (PS_F32, 1);
  char *why = NULL;
  gboolean ok = hl_literal_store (lit, 0, p->text + s, e - s, NULL, 0, &why);
  float v = ((const float *) lit->data)[0];
  ps_literal_free (lit);
  if (!ok)
    {
      ps_hlo_error (p, s, PS_ERROR_PARSE, "epsilon: %s", why);
      g_free (why);
      return FALSE;
    }
  if (!isfinite (v) || v < 0)
    {
      ps_hlo_error (p, s, PS_ERROR_PARSE, "epsilon must be a finite number >= 0, found '%.*s'",
                    (int) MIN (e - s, 40), p->text + s);
      return FALSE;
    }
  in->epsilon = v;
  return TRUE;
}

static gboolean
parse_attr (PsHloReader *p, PsInstr *in, Called *cl, GHashTable *seen)
{
  ps_hlo_skip_ws (p);
  gsize kpos = p->pos;
  char *key = ps_hlo_name (p, "an attribute name");
  if (!key)
    return FALSE;
  if (g_hash_table_contains (seen, key))
    {
      ps_hlo_error (p, kpos, PS_ERROR_PARSE, "duplicate attribute '%s'", key);
      g_free (key);
      return FALSE;
    }
  g_hash_table_add (seen, key);
  g_autofree char *ctx = g_strdup_printf ("after attribute name '%s'", key);
  if (!ps_hlo_expect (p, '=', ctx))
    return FALSE;
  PsOpcode op = in->opcode;
#define IS(k) (strcmp (key, (k)) == 0)
  if (IS ("sharding"))
    return ps_hlo_sharding (p, in);
  if (IS ("metadata"))
    return ps_hlo_metadata (p, &in->metadata);
  if (IS ("backend_config") && ps_hlo_peek (p) == '"')
    return (in->backend_config = ps_hlo_string (p)) != NULL;
  if (IS ("channel_id"))
    return ps_hlo_int (p, &in->channel_id, "a channel id");
  if (IS ("replica_groups") && ps_hlo_peek (p) == '{')
    {
      in->has_replica_groups = TRUE;
      return ps_hlo_groups (p, &in->n_groups, &in->group_size, &in->replica_groups, 0);
    }
  if (IS ("replica_groups") && ps_hlo_peek (p) == '[')
    {
      in->has_replica_groups = TRUE;
      return ps_hlo_iota_groups (p, &in->n_groups, &in->group_size, &in->replica_groups);
    }
  if (IS ("use_global_device_ids"))
    return ps_hlo_bool (p, &in->use_global_device_ids);
  if (IS ("source_target_pairs"))
    {
      int two = 0;
      return ps_hlo_groups (p, &in->n_pairs, &two, &in->source_target_pairs, 2);
    }
  if (IS ("operand_precision"))
    return ps_hlo_precision (p, in);
  if (IS ("dimensions"))
    return ps_hlo_int_list (p, &in->dimensions);
  if (IS ("lhs_batch_dims"))
    return ps_hlo_int_list (p, &in->dot.lhs_batch);
  if (IS ("rhs_batch_dims"))
    return ps_hlo_int_list (p, &in->dot.rhs_batch);
  if (IS ("lhs_contracting_dims"))
    return ps_hlo_int_list (p, &in->dot.lhs_contracting);
  if (IS ("rhs_contracting_dims"))
    return ps_hlo_int_list (p, &in->dot.rhs_contracting);
  if (IS ("window"))
    return ps_hlo_window (p, &in->window);
  if (IS ("dim_labels"))
    return ps_hlo_dim_labels (p, &in->conv);
  if (IS ("feature_group_count"))
    return ps_hlo_int (p, &in->feature_group_count, "a group count");
  if (IS ("batch_group_count"))
    return ps_hlo_int (p, &in->batch_group_count, "a group count");
  if (IS ("slice"))
    return ps_hlo_slice (p, in);
  if (IS ("dynamic_slice_sizes"))
    return ps_hlo_int_list (p, &in->dynamic_slice_sizes);
  if (IS ("padding") && op == PS_OP_PAD)
    return ps_hlo_padding (p, in);
  if (op == PS_OP_GATHER)
    {
      PsGatherDims *g = &in->gather;
      if (IS ("offset_dims")) return ps_hlo_int_list (p, &g->offset_dims);
      if (IS ("collapsed_slice_dims")) return ps_hlo_int_list (p, &g->collapsed_slice_dims);
      if (IS ("start_index_map")) return ps_hlo_int_list (p, &g->start_index_map);
      if (IS ("operand_batching_dims")) return ps_hlo_int_list (p, &g->operand_batching_dims);
      if (IS ("start_indices_batching_dims")) return ps_hlo_int_list (p, &g->start_indices_batching_dims);
      if (IS ("slice_sizes")) return ps_hlo_int_list (p, &g->slice_sizes);
      if (IS ("index_vector_dim")) return ps_hlo_int (p, &g->index_vector_dim, "a dimension");
      if (IS ("indices_are_sorted")) return ps_hlo_bool (p, &g->indices_are_sorted);
    }
  if (op == PS_OP_SCATTER)
    {
      PsScatterDims *s = &in->scatter;
      if (IS ("update_window_dims")) return ps_hlo_int_list (p, &s->update_window_dims);
      if (IS ("inserted_window_dims")) return ps_hlo_int_list (p, &s->inserted_window_dims);
      if (IS ("scatter_dims_to_operand_dims")) return ps_hlo_int_list (p, &s->scatter_dims_to_operand_dims);
      if (IS ("input_batching_dims")) return ps_hlo_int_list (p, &s->input_batching_dims);
      if (IS ("scatter_indices_batching_dims")) return ps_hlo_int_list (p, &s->scatter_indices_batching_dims);
      if (IS ("index_vector_dim")) return ps_hlo_int (p, &s->index_vector_dim, "a dimension");
      if (IS ("indices_are_sorted")) return ps_hlo_bool (p, &s->indices_are_sorted);
      if (IS ("unique_indices")) return ps_hlo_bool (p, &s->unique_indices);
    }
  if (IS ("index") && op == PS_OP_GET_TUPLE_ELEMENT)
    return ps_hlo_int (p, &in->tuple_index, "a tuple index");
  if (IS ("iota_dimension") && op == PS_OP_IOTA)
    return ps_hlo_int (p, &in->iota_dimension, "a dimension");
  if (IS ("direction") && op == PS_OP_COMPARE)
    return ps_hlo_comparison (p, in);
  if (IS ("type") && op == PS_OP_COMPARE)
    return (in->compare_type = ps_hlo_name (p, "a comparison type")) != NULL;
  if (is_batch_norm (op) && IS ("feature_index"))
    return ps_hlo_int (p, &in->feature_index, "a feature dimension");
  if (is_batch_norm (op) && IS ("epsilon"))
    return parse_epsilon (p, in);
  if (IS ("is_stable") && op == PS_OP_SORT)
    return ps_hlo_bool (p, &in->is_stable);
  if (IS ("kind") && op == PS_OP_FUSION)
    {
      ps_hlo_skip_ws (p);
      gsize vpos = p->pos;
      g_autofree char *k = ps_hlo_name (p, "a fusion kind");
      if (!k)
        return FALSE;
      if (!ps_fusion_kind_from_name (k, &in->fusion_kind))
        {
          ps_hlo_error (p, vpos, PS_ERROR_PARSE, "unknown fusion kind '%s' (kLoop, kInput, kOutput, kCustom)", k);
          return FALSE;
        }
      return TRUE;
    }
  if (IS ("custom_call_target") && op == PS_OP_CUSTOM_CALL)
    return (in->custom_call_target = ps_hlo_string (p)) != NULL;
  if (IS ("custom_call_has_side_effect") && op == PS_OP_CUSTOM_CALL)
    return ps_hlo_bool (p, &in->custom_call_has_side_effect);
  if (is_computation_key (key))
    {
      if (!takes_computation (op, key))
        {
          ps_hlo_error (p, kpos, PS_ERROR_PARSE, "%s does not take attribute '%s'", ps_opcode_name (op), key);
          return FALSE;
        }
      if (IS ("branch_computations") || IS ("called_computations"))
        {
          cl->list_is_branches = IS ("branch_computations");
          return parse_computation_list (p, cl);
        }
      PsComputation *c = ps_hlo_computation_ref (p);
      if (!c)
        return FALSE;
      if (IS ("to_apply") || IS ("calls")) cl->to_apply = c;
      else if (IS ("condition")) cl->condition = c;
      else if (IS ("body")) cl->body = c;
      else if (IS ("true_computation")) cl->on_true = c;
      else if (IS ("false_computation")) cl->on_false = c;
      else if (IS ("select")) cl->select = c;
      else cl->scatter = c;
      return TRUE;
    }
#undef IS
  char *value = ps_hlo_raw_value (p);
  if (!value)
    return FALSE;
  ps_instr_add_raw_attr (in, key, value);
  g_free (value);
  return TRUE;
}

/* Attributes without which an opcode means nothing. */
static const char *
missing_attr (const PsInstr *in, GHashTable *seen)
{
  static const struct { PsOpcode op; const char *key; } req[] = {
    { PS_OP_GET_TUPLE_ELEMENT, "index" }, { PS_OP_IOTA, "iota_dimension" },
    { PS_OP_COMPARE, "direction" }, { PS_OP_BROADCAST, "dimensions" },
    { PS_OP_TRANSPOSE, "dimensions" }, { PS_OP_CONCATENATE, "dimensions" },
    { PS_OP_REVERSE, "dimensions" }, { PS_OP_REDUCE, "dimensions" },
    { PS_OP_REDUCE, "to_apply" }, { PS_OP_SLICE, "slice" }, { PS_OP_PAD, "padding" },
    { PS_OP_DYNAMIC_SLICE, "dynamic_slice_sizes" }, { PS_OP_CONVOLUTION, "dim_labels" },
    { PS_OP_GATHER, "offset_dims" }, { PS_OP_GATHER, "collapsed_slice_dims" },
    { PS_OP_GATHER, "start_index_map" }, { PS_OP_GATHER, "index_vector_dim" },
    { PS_OP_GATHER, "slice_sizes" }, { PS_OP_SCATTER, "update_window_dims" },
    { PS_OP_SCATTER, "inserted_window_dims" }, { PS_OP_SCATTER, "scatter_dims_to_operand_dims" },
    { PS_OP_SCATTER, "index_vector_dim" }, { PS_OP_SCATTER, "to_apply" },
    { PS_OP_CUSTOM_CALL, "custom_call_target" }, { PS_OP_WHILE, "condition" },
    { PS_OP_WHILE, "body" }, { PS_OP_REDUCE_WINDOW, "window" },
    { PS_OP_REDUCE_WINDOW, "to_apply" }, { PS_OP_MAP, "to_apply" },
    { PS_OP_ALL_REDUCE, "to_apply" }, { PS_OP_REDUCE_SCATTER, "to_apply" },
    { PS_OP_REDUCE_SCATTER, "dimensions" }, { PS_OP_ALL_GATHER, "dimensions" },
    { PS_OP_CALL, "to_apply" }, { PS_OP_CALL_START, "to_apply" },
    { PS_OP_FUSION, "kind" }, { PS_OP_FUSION, "calls" }, { PS_OP_ASYNC_START, "calls" },
    { PS_OP_ALL_REDUCE_START, "to_apply" }, { PS_OP_ALL_GATHER_START, "dimensions" }, { PS_OP_SORT, "to_apply" },
    { PS_OP_SELECT_AND_SCATTER, "select" }, { PS_OP_SELECT_AND_SCATTER, "scatter" },
    { PS_OP_SELECT_AND_SCATTER, "window" },
    { PS_OP_BATCH_NORM_TRAINING, "epsilon" }, { PS_OP_BATCH_NORM_TRAINING, "feature_index" },
    { PS_OP_BATCH_NORM_INFERENCE, "epsilon" }, { PS_OP_BATCH_NORM_INFERENCE, "feature_index" },
    { PS_OP_BATCH_NORM_GRAD, "epsilon" }, { PS_OP_BATCH_NORM_GRAD, "feature_index" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (req); i++)
    if (req[i].op == in->opcode && !g_hash_table_contains (seen, req[i].key))
      {
        /* XLA's parser takes a scalar's broadcast without dimensions=. */
        if (in->opcode == PS_OP_BROADCAST && strcmp (req[i].key, "dimensions") == 0
            && in->n_operands == 1 && in->operands[0]->shape && in->operands[0]->shape->rank == 0)
          continue;
        return req[i].key;
      }
  if (in->opcode == PS_OP_CONDITIONAL && !g_hash_table_contains (seen, "branch_computations")
      && !(g_hash_table_contains (seen, "true_computation") && g_hash_table_contains (seen, "false_computation")))
    return "branch_computations";
  return NULL;
}

static void
assign_called (PsInstr *in, Called *cl)
{
  PsComputation *v[2];
  switch (in->opcode)
    {
    case PS_OP_WHILE:
      v[0] = cl->condition, v[1] = cl->body;
      ps_instr_set_called (in, 2, v);
      break;
    case PS_OP_SELECT_AND_SCATTER:
      v[0] = cl->select, v[1] = cl->scatter;
      ps_instr_set_called (in, 2, v);
      break;
    case PS_OP_CONDITIONAL:
      if (cl->list)
        {
          ps_instr_set_called (in, (int) cl->list->len, (PsComputation *const *) cl->list->pdata);
          in->branches_as_list = TRUE;
        }
      else
        {
          v[0] = cl->on_true, v[1] = cl->on_false;
          ps_instr_set_called (in, 2, v);
        }
      break;
    case PS_OP_CUSTOM_CALL:
      if (cl->list)
        ps_instr_set_called (in, (int) cl->list->len, (PsComputation *const *) cl->list->pdata);
      break;
    default:
      if (cl->to_apply)
        ps_instr_set_called (in, 1, &cl->to_apply);
      break;
    }
}

static gboolean
parse_literal_elems (PsHloReader *p, PsLiteral *lit, int64_t *idx, int depth)
{
  ps_hlo_skip_ws (p);
  if (FAILED (p))
    return FALSE;
  if (depth > PS_MAX_NESTING)
    {
      ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "constant nested too deeply");
      return FALSE;
    }
  if (CUR (p) == '{')
    {
      p->pos++;
      if (ps_hlo_accept (p, '}'))
        return TRUE;
      do
        if (!parse_literal_elems (p, lit, idx, depth + 1))
          return FALSE;
      while (ps_hlo_accept (p, ','));
      return ps_hlo_expect (p, '}', "to close the constant's values");
    }
  gsize s, e, is = 0, ie = 0;
  gboolean cplx = FALSE;
  gsize vpos = p->pos;
  if (CUR (p) == '(')
    {
      p->pos++;
      cplx = TRUE;
      if (!ps_hlo_token (p, "+-.", &s, &e) || !ps_hlo_expect (p, ',', "between real and imaginary parts")
          || !ps_hlo_token (p, "+-.", &is, &ie) || !ps_hlo_expect (p, ')', "to close the complex value"))
        return FALSE;
    }
  else if (!ps_hlo_token (p, "+-.", &s, &e))
    return FALSE;
  if (*idx >= lit->n)
    {
      ps_hlo_error (p, vpos, PS_ERROR_INVALID, "constant has more than %" G_GINT64_FORMAT " values", lit->n);
      return FALSE;
    }
  char *why = NULL;
  if (!hl_literal_store (lit, *idx, p->text + s, e - s, cplx ? p->text + is : NULL, ie - is, &why))
    {
      ps_hlo_error (p, vpos, PS_ERROR_INVALID, "%s", why);
      g_free (why);
      return FALSE;
    }
  (*idx)++;
  return TRUE;
}

static gboolean
parse_literal (PsHloReader *p, PsInstr *in, gsize oppos)
{
  if (!in->shape)
    {
      ps_hlo_error (p, oppos, PS_ERROR_PARSE, "constant needs its result shape written");
      return FALSE;
    }
  if (!ps_shape_is_array (in->shape) || in->shape->etype == PS_TOKEN)
    {
      ps_hlo_error (p, oppos, PS_ERROR_UNSUPPORTED, "constants of shape %s are not supported",
            ps_etype_name (in->shape->etype));
      return FALSE;
    }
  ps_hlo_skip_ws (p);
  gsize start = p->pos;
  /* Every value takes at least one byte of text, so a shape with more
   * elements than the rest of the text has bytes cannot be filled: storage
   * for that many values is all it could need (the count is checked below),
   * and a huge shape over a short text allocates nothing large. */
  int64_t n = ps_shape_elements (in->shape);
  int64_t cap = MIN (n, (int64_t) (p->len - p->pos));
  in->literal = ps_literal_new (in->shape->etype, cap);
  int64_t idx = 0;
  gboolean braced = CUR (p) == '{';
  if (!parse_literal_elems (p, in->literal, &idx, 0))
    return FALSE;
  if (idx == 1 && n > 1 && !braced)
    {
      /* XLA's splat form: one value for every element. Stored dense, so
       * its size is bounded like every other allocation a text can ask
       * for (doc/robustness.md). */
      if (n > PS_MAX_SPLAT_ELEMENTS)
        {
          ps_hlo_error (p, start, PS_ERROR_LIMIT, "splat constant of %" G_GINT64_FORMAT " elements is "
                        "over podsim's limit of %d (doc/robustness.md)", n, PS_MAX_SPLAT_ELEMENTS);
          return FALSE;
        }
      PsLiteral *full = ps_literal_new (in->shape->etype, n);
      int sz = ps_etype_size_bytes (in->shape->etype);
      for (int64_t i = 0; i < n; i++)
        memcpy ((char *) full->data + i * sz, in->literal->data, (gsize) sz);
      full->splat = TRUE;
      ps_literal_free (in->literal);
      in->literal = full;
      return TRUE;
    }
  if (idx != n)
    {
      g_autofree char *shape = ps_shape_to_string (in->shape, FALSE);
      ps_hlo_error (p, start, PS_ERROR_INVALID, "constant has %" G_GINT64_FORMAT " values but %s has %" G_GINT64_FORMAT " elements",
            idx, shape, n);
      return FALSE;
    }
  return TRUE;
}

/* Checks a written shape against the inferred one, or fills it in. */
static gboolean
settle_shape (PsHloReader *p, PsInstr *in, gsize shape_pos, gsize op_pos)
{
  GError *ie = NULL;
  PsShape *inf = ps_infer_shape (in, &ie);
  if (!in->shape)
    {
      if (!inf)
        {
          ps_hlo_error (p, op_pos, ie->code == PS_ERROR_UNSUPPORTED ? PS_ERROR_PARSE : PS_ERROR_INVALID,
                "%s", ie->message);
          g_error_free (ie);
          return FALSE;
        }
      in->shape = inf;
      return TRUE;
    }
  if (!inf)
    {
      gboolean bad = ie->code != PS_ERROR_UNSUPPORTED;
      if (bad)
        ps_hlo_error (p, op_pos, PS_ERROR_INVALID, "%s", ie->message);
      g_error_free (ie);
      return !bad;
    }
  gboolean ok = ps_shape_equal (inf, in->shape);
  if (!ok)
    {
      g_autofree char *w = ps_shape_to_string (in->shape, FALSE);
      g_autofree char *i = ps_shape_to_string (inf, FALSE);
      ps_hlo_error (p, shape_pos, PS_ERROR_INVALID, "shape %s of '%s' does not match %s, the shape its %s produces",
            w, in->name, i, ps_opcode_name (in->opcode));
    }
  ps_shape_free (inf);
  return ok;
}

/* For a clearer message: the line on which `name` is defined further down
 * the current computation ("[ROOT] [%]name =" at a line start), or 0. */
static int
defined_later (PsHloReader *p, const char *name)
{
  gsize n = strlen (name);
  int depth = 0;
  for (gsize i = p->pos; i < p->len; i++)
    {
      char c = p->text[i];
      if (c == '{')
        depth++;
      else if (c == '}' && --depth < 0)
        return 0; /* end of the computation */
      if (c != '\n')
        continue;
      gsize j = i + 1;
      while (j < p->len && (p->text[j] == ' ' || p->text[j] == '\t'))
        j++;
      if (j + 5 <= p->len && strncmp (p->text + j, "ROOT ", 5) == 0)
        for (j += 5; j < p->len && p->text[j] == ' '; j++)
          ;
      if (j < p->len && p->text[j] == '%')
        j++;
      if (j + n > p->len || strncmp (p->text + j, name, n) != 0)
        continue;
      gsize k = j + n;
      if (k < p->len && ps_hlo_is_ident_char (p->text[k]))
        continue;
      while (k < p->len && p->text[k] == ' ')
        k++;
      if (k < p->len && p->text[k] == '=')
        {
          int line, col;
          ps_text_position (p->text, j, &line, &col);
          return line;
        }
    }
  return 0;
}

static gboolean
parse_instruction (PsHloReader *p, PsComputation *c, PsInstr **root, gsize *root_pos)
{
  ps_hlo_skip_ws (p);
  gsize ipos = p->pos;
  gboolean is_root = FALSE;
  if (ps_hlo_at_keyword (p, "ROOT"))
    {
      gsize save = p->pos;
      p->pos += 4;
      if (ps_hlo_peek (p) == '=')
        p->pos = save; /* an instruction named ROOT */
      else
        is_root = TRUE;
    }
  ps_hlo_skip_ws (p);
  gsize npos = p->pos;
  g_autofree char *name = ps_hlo_name (p, "an instruction name");
  if (!name)
    return FALSE;
  if (g_hash_table_contains (p->scope, name))
    {
      int line, col;
      ps_text_position (p->text, GPOINTER_TO_SIZE (g_hash_table_lookup (p->scope_pos, name)), &line, &col);
      ps_hlo_error (p, npos, PS_ERROR_PARSE, "duplicate instruction name '%s' (first defined at line %d)", name, line);
      return FALSE;
    }
  if (!ps_hlo_expect (p, '=', "after the instruction name"))
    return FALSE;
  PsShape *shape = NULL;
  ps_hlo_skip_ws (p);
  gsize shape_pos = p->pos;
  if (ps_hlo_at_shape (p) && !(shape = ps_hlo_shape (p)))
    return FALSE;
  ps_hlo_skip_ws (p);
  gsize op_pos = p->pos;
  gsize q = p->pos;
  while (q < p->len && (g_ascii_isalnum (p->text[q]) || p->text[q] == '-' || p->text[q] == '_'))
    q++;
  PsOpcode op;
  if (q == p->pos)
    {
      g_autofree char *found = ps_hlo_describe (p, op_pos);
      ps_hlo_error (p, op_pos, PS_ERROR_PARSE, "expected an opcode, found %s", found);
      ps_shape_free (shape);
      return FALSE;
    }
  if (!ps_opcode_from_name (p->text + p->pos, q - p->pos, &op))
    {
      /* "f31[8]" is a misspelt shape, not an opcode. */
      gboolean etype = q < p->len && p->text[q] == '[';
      ps_hlo_error (p, op_pos, PS_ERROR_PARSE, "unknown %s '%.*s'%s", etype ? "element type" : "opcode",
                    (int) MIN (q - p->pos, 60), p->text + p->pos,
                    etype ? " (podsim reads pred, s1, s2, s4, s8, s16, s32, s64, u1, u2, u4, u8, u16, u32, u64, "
                    "f4e2m1fn, f8e3m4, f8e4m3, f8e4m3fn, f8e4m3fnuz, f8e4m3b11fnuz, f8e5m2, f8e5m2fnuz, "
                    "f8e8m0fnu, f16, bf16, f32, f64, c64, c128, token)" : "");
      ps_shape_free (shape);
      return FALSE;
    }
  p->pos = q;
  if (!ps_hlo_expect (p, '(', "after the opcode"))
    {
      ps_shape_free (shape);
      return FALSE;
    }
  GPtrArray *ops = g_ptr_array_new ();
  int64_t param_no = -1;
  gsize lit_pos = 0, lit_end = 0;
  if (op == PS_OP_PARAMETER)
    {
      ps_hlo_skip_ws (p);
      gsize ppos = p->pos;
      if (ps_hlo_int (p, &param_no, "a parameter number") && param_no < 0)
        ps_hlo_error (p, ppos, PS_ERROR_PARSE, "negative parameter number");
    }
  else if (op == PS_OP_CONSTANT)
    {
      /* Parsed once the instruction exists, to know the element type. */
      ps_hlo_skip_ws (p);
      lit_pos = p->pos;
      if (CUR (p) == '{' || CUR (p) == '(')
        {
          ps_hlo_skip_balanced (p);
          lit_end = p->pos;
        }
      else
        while (p->pos < p->len && (g_ascii_isalnum (CUR (p)) || strchr ("+-._", CUR (p))))
          p->pos++;
      lit_end = p->pos;
    }
  else if (ps_hlo_peek (p) != ')')
    {
      do
        {
          if (ps_hlo_at_shape (p))
            {
              PsShape *ignored = ps_hlo_shape (p); /* only a hint */
              ps_shape_free (ignored);
              if (FAILED (p))
                break;
            }
          ps_hlo_skip_ws (p);
          gsize opnd_pos = p->pos;
          g_autofree char *oname = ps_hlo_name (p, "an operand name");
          if (!oname)
            break;
          PsInstr *o = g_hash_table_lookup (p->scope, oname);
          if (!o)
            {
              int later = defined_later (p, oname);
              if (later > 0)
                ps_hlo_error (p, opnd_pos, PS_ERROR_INVALID,
                              "operand '%s' is used before its definition on line %d", oname, later);
              else
                ps_hlo_error (p, opnd_pos, PS_ERROR_INVALID, "undefined operand '%s'", oname);
              break;
            }
          g_ptr_array_add (ops, o);
        }
      while (ps_hlo_accept (p, ','));
    }
  if (!FAILED (p))
    ps_hlo_expect (p, ')', "to close the operands");
  if (FAILED (p))
    {
      g_ptr_array_free (ops, TRUE);
      ps_shape_free (shape);
      return FALSE;
    }
  PsInstr *in = ps_computation_add_instr (c, op, name, shape, (int) ops->len,
                                          (PsInstr *const *) ops->pdata);
  g_ptr_array_free (ops, TRUE);
  int line, col;
  ps_hlo_position (p, npos, &line, &col);
  in->src_line = line;
  in->src_col = col;
  g_hash_table_insert (p->scope, g_strdup (name), in);
  g_hash_table_insert (p->scope_pos, g_strdup (name), GSIZE_TO_POINTER (npos));
  if (op == PS_OP_PARAMETER)
    in->parameter_number = param_no;
  if (op == PS_OP_CONSTANT)
    {
      gsize after = p->pos;
      p->pos = lit_pos;
      if (!parse_literal (p, in, op_pos))
        return FALSE;
      if (p->pos != lit_end && !FAILED (p))
        {
          ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "unexpected text in the constant");
          return FALSE;
        }
      p->pos = after;
    }

  Called cl = { 0 };
  GHashTable *seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  while (!FAILED (p) && ps_hlo_accept (p, ','))
    parse_attr (p, in, &cl, seen);
  if (!FAILED (p))
    {
      const char *miss = missing_attr (in, seen);
      if (miss)
        ps_hlo_error (p, op_pos, PS_ERROR_PARSE, "%s '%s' needs attribute '%s'", ps_opcode_name (op), name, miss);
    }
  g_hash_table_destroy (seen);
  if (!FAILED (p))
    assign_called (in, &cl);
  if (cl.list)
    g_ptr_array_free (cl.list, TRUE);
  if (FAILED (p) || !settle_shape (p, in, shape_pos, op_pos))
    return FALSE;
  if (in->sharding && ps_shape_is_tuple (in->shape) && !ps_sharding_is_tuple (in->sharding))
    {
      /* One sharding on a tuple applies to every leaf (XLA's parser does
       * the same), so later passes only see tuple shardings on tuples. */
      PsSharding *t = ps_sharding_expand_to_shape (in->sharding, in->shape);
      ps_sharding_free (in->sharding);
      in->sharding = t;
    }
  if (is_root)
    {
      if (*root)
        {
          int l2, c2;
          ps_text_position (p->text, *root_pos, &l2, &c2);
          ps_hlo_error (p, ipos, PS_ERROR_PARSE, "second ROOT in computation '%s' (the first is at line %d)",
                c->name, l2);
          return FALSE;
        }
      *root = in;
      *root_pos = ipos;
    }
  return TRUE;
}

/* ---- computations and the module --------------------------------------- */

static gboolean
parse_signature (PsHloReader *p)
{
  /* The signature only repeats the parameters' shapes; parameter(k)
   * instructions are the definitions, so it is read and dropped. */
  if (!ps_hlo_expect (p, '(', "to open the signature"))
    return FALSE;
  if (!ps_hlo_accept (p, ')'))
    {
      do
        {
          g_autofree char *pname = ps_hlo_name (p, "a parameter name");
          if (!pname || !ps_hlo_expect (p, ':', "after the parameter name"))
            return FALSE;
          PsShape *s = ps_hlo_shape (p);
          if (!s)
            return FALSE;
          ps_shape_free (s);
        }
      while (ps_hlo_accept (p, ','));
      if (!ps_hlo_expect (p, ')', "to close the signature"))
        return FALSE;
    }
  ps_hlo_skip_ws (p);
  if (!(CUR (p) == '-' && p->pos + 1 < p->len && p->text[p->pos + 1] == '>'))
    {
      g_autofree char *found = ps_hlo_describe (p, p->pos);
      ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "expected '->' after the signature, found %s", found);
      return FALSE;
    }
  p->pos += 2;
  PsShape *r = ps_hlo_shape (p);
  ps_shape_free (r);
  return r != NULL;
}

static gboolean
finish_computation (PsHloReader *p, PsComputation *c, PsInstr *root, gsize cpos)
{
  if (c->instrs->len == 0)
    {
      ps_hlo_error (p, cpos, PS_ERROR_PARSE, "computation '%s' has no instructions", c->name);
      return FALSE;
    }
  c->root = root ? root : g_ptr_array_index (c->instrs, c->instrs->len - 1);
  /* Parameters by number; duplicates and gaps are errors. */
  for (guint i = 0; i < c->instrs->len; i++)
    {
      PsInstr *in = g_ptr_array_index (c->instrs, i);
      if (in->opcode != PS_OP_PARAMETER)
        continue;
      if (in->parameter_number > 100000)
        {
          ps_set_error_at (&p->err, PS_ERROR_PARSE, p->file, in->src_line, in->src_col,
                           "parameter number %" G_GINT64_FORMAT " is too large", in->parameter_number);
          return FALSE;
        }
      guint k = (guint) in->parameter_number;
      if (c->params->len <= k)
        g_ptr_array_set_size (c->params, k + 1);
      PsInstr *prev = g_ptr_array_index (c->params, k);
      if (prev)
        {
          ps_set_error_at (&p->err, PS_ERROR_INVALID, p->file, in->src_line, in->src_col,
                           "parameter number %u is used twice in computation '%s' (also by '%s')",
                           k, c->name, prev->name);
          return FALSE;
        }
      g_ptr_array_index (c->params, k) = in;
    }
  for (guint k = 0; k < c->params->len; k++)
    if (!g_ptr_array_index (c->params, k))
      {
        ps_hlo_error (p, cpos, PS_ERROR_INVALID, "computation '%s' has no parameter(%u) but has parameter(%u)",
              c->name, k, c->params->len - 1);
        return FALSE;
      }
  return TRUE;
}

static gboolean
parse_computation (PsHloReader *p, PsComputation **entry, gsize *entry_pos)
{
  ps_hlo_skip_ws (p);
  gsize cpos = p->pos;
  gboolean is_entry = FALSE;
  if (ps_hlo_at_keyword (p, "ENTRY"))
    {
      p->pos += 5;
      is_entry = TRUE;
    }
  ps_hlo_skip_ws (p);
  gsize npos = p->pos;
  g_autofree char *name = ps_hlo_name (p, "a computation name");
  if (!name)
    return FALSE;
  if (ps_module_find_computation (p->m, name))
    {
      ps_hlo_error (p, npos, PS_ERROR_PARSE, "duplicate computation name '%s'", name);
      return FALSE;
    }
  if (ps_hlo_peek (p) == '(' && !parse_signature (p))
    return FALSE;
  if (!ps_hlo_expect (p, '{', "to open the computation body"))
    return FALSE;
  PsComputation *c = ps_computation_new (p->m, name);
  if (is_entry)
    {
      if (*entry)
        {
          int line, col;
          ps_text_position (p->text, *entry_pos, &line, &col);
          ps_hlo_error (p, cpos, PS_ERROR_PARSE, "second ENTRY computation '%s' (the first, '%s', is at line %d)",
                name, (*entry)->name, line);
          return FALSE;
        }
      *entry = c;
      *entry_pos = cpos;
      c->is_entry = TRUE;
    }
  g_hash_table_remove_all (p->scope);
  g_hash_table_remove_all (p->scope_pos);
  PsInstr *root = NULL;
  gsize root_pos = 0;
  while (!FAILED (p) && ps_hlo_peek (p) != '}')
    {
      if (CUR (p) == '\0')
        {
          ps_hlo_error (p, npos, PS_ERROR_PARSE, "computation '%s' is never closed with '}'", name);
          return FALSE;
        }
      if (!parse_instruction (p, c, &root, &root_pos))
        return FALSE;
    }
  if (FAILED (p))
    return FALSE;
  p->pos++; /* '}' */
  if (!finish_computation (p, c, root, npos))
    return FALSE;
  /* "}, execution_thread="x"" trails the body. */
  if (ps_hlo_accept (p, ','))
    {
      ps_hlo_skip_ws (p);
      gsize kpos = p->pos;
      g_autofree char *key = ps_hlo_name (p, "execution_thread");
      if (!key)
        return FALSE;
      if (strcmp (key, "execution_thread") != 0)
        {
          ps_hlo_error (p, kpos, PS_ERROR_PARSE, "unknown computation attribute '%s'", key);
          return FALSE;
        }
      if (!ps_hlo_expect (p, '=', "after execution_thread"))
        return FALSE;
      c->execution_thread = ps_hlo_string (p);
      if (!c->execution_thread)
        return FALSE;
    }
  return TRUE;
}

static gboolean
parse_bool_list (PsHloReader *p, int *n, gboolean **out)
{
  GArray *v = g_array_new (FALSE, FALSE, sizeof (gboolean));
  gboolean b;
  if (ps_hlo_accept (p, '{'))
    {
      if (!ps_hlo_accept (p, '}'))
        {
          do
            {
              if (!ps_hlo_bool (p, &b))
                break;
              g_array_append_val (v, b);
            }
          while (ps_hlo_accept (p, ','));
          if (!FAILED (p))
            ps_hlo_expect (p, '}', "to close the list");
        }
    }
  else if (ps_hlo_bool (p, &b))
    g_array_append_val (v, b);
  g_free (*out);
  *n = (int) v->len;
  *out = (gboolean *) g_array_free (v, FALSE);
  return !FAILED (p);
}

static void
raw_attr_free (gpointer data)
{
  PsRawAttr *a = data;
  g_free (a->key);
  g_free (a->value);
  g_free (a);
}

/* { {0}: (0, {}, may-alias), {1}: (1, {}) } or XLA's older { {}: 0 }. */
static gboolean
parse_aliases (PsHloReader *p)
{
  p->alias_pos = p->pos;
  if (!ps_hlo_expect (p, '{', "to open input_output_alias"))
    return FALSE;
  if (ps_hlo_accept (p, '}'))
    return TRUE;
  do
    {
      PsInts out = { 0 }, pidx = { 0 };
      int64_t param = 0;
      gboolean must = FALSE;
      if (!ps_hlo_int_list (p, &out) || !ps_hlo_expect (p, ':', "after an output index"))
        {
          ps_ints_clear (&out);
          return FALSE;
        }
      if (ps_hlo_accept (p, '('))
        {
          if (ps_hlo_int (p, &param, "a parameter number") && ps_hlo_expect (p, ',', "after the parameter number")
              && ps_hlo_int_list (p, &pidx) && ps_hlo_accept (p, ','))
            {
              ps_hlo_skip_ws (p);
              gsize kpos = p->pos;
              g_autofree char *kind = ps_hlo_name (p, "may-alias or must-alias");
              if (kind && strcmp (kind, "must-alias") == 0)
                must = TRUE;
              else if (kind && strcmp (kind, "may-alias") != 0)
                ps_hlo_error (p, kpos, PS_ERROR_PARSE, "input_output_alias: unknown kind '%s' "
                              "(may-alias, must-alias)", kind);
            }
          if (!FAILED (p))
            ps_hlo_expect (p, ')', "to close an alias");
        }
      else
        ps_hlo_int (p, &param, "a parameter number");
      if (!FAILED (p))
        ps_module_add_alias (p->m, out.n, out.v, param, pidx.n, pidx.v, must);
      ps_ints_clear (&out);
      ps_ints_clear (&pidx);
    }
  while (!FAILED (p) && ps_hlo_accept (p, ','));
  if (!FAILED (p))
    ps_hlo_expect (p, '}', "to close input_output_alias");
  return !FAILED (p);
}

static const PsShape *
sub_shape (const PsShape *s, const PsInts *index)
{
  for (int i = 0; s && i < index->n; i++)
    s = s->etype == PS_TUPLE && index->v[i] >= 0 && index->v[i] < s->n_elems
        ? s->elems[index->v[i]] : NULL;
  return s;
}

/* XLA's HloInputOutputAliasConfig::Verify: indices name elements of the
 * entry's result and parameters, of the same size, each at most once. */
static void
check_aliases (PsHloReader *p)
{
  const PsModule *m = p->m;
  const PsComputation *e = m->entry;
  for (int i = 0; i < m->n_aliases && !FAILED (p); i++)
    {
      const PsAlias *a = &m->aliases[i];
      g_autofree char *oi = ps_ints_to_string (&a->output_index);
      g_autofree char *pi = ps_ints_to_string (&a->param_index);
      const PsShape *os = e->root ? sub_shape (e->root->shape, &a->output_index) : NULL;
      const PsShape *ps = a->parameter >= 0 && a->parameter < (int64_t) e->params->len
                          ? sub_shape (((PsInstr *) g_ptr_array_index (e->params, a->parameter))->shape,
                                       &a->param_index)
                          : NULL;
      if (!os)
        ps_hlo_error (p, p->alias_pos, PS_ERROR_INVALID, "input_output_alias: output %s is not "
                      "an element of the entry's result", oi);
      else if (!ps)
        ps_hlo_error (p, p->alias_pos, PS_ERROR_INVALID, "input_output_alias: parameter %"
                      G_GINT64_FORMAT " %s is not an element of an entry parameter (%u parameters)",
                      a->parameter, pi, e->params->len);
      else if (ps_shape_bytes (os) != ps_shape_bytes (ps))
        ps_hlo_error (p, p->alias_pos, PS_ERROR_INVALID, "input_output_alias: output %s (%"
                      G_GINT64_FORMAT " bytes) and parameter %" G_GINT64_FORMAT " %s (%"
                      G_GINT64_FORMAT " bytes) differ in size", oi, ps_shape_bytes (os),
                      a->parameter, pi, ps_shape_bytes (ps));
      for (int j = 0; j < i && !FAILED (p); j++)
        {
          const PsAlias *b = &m->aliases[j];
          if (ps_ints_equal (&a->output_index, &b->output_index))
            ps_hlo_error (p, p->alias_pos, PS_ERROR_INVALID, "input_output_alias: output %s "
                          "aliased twice", oi);
          else if (a->parameter == b->parameter && ps_ints_equal (&a->param_index, &b->param_index))
            ps_hlo_error (p, p->alias_pos, PS_ERROR_INVALID, "input_output_alias: parameter %"
                          G_GINT64_FORMAT " %s aliased twice", a->parameter, pi);
        }
    }
}

/* The header's spmd_parameters_shardings={S0, S1, ...} (one sharding per
 * entry parameter, a tuple parameter's a tuple sharding) and
 * spmd_output_sharding=S: the shardings XLA's SPMD partitioner records
 * from the entry's parameters and root before it partitions
 * (SpmdPartitioner::Run, xla/service/spmd/spmd_partitioner.cc) and an
 * HloModuleProto carries; XLA's HLO text has no place for them, podsim's
 * proto reader writes them so (doc/hlo.md). */
static gboolean
parse_spmd_shardings (PsHloReader *p, const char *key)
{
  PsInstr tmp = { 0 };
  if (strcmp (key, "spmd_output_sharding") == 0)
    {
      p->spmd_out_pos = p->pos;
      if (!ps_hlo_sharding (p, &tmp))
        return FALSE;
      p->spmd_out = tmp.sharding;
      return TRUE;
    }
  p->spmd_params_pos = p->pos;
  if (!ps_hlo_expect (p, '{', "to open spmd_parameters_shardings"))
    return FALSE;
  p->spmd_params = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_sharding_free);
  ps_hlo_skip_ws (p);
  if (ps_hlo_accept (p, '}'))
    return TRUE;
  do
    {
      tmp.sharding = NULL;
      if (!ps_hlo_sharding (p, &tmp))
        return FALSE;
      g_ptr_array_add (p->spmd_params, tmp.sharding);
    }
  while (ps_hlo_accept (p, ','));
  return ps_hlo_expect (p, '}', "to close spmd_parameters_shardings");
}

/* As XLA keeps them (they are the entry's own shardings before
 * partitioning), the module's parameter and output shardings give an
 * entry parameter or root that has none its sharding, and one that has
 * its own must agree. A module that is already partitioned keeps its
 * per-device instructions unannotated: there they only describe the
 * program's global layout, and stay header text. */
static void
apply_spmd_shardings (PsHloReader *p, PsComputation *entry)
{
  if (!p->spmd_params && !p->spmd_out)
    return;
  if (ps_async_module_is_partitioned (p->m))
    return;
  if (p->spmd_params && p->spmd_params->len != entry->params->len)
    {
      ps_hlo_error (p, p->spmd_params_pos, PS_ERROR_INVALID, "spmd_parameters_shardings has %u sharding%s, "
                    "the entry computation '%s' %u parameter%s", p->spmd_params->len,
                    p->spmd_params->len == 1 ? "" : "s", entry->name, entry->params->len,
                    entry->params->len == 1 ? "" : "s");
      return;
    }
  for (guint i = 0; p->spmd_params && i <= p->spmd_params->len; i++)
    {
      gboolean out = i == p->spmd_params->len;
      if (out && !p->spmd_out)
        break;
      PsSharding *s = out ? p->spmd_out : g_ptr_array_index (p->spmd_params, i);
      PsInstr *in = out ? entry->root : g_ptr_array_index (entry->params, i);
      if (!in)
        continue;
      if (!in->sharding)
        in->sharding = ps_sharding_copy (s);
      else if (!ps_sharding_equal (in->sharding, s))
        {
          g_autofree char *a = ps_sharding_to_string (in->sharding);
          g_autofree char *b = ps_sharding_to_string (s);
          ps_hlo_error (p, out ? p->spmd_out_pos : p->spmd_params_pos, PS_ERROR_INVALID,
                        "%s '%s' has sharding %s but the module's %s gives %s", out ? "the entry root" : "parameter",
                        in->name, a, out ? "spmd_output_sharding" : "spmd_parameters_shardings", b);
          return;
        }
    }
  if (!p->spmd_params && p->spmd_out && entry->root)
    {
      if (!entry->root->sharding)
        entry->root->sharding = ps_sharding_copy (p->spmd_out);
      else if (!ps_sharding_equal (entry->root->sharding, p->spmd_out))
        {
          g_autofree char *a = ps_sharding_to_string (entry->root->sharding);
          g_autofree char *b = ps_sharding_to_string (p->spmd_out);
          ps_hlo_error (p, p->spmd_out_pos, PS_ERROR_INVALID, "the entry root '%s' has sharding %s but the "
                        "module's spmd_output_sharding gives %s", entry->root->name, a, b);
        }
    }
}

static gboolean
parse_header (PsHloReader *p)
{
  p->pos += strlen ("HloModule");
  g_free (p->m->name);
  p->m->name = ps_hlo_name (p, "a module name");
  if (!p->m->name)
    return FALSE;
  /* older dumps write "HloModule NAME:" (xla/tests/isolated_convolution.hlo):
   * XLA's lexer takes an identifier directly followed by ':' as a name and
   * drops the colon (HloLexer::LexIdentifier) */
  if (p->pos < p->len && p->text[p->pos] == ':')
    p->pos++;
  GHashTable *seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  while (!FAILED (p) && ps_hlo_accept (p, ','))
    {
      ps_hlo_skip_ws (p);
      gsize kpos = p->pos;
      char *key = ps_hlo_name (p, "a module attribute");
      if (!key)
        break;
      if (g_hash_table_contains (seen, key))
        {
          ps_hlo_error (p, kpos, PS_ERROR_PARSE, "duplicate module attribute '%s'", key);
          g_free (key);
          break;
        }
      g_hash_table_add (seen, key);
      if (!ps_hlo_expect (p, '=', "after the module attribute name"))
        break;
      if (strcmp (key, "num_partitions") == 0)
        ps_hlo_int (p, &p->m->num_partitions, "a partition count");
      else if (strcmp (key, "input_output_alias") == 0)
        parse_aliases (p);
      else if (strcmp (key, "allow_spmd_sharding_propagation_to_output") == 0)
        parse_bool_list (p, &p->m->n_prop_to_output, &p->m->prop_to_output);
      else if (strcmp (key, "allow_spmd_sharding_propagation_to_parameters") == 0)
        parse_bool_list (p, &p->m->n_prop_to_params, &p->m->prop_to_params);
      else
        {
          ps_hlo_skip_ws (p);
          gsize vpos = p->pos;
          if (strcmp (key, "spmd_parameters_shardings") == 0 || strcmp (key, "spmd_output_sharding") == 0)
            {
              /* read as shardings here, kept as text below to print back */
              if (!parse_spmd_shardings (p, key))
                break;
              p->pos = vpos;
            }
          char *v = ps_hlo_raw_value (p);
          if (!v)
            break;
          if (strcmp (key, "entry_computation_layout") == 0)
            p->m->entry_layout = v;
          else
            {
              PsRawAttr *a = g_new0 (PsRawAttr, 1);
              a->key = g_strdup (key);
              a->value = v;
              if (!p->m->extra_attrs)
                p->m->extra_attrs = g_ptr_array_new_with_free_func (raw_attr_free);
              g_ptr_array_add (p->m->extra_attrs, a);
            }
        }
    }
  g_hash_table_destroy (seen);
  return !FAILED (p);
}

/* Inputs that are not HLO text, told apart by how they begin, so the error
 * says what the file looks like instead of what token was expected. The
 * checks only fire where HLO text cannot stand (a computation is never
 * followed by ':', and HLO has no '#' comments). */
static gboolean
refuse_other_formats (PsHloReader *p)
{
  ps_hlo_skip_ws (p);
  if (FAILED (p))
    return FALSE;
  gsize at = p->pos;
  const char *t = p->text + at;
  gsize left = p->len - at;
  gsize w = 0;
  while (w < left && (g_ascii_isalnum (t[w]) || t[w] == '_' || t[w] == '.'))
    w++;
  gsize after = w;
  while (after < left && (t[after] == ' ' || t[after] == '\t'))
    after++;
  char next = after < left ? t[after] : 0;
  /* MLIR (module @..., func.func) never gets here: the StableHLO reader
   * takes it (ps_hlo_parse_module); nor does `word:` where word is an
   * identifier: the HloModuleProto reader takes that. */
  if (w > 0 && next == ':' && !(after + 1 < left && t[after + 1] == ':'))
    ps_hlo_error (p, at, PS_ERROR_PARSE, "this looks like a text protocol buffer ('%.*s: ...'; an "
                  "HloModuleProto or HloProto?), not HLO text; XLA writes HLO text with "
                  "--xla_dump_hlo_as_text (doc/models.md)", (int) MIN (w, 40), t);
  else if (w == 0 && left > 0 && t[0] == '#')
    /* a text proto after a lit test's RUN lines never gets here: the
     * HloModuleProto reader takes it (ps_hlo_parse_module) */
    ps_hlo_error (p, at, PS_ERROR_PARSE, "a line starting with '#' (a lit test's RUN line, a "
                  "script or an MLIR alias?) is not HLO text; HLO comments are // and /* */");
  else if (w == 0 && left > 0 && (t[0] == '{' || t[0] == '['))
    ps_hlo_error (p, at, PS_ERROR_PARSE, "this looks like JSON, not HLO text (podsim reads the text "
                  "XLA prints: 'HloModule NAME' then computations)");
  return !FAILED (p);
}

/* The source-location tables newer XLA prints after the computations
 * (FileNames, FunctionNames, FileLocations, StackFrames: lines of
 * `ID "text"` or `ID {key=value ...}`, which metadata's stack_frame_id
 * points into). podsim keeps op_name and source_file of metadata but not
 * these tables: they are read, checked for that form, and dropped. A
 * computation of such a name (followed by '(' or '{') is not a table. */
static gboolean
at_stack_table (PsHloReader *p)
{
  static const char *const tables[] = { "FileNames", "FunctionNames", "FileLocations", "StackFrames" };
  ps_hlo_skip_ws (p);
  for (gsize k = 0; k < G_N_ELEMENTS (tables); k++)
    if (ps_hlo_at_keyword (p, tables[k]))
      {
        gsize save = p->pos;
        p->pos += strlen (tables[k]);
        char c = ps_hlo_peek (p);
        p->pos = save;
        if (c != '(' && c != '{' && c != '%')
          return TRUE;
      }
  return FALSE;
}

static gboolean
skip_stack_table (PsHloReader *p)
{
  g_autofree char *table = ps_hlo_name (p, "a table name");
  if (!table)
    return FALSE;
  while (!FAILED (p) && g_ascii_isdigit (ps_hlo_peek (p)))
    {
      int64_t id;
      if (!ps_hlo_int (p, &id, "an entry id"))
        return FALSE;
      char c = ps_hlo_peek (p);
      if (c == '"')
        {
          g_autofree char *s = ps_hlo_string (p);
          if (!s)
            return FALSE;
        }
      else if (c == '{')
        {
          if (!ps_hlo_skip_balanced (p))
            return FALSE;
        }
      else
        {
          g_autofree char *found = ps_hlo_describe (p, p->pos);
          ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "%s: expected a \"string\" or {...} after entry %"
                        G_GINT64_FORMAT ", found %s", table, id, found);
          return FALSE;
        }
    }
  return !FAILED (p);
}

/* Where each module of a text starts: offsets of "HloModule" at the start
 * of a line (after blanks), followed by a blank. */
static GArray *
module_starts (const char *t, gsize len)
{
  GArray *a = g_array_new (FALSE, FALSE, sizeof (gsize));
  gboolean line_start = TRUE;
  for (gsize i = 0; i < len; i++)
    {
      char c = t[i];
      if (c == '\n')
        {
          line_start = TRUE;
          continue;
        }
      if (line_start && (c == ' ' || c == '\t' || c == '\r'))
        continue;
      if (line_start && len - i > 10 && memcmp (t + i, "HloModule", 9) == 0
          && (t[i + 9] == ' ' || t[i + 9] == '\t'))
        g_array_append_val (a, i);
      line_start = FALSE;
    }
  return a;
}

/* The name after "HloModule " at `at` (without '%'). transfer full. */
static char *
module_name_at (const char *t, gsize len, gsize at)
{
  gsize s = at + 9;
  while (s < len && (t[s] == ' ' || t[s] == '\t'))
    s++;
  if (s < len && t[s] == '%')
    s++;
  gsize e = s;
  while (e < len && ps_hlo_is_ident_char (t[e]))
    e++;
  return g_strndup (t + s, e - s);
}

PsModule *
ps_hlo_parse (const char *text, gsize len, const char *filename, GError **error)
{
  return ps_hlo_parse_module (text, len, filename, NULL, error);
}

PsModule *
ps_hlo_parse_module (const char *text, gsize len, const char *filename, const char *module,
                     GError **error)
{
  g_return_val_if_fail (text != NULL || len == 0, NULL);
  /* JAX's default text is StableHLO (MLIR): its reader makes the same IR. */
  if (text && ps_stablehlo_looks_like (text, len) && !memchr (text, 0, len))
    return ps_stablehlo_parse (text, len, filename ? filename : "<hlo>", error);
  /* An HloModuleProto in protobuf text format (xla-translate's lit tests,
   * --xla_dump_hlo_as_text=false dumps decoded by protoc): its reader makes
   * the same IR through HLO text. */
  if (text && ps_hlo_proto_looks_like (text, len) && !memchr (text, 0, len))
    return ps_hlo_proto_parse (text, len, filename ? filename : "<hlo>", module, error);
  PsHloReader p = { 0 };
  p.file = filename ? filename : "<hlo>";
  p.len = len;
  char *copy = g_strndup (text ? text : "", len);
  p.text = copy;
  const char *nul = memchr (text ? text : "", 0, len);
  if (nul)
    ps_hlo_error (&p, (gsize) (nul - text), PS_ERROR_PARSE, "NUL byte in the text (a binary file, "
                  "such as a serialized HloModuleProto? podsim reads HLO text)");
  /* Several modules: read the one asked for (the first by default) as if
   * the text ended before the next; positions stay those of the file. */
  GArray *starts = FAILED (&p) ? g_array_new (FALSE, FALSE, sizeof (gsize)) : module_starts (copy, len);
  if (starts->len > 1 || (module && !FAILED (&p)))
    {
      guint k = 0;
      if (module)
        {
          GString *names = g_string_new (NULL);
          for (k = 0; k < starts->len; k++)
            {
              g_autofree char *nm = module_name_at (copy, len, g_array_index (starts, gsize, k));
              if (strcmp (nm, module) == 0)
                break;
              g_string_append_printf (names, "%s%s", names->len ? ", " : "", nm);
            }
          if (k == starts->len)
            {
              if (starts->len == 0)
                ps_set_error_at (&p.err, PS_ERROR_OPTION, p.file, 0, 0, "--module %s: the text has no "
                                 "HloModule line", module);
              else
                ps_set_error_at (&p.err, PS_ERROR_OPTION, p.file, 0, 0, "--module %s: no such module "
                                 "(the text has %s)", module, names->str);
            }
          g_string_free (names, TRUE);
        }
      if (!FAILED (&p))
        {
          p.pos = g_array_index (starts, gsize, k);
          if (k + 1 < starts->len)
            {
              p.len = g_array_index (starts, gsize, k + 1);
              copy[p.len] = '\0';
            }
        }
    }
  g_array_free (starts, TRUE);
  if (!FAILED (&p))
    refuse_other_formats (&p);
  p.m = ps_module_new ("module");
  p.m->source_name = g_strdup (p.file);
  p.scope = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  p.scope_pos = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  if (!FAILED (&p) && ps_hlo_at_keyword (&p, "HloModule"))
    parse_header (&p);
  PsComputation *entry = NULL;
  gsize entry_pos = 0;
  while (!FAILED (&p) && ps_hlo_peek (&p) != '\0')
    {
      if (at_stack_table (&p))
        skip_stack_table (&p);
      else
        parse_computation (&p, &entry, &entry_pos);
    }
  if (!FAILED (&p) && p.m->computations->len == 0)
    ps_hlo_error (&p, p.pos, PS_ERROR_PARSE, "no computation in the module");
  if (!FAILED (&p))
    {
      if (!entry)
        {
          /* Without ENTRY the last computation is the entry, as in XLA. */
          entry = g_ptr_array_index (p.m->computations, p.m->computations->len - 1);
          entry->is_entry = TRUE;
        }
      p.m->entry = entry;
      apply_spmd_shardings (&p, entry);
      if (!FAILED (&p))
        ps_module_validate (p.m, p.file, &p.err);
      if (!FAILED (&p))
        check_aliases (&p);
    }
  g_hash_table_destroy (p.scope);
  g_hash_table_destroy (p.scope_pos);
  if (p.spmd_params)
    g_ptr_array_unref (p.spmd_params);
  ps_sharding_free (p.spmd_out);
  g_free (copy);
  if (p.err)
    {
      g_propagate_error (error, p.err);
      ps_module_free (p.m);
      return NULL;
    }
  return p.m;
}

PsModule *
ps_hlo_parse_file (const char *path, GError **error)
{
  return ps_hlo_parse_file_module (path, NULL, error);
}

PsModule *
ps_hlo_parse_file_module (const char *path, const char *module, GError **error)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  if (!ps_read_text_file (path, PS_MAX_TEXT_BYTES, &text, &len, error))
    return NULL;
  return ps_hlo_parse_module (text, len, strcmp (path, "-") == 0 ? "<stdin>" : path,
                              module && *module ? module : NULL, error);
}

PsModule *
ps_hlo_load (const char *path, const char *module, GError **error)
{
  g_autoptr (PsModule) m = ps_hlo_parse_file_module (path, module, error);
  if (!m || !ps_async_make_synchronous (m, NULL, error))
    return NULL;
  /* An unbounded dim ("?") has no size: XLA's compilers refuse it too (a
   * TPU or GPU executable has static or bounded shapes; jax.export refines
   * a symbolic shape to the call's concrete one before compiling), so
   * every stage that needs sizes stops here, at the first such value. */
  for (guint ci = 0; ci < m->computations->len; ci++)
    {
      PsComputation *c = g_ptr_array_index (m->computations, ci);
      for (guint k = 0; k < c->instrs->len; k++)
        {
          PsInstr *in = g_ptr_array_index (c->instrs, k);
          if (ps_shape_has_unbounded (in->shape))
            {
              g_autofree char *sh = ps_shape_to_string (in->shape, FALSE);
              ps_instr_error (error, PS_ERROR_UNSUPPORTED, in, "shape %s has an unbounded dynamic "
                              "dimension '?': podsim reads and prints it (podsim hlo), but propagation, "
                              "partitioning, the interpreter and the simulator need every size; write "
                              "the size, or a bound <=N", sh);
              return NULL;
            }
        }
    }
  return g_steal_pointer (&m);
}

void
ps_hlo_offset_line_col (const char *text, gsize len, gsize off, int *line, int *col)
{
  int ln = 1, c = 1;
  for (gsize i = 0; i < off && i < len; i++)
    {
      if (text[i] == '\n')
        ln++, c = 1;
      else
        c++;
    }
  *line = ln;
  *col = c;
}

void
ps_hlo_made_error_to_source (GError **error, GError *e, const char *hlo, const char *text, gsize len,
                             const char *file)
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
      int ln, col;
      ps_hlo_offset_line_col (text, len, off, &ln, &col);
      ps_set_error_at (error, e->code, file, ln, col, "%s", what);
    }
  else
    ps_set_error_at (error, e->code, file, 0, 0, "%s", what);
  g_error_free (e);
}
