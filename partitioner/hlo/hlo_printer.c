/* The canonical HLO text printer (hlo_printer.h). Every choice here (which
 * attributes are printed when zero, their order, spacing) is made so that
 * the reader gives back the same IR and a second print the same bytes. */
#include "config.h"

#include <string.h>

#include "partitioner/hlo/hlo_private.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/ir/sharding.h"

static const PsHloPrintOptions canonical = { FALSE, FALSE, FALSE };

static void
append_ints (GString *out, const PsInts *v)
{
  g_string_append_c (out, '{');
  for (int i = 0; i < v->n; i++)
    {
      if (i > 0)
        g_string_append_c (out, ',');
      g_string_append_printf (out, "%" G_GINT64_FORMAT, v->v[i]);
    }
  g_string_append_c (out, '}');
}

static void
attr_ints (GString *out, const char *key, const PsInts *v)
{
  g_string_append_printf (out, ", %s=", key);
  append_ints (out, v);
}

static void
append_groups (GString *out, const int64_t *ids, int n, int size)
{
  g_string_append_c (out, '{');
  for (int g = 0; g < n; g++)
    {
      if (g > 0)
        g_string_append_c (out, ',');
      g_string_append_c (out, '{');
      for (int j = 0; j < size && ids[(gsize) g * (gsize) size + (gsize) j] >= 0; j++)
        {
          if (j > 0)
            g_string_append_c (out, ',');
          g_string_append_printf (out, "%" G_GINT64_FORMAT, ids[(gsize) g * (gsize) size + (gsize) j]);
        }
      g_string_append_c (out, '}');
    }
  g_string_append_c (out, '}');
}

/* One window field over all dims, "3x3" or "1_1x0_0". */
static void
window_field (GString *out, const PsWindow *w, const char *key, int which, int64_t dflt)
{
  gboolean all_default = TRUE;
  for (int i = 0; i < w->n; i++)
    {
      const PsWindowDim *d = &w->dims[i];
      int64_t v = which == 0 ? d->size : which == 1 ? d->stride : which == 3 ? d->base_dilation
                  : which == 4 ? d->window_dilation : which == 5 ? (int64_t) d->reversal : 0;
      if (which == 2 ? (d->pad_lo != 0 || d->pad_hi != 0) : v != dflt)
        all_default = FALSE;
    }
  if (all_default && which != 0)
    return;
  g_string_append_printf (out, "%s%s=", which == 0 ? "" : " ", key);
  for (int i = 0; i < w->n; i++)
    {
      const PsWindowDim *d = &w->dims[i];
      if (i > 0)
        g_string_append_c (out, 'x');
      switch (which)
        {
        case 0: g_string_append_printf (out, "%" G_GINT64_FORMAT, d->size); break;
        case 1: g_string_append_printf (out, "%" G_GINT64_FORMAT, d->stride); break;
        case 2: g_string_append_printf (out, "%" G_GINT64_FORMAT "_%" G_GINT64_FORMAT, d->pad_lo, d->pad_hi); break;
        case 3: g_string_append_printf (out, "%" G_GINT64_FORMAT, d->base_dilation); break;
        case 4: g_string_append_printf (out, "%" G_GINT64_FORMAT, d->window_dilation); break;
        default: g_string_append_c (out, d->reversal ? '1' : '0'); break;
        }
    }
}

static void
append_window (GString *out, const PsWindow *w)
{
  g_string_append (out, ", window={");
  window_field (out, w, "size", 0, 0);
  window_field (out, w, "stride", 1, 1);
  window_field (out, w, "pad", 2, 0);
  window_field (out, w, "lhs_dilate", 3, 1);
  window_field (out, w, "rhs_dilate", 4, 1);
  window_field (out, w, "rhs_reversal", 5, 0);
  g_string_append_c (out, '}');
}

static void
comp_ref (GString *out, const char *key, const PsComputation *c)
{
  g_string_append_printf (out, ", %s=%%%s", key, c ? c->name : "?");
}

static void
comp_list (GString *out, const char *key, const PsInstr *in)
{
  g_string_append_printf (out, ", %s={", key);
  for (int i = 0; i < in->n_called; i++)
    g_string_append_printf (out, "%s%%%s", i > 0 ? ", " : "", in->called[i] ? in->called[i]->name : "?");
  g_string_append_c (out, '}');
}

static gboolean
always_has_dimensions (PsOpcode op)
{
  return op == PS_OP_BROADCAST || op == PS_OP_REDUCE || op == PS_OP_TRANSPOSE || op == PS_OP_CONCATENATE
         || op == PS_OP_REVERSE || op == PS_OP_ALL_GATHER || op == PS_OP_REDUCE_SCATTER
         || op == PS_OP_ALL_GATHER_START;
}

static void
append_called (GString *out, const PsInstr *in)
{
  if (in->n_called == 0)
    return;
  switch (in->opcode)
    {
    case PS_OP_WHILE:
      comp_ref (out, "condition", in->called[0]);
      if (in->n_called > 1)
        comp_ref (out, "body", in->called[1]);
      break;
    case PS_OP_SELECT_AND_SCATTER:
      comp_ref (out, "select", in->called[0]);
      if (in->n_called > 1)
        comp_ref (out, "scatter", in->called[1]);
      break;
    case PS_OP_CONDITIONAL:
      if (in->branches_as_list || in->n_called != 2)
        comp_list (out, "branch_computations", in);
      else
        {
          comp_ref (out, "true_computation", in->called[0]);
          comp_ref (out, "false_computation", in->called[1]);
        }
      break;
    case PS_OP_CUSTOM_CALL:
      comp_list (out, "called_computations", in);
      break;
    case PS_OP_FUSION: case PS_OP_ASYNC_START: case PS_OP_ASYNC_UPDATE: case PS_OP_ASYNC_DONE:
      comp_ref (out, "calls", in->called[0]);
      break;
    default:
      comp_ref (out, "to_apply", in->called[0]);
      break;
    }
}

static const char *
precision_name (PsPrecision p)
{
  return p == PS_PRECISION_HIGHEST ? "HIGHEST" : p == PS_PRECISION_HIGH ? "HIGH" : "DEFAULT";
}

static void
append_attrs (GString *out, const PsInstr *in, const PsHloPrintOptions *o)
{
  PsOpcode op = in->opcode;
  if (in->dimensions.n > 0 || always_has_dimensions (op))
    attr_ints (out, "dimensions", &in->dimensions);
  if (in->dot.lhs_batch.n > 0)
    attr_ints (out, "lhs_batch_dims", &in->dot.lhs_batch);
  if (in->dot.lhs_contracting.n > 0)
    attr_ints (out, "lhs_contracting_dims", &in->dot.lhs_contracting);
  if (in->dot.rhs_batch.n > 0)
    attr_ints (out, "rhs_batch_dims", &in->dot.rhs_batch);
  if (in->dot.rhs_contracting.n > 0)
    attr_ints (out, "rhs_contracting_dims", &in->dot.rhs_contracting);
  if (in->window.n > 0)
    append_window (out, &in->window);
  if (in->conv.present)
    {
      g_string_append (out, ", dim_labels=");
      hl_conv_dims_append (out, &in->conv);
    }
  if (in->feature_group_count != 0)
    g_string_append_printf (out, ", feature_group_count=%" G_GINT64_FORMAT, in->feature_group_count);
  if (in->batch_group_count != 0)
    g_string_append_printf (out, ", batch_group_count=%" G_GINT64_FORMAT, in->batch_group_count);
  if (op == PS_OP_SLICE || in->slice_starts.n > 0)
    {
      g_string_append (out, ", slice={");
      for (int i = 0; i < in->slice_starts.n; i++)
        {
          g_string_append_printf (out, "%s[%" G_GINT64_FORMAT ":%" G_GINT64_FORMAT, i > 0 ? ", " : "",
                                  in->slice_starts.v[i], in->slice_limits.v[i]);
          if (in->slice_strides.n > i && in->slice_strides.v[i] != 1)
            g_string_append_printf (out, ":%" G_GINT64_FORMAT, in->slice_strides.v[i]);
          g_string_append_c (out, ']');
        }
      g_string_append_c (out, '}');
    }
  if (op == PS_OP_DYNAMIC_SLICE || in->dynamic_slice_sizes.n > 0)
    attr_ints (out, "dynamic_slice_sizes", &in->dynamic_slice_sizes);
  if (in->n_pad > 0)
    {
      g_string_append (out, ", padding=");
      for (int i = 0; i < in->n_pad; i++)
        {
          const PsPadDim *p = &in->padding[i];
          g_string_append_printf (out, "%s%" G_GINT64_FORMAT "_%" G_GINT64_FORMAT, i > 0 ? "x" : "", p->lo, p->hi);
          if (p->interior != 0)
            g_string_append_printf (out, "_%" G_GINT64_FORMAT, p->interior);
        }
    }
  if (op == PS_OP_GATHER)
    {
      const PsGatherDims *g = &in->gather;
      attr_ints (out, "offset_dims", &g->offset_dims);
      attr_ints (out, "collapsed_slice_dims", &g->collapsed_slice_dims);
      attr_ints (out, "start_index_map", &g->start_index_map);
      if (g->operand_batching_dims.n > 0)
        attr_ints (out, "operand_batching_dims", &g->operand_batching_dims);
      if (g->start_indices_batching_dims.n > 0)
        attr_ints (out, "start_indices_batching_dims", &g->start_indices_batching_dims);
      g_string_append_printf (out, ", index_vector_dim=%" G_GINT64_FORMAT, g->index_vector_dim);
      attr_ints (out, "slice_sizes", &g->slice_sizes);
      if (g->indices_are_sorted)
        g_string_append (out, ", indices_are_sorted=true");
    }
  if (op == PS_OP_SCATTER)
    {
      const PsScatterDims *s = &in->scatter;
      attr_ints (out, "update_window_dims", &s->update_window_dims);
      attr_ints (out, "inserted_window_dims", &s->inserted_window_dims);
      attr_ints (out, "scatter_dims_to_operand_dims", &s->scatter_dims_to_operand_dims);
      if (s->input_batching_dims.n > 0)
        attr_ints (out, "input_batching_dims", &s->input_batching_dims);
      if (s->scatter_indices_batching_dims.n > 0)
        attr_ints (out, "scatter_indices_batching_dims", &s->scatter_indices_batching_dims);
      g_string_append_printf (out, ", index_vector_dim=%" G_GINT64_FORMAT, s->index_vector_dim);
      if (s->indices_are_sorted)
        g_string_append (out, ", indices_are_sorted=true");
      if (s->unique_indices)
        g_string_append (out, ", unique_indices=true");
    }
  if (op == PS_OP_GET_TUPLE_ELEMENT)
    g_string_append_printf (out, ", index=%" G_GINT64_FORMAT, in->tuple_index);
  if (op == PS_OP_IOTA)
    g_string_append_printf (out, ", iota_dimension=%" G_GINT64_FORMAT, in->iota_dimension);
  if (op == PS_OP_COMPARE)
    {
      static const char *const dirs[] = { "?", "EQ", "NE", "LT", "LE", "GT", "GE" };
      g_string_append_printf (out, ", direction=%s", dirs[in->comparison <= PS_CMP_GE ? in->comparison : 0]);
      if (in->compare_type)
        g_string_append_printf (out, ", type=%s", in->compare_type);
    }
  if (op == PS_OP_BATCH_NORM_TRAINING || op == PS_OP_BATCH_NORM_INFERENCE || op == PS_OP_BATCH_NORM_GRAD)
    {
      /* XLA's order: epsilon, then feature_index. */
      g_string_append (out, ", epsilon=");
      PsLiteral eps = { PS_F32, 1, (void *) &in->epsilon };
      hl_literal_append_elem (out, &eps, 0);
      g_string_append_printf (out, ", feature_index=%" G_GINT64_FORMAT, in->feature_index);
    }
  if (op == PS_OP_SORT && in->is_stable)
    g_string_append (out, ", is_stable=true");
  if (op == PS_OP_FUSION)
    g_string_append_printf (out, ", kind=%s", ps_fusion_kind_name (in->fusion_kind));
  append_called (out, in);
  if (in->custom_call_target)
    g_string_append_printf (out, ", custom_call_target=\"%s\"", in->custom_call_target);
  if (in->custom_call_has_side_effect)
    g_string_append (out, ", custom_call_has_side_effect=true");
  if (in->has_precision)
    g_string_append_printf (out, ", operand_precision={%s,%s}", precision_name (in->precision[0]),
                            precision_name (in->precision[1]));
  if (in->channel_id != 0)
    g_string_append_printf (out, ", channel_id=%" G_GINT64_FORMAT, in->channel_id);
  if (in->has_replica_groups)
    {
      g_string_append (out, ", replica_groups=");
      append_groups (out, in->replica_groups, in->n_groups, in->group_size);
    }
  if (in->use_global_device_ids)
    g_string_append (out, ", use_global_device_ids=true");
  if (op == PS_OP_COLLECTIVE_PERMUTE || in->n_pairs > 0)
    {
      g_string_append (out, ", source_target_pairs=");
      append_groups (out, in->source_target_pairs, in->n_pairs, 2);
    }
  if (in->extra_attrs)
    for (guint i = 0; i < in->extra_attrs->len; i++)
      {
        const PsRawAttr *a = g_ptr_array_index (in->extra_attrs, i);
        g_string_append_printf (out, ", %s=%s", a->key, a->value);
      }
  if (in->sharding && !o->omit_shardings)
    {
      g_string_append (out, ", sharding=");
      ps_sharding_append (out, in->sharding, !o->omit_metadata);
    }
  if (in->metadata && !o->omit_metadata)
    g_string_append_printf (out, ", metadata={%s}", in->metadata);
  if (in->backend_config)
    g_string_append_printf (out, ", backend_config=\"%s\"", in->backend_config);
}

void
ps_hlo_append_instr (GString *out, const PsInstr *in, const PsHloPrintOptions *opts)
{
  const PsHloPrintOptions *o = opts ? opts : &canonical;
  g_string_append_printf (out, "%%%s = ", in->name);
  if (in->shape)
    ps_shape_append (out, in->shape, !o->omit_layouts);
  g_string_append_printf (out, " %s(", ps_opcode_name (in->opcode));
  if (in->opcode == PS_OP_PARAMETER)
    g_string_append_printf (out, "%" G_GINT64_FORMAT, in->parameter_number);
  else if (in->opcode == PS_OP_CONSTANT)
    hl_literal_append (out, in->literal, in->shape);
  else
    for (int i = 0; i < in->n_operands; i++)
      g_string_append_printf (out, "%s%%%s", i > 0 ? ", " : "", in->operands[i] ? in->operands[i]->name : "?");
  g_string_append_c (out, ')');
  append_attrs (out, in, o);
}

char *
ps_hlo_instr_to_string (const PsInstr *in, const PsHloPrintOptions *opts)
{
  GString *out = g_string_new (NULL);
  ps_hlo_append_instr (out, in, opts);
  return g_string_free (out, FALSE);
}

static void
append_bools (GString *out, const char *key, int n, const gboolean *v)
{
  if (n == 0)
    return;
  g_string_append_printf (out, ", %s={", key);
  for (int i = 0; i < n; i++)
    g_string_append_printf (out, "%s%s", i > 0 ? "," : "", v[i] ? "true" : "false");
  g_string_append_c (out, '}');
}

static void
append_computation (GString *out, const PsComputation *c, const PsHloPrintOptions *o)
{
  if (c->is_entry)
    g_string_append (out, "ENTRY ");
  g_string_append_printf (out, "%%%s (", c->name);
  for (guint i = 0; i < c->params->len; i++)
    {
      const PsInstr *p = g_ptr_array_index (c->params, i);
      g_string_append_printf (out, "%s%s: ", i > 0 ? ", " : "", p ? p->name : "?");
      if (p && p->shape)
        ps_shape_append (out, p->shape, !o->omit_layouts);
    }
  g_string_append (out, ") -> ");
  if (c->root && c->root->shape)
    ps_shape_append (out, c->root->shape, !o->omit_layouts);
  g_string_append (out, " {\n");
  for (guint i = 0; i < c->instrs->len; i++)
    {
      const PsInstr *in = g_ptr_array_index (c->instrs, i);
      g_string_append (out, in == c->root ? "  ROOT " : "  ");
      ps_hlo_append_instr (out, in, o);
      g_string_append_c (out, '\n');
    }
  g_string_append_c (out, '}');
  if (c->execution_thread)
    g_string_append_printf (out, ", execution_thread=\"%s\"", c->execution_thread);
  g_string_append_c (out, '\n');
}

char *
ps_hlo_print (const PsModule *m, const PsHloPrintOptions *opts)
{
  const PsHloPrintOptions *o = opts ? opts : &canonical;
  GString *out = g_string_new (NULL);
  g_string_append_printf (out, "HloModule %s", m->name);
  if (m->n_aliases > 0)
    {
      /* XLA's HloInputOutputAliasConfig::ToShortString, inside "{ ... }" */
      g_string_append (out, ", input_output_alias={ ");
      for (int i = 0; i < m->n_aliases; i++)
        {
          const PsAlias *a = &m->aliases[i];
          if (i > 0)
            g_string_append (out, ", ");
          append_ints (out, &a->output_index);
          g_string_append_printf (out, ": (%" G_GINT64_FORMAT ", ", a->parameter);
          append_ints (out, &a->param_index);
          g_string_append_printf (out, ", %s)", a->must_alias ? "must-alias" : "may-alias");
        }
      g_string_append (out, " }");
    }
  if (m->entry_layout)
    g_string_append_printf (out, ", entry_computation_layout=%s", m->entry_layout);
  if (m->num_partitions != 0)
    g_string_append_printf (out, ", num_partitions=%" G_GINT64_FORMAT, m->num_partitions);
  append_bools (out, "allow_spmd_sharding_propagation_to_output", m->n_prop_to_output, m->prop_to_output);
  append_bools (out, "allow_spmd_sharding_propagation_to_parameters", m->n_prop_to_params, m->prop_to_params);
  if (m->extra_attrs)
    for (guint i = 0; i < m->extra_attrs->len; i++)
      {
        const PsRawAttr *a = g_ptr_array_index (m->extra_attrs, i);
        g_string_append_printf (out, ", %s=%s", a->key, a->value);
      }
  g_string_append_c (out, '\n');
  for (guint k = 0; k < m->computations->len; k++)
    {
      g_string_append_c (out, '\n');
      append_computation (out, g_ptr_array_index (m->computations, k), o);
    }
  return g_string_free (out, FALSE);
}
