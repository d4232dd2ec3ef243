/* Compute time by op_name: see op_times.h. */
#include "config.h"

#include "driver/op_times.h"

#include <string.h>

#include "sim/compute.h"

/* The value of op_name="..." in metadata text, or NULL. transfer full. */
static char *
op_name_of (const char *metadata)
{
  if (metadata == NULL)
    return NULL;
  const char *p = strstr (metadata, "op_name=\"");
  if (p == NULL)
    return NULL;
  p += strlen ("op_name=\"");
  const char *end = strchr (p, '"');
  return end ? g_strndup (p, (gsize) (end - p)) : NULL;
}

GHashTable *
ps_op_names_table (const PsModule *m)
{
  g_return_val_if_fail (m != NULL, NULL);
  GHashTable *t = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  for (guint c = 0; c < m->computations->len; c++)
    {
      const PsComputation *comp = m->computations->pdata[c];
      for (guint i = 0; i < comp->instrs->len; i++)
        {
          const PsInstr *in = comp->instrs->pdata[i];
          char *op = op_name_of (in->metadata);
          if (op)
            g_hash_table_replace (t, g_strdup (in->name), op);
        }
    }
  return t;
}

double
ps_op_times_compute (const PsTrace *trace, const PsHardware *hw, GHashTable *names,
                     const char *const *prefixes)
{
  g_return_val_if_fail (trace != NULL && hw != NULL && names != NULL && prefixes != NULL, 0);
  double total = 0;
  guint64 n = ps_trace_n_events (trace);
  /* An event inside loops runs the product of their trip counts. */
  double mult[PS_TRACE_MAX_LOOP_DEPTH + 1] = { 1 };
  int depth = 0;
  for (guint64 i = 0; i < n; i++)
    {
      const PsTraceEvent *ev = ps_trace_get_event (trace, i);
      if (ev->kind == PS_TRACE_EVENT_LOOP && depth < PS_TRACE_MAX_LOOP_DEPTH)
        {
          depth++;
          mult[depth] = mult[depth - 1] * (double) ev->trips;
          continue;
        }
      if (ev->kind == PS_TRACE_EVENT_END_LOOP && depth > 0)
        {
          depth--;
          continue;
        }
      if (ev->kind != PS_TRACE_EVENT_COMPUTE || ev->name == NULL)
        continue;
      const char *op = g_hash_table_lookup (names, ev->name);
      if (op == NULL)
        continue;
      gboolean match = FALSE;
      for (int k = 0; prefixes[k] && !match; k++)
        match = g_str_has_prefix (op, prefixes[k]);
      if (!match)
        continue;
      PsComputeOp cop = ps_compute_op_from_trace (&ev->compute);
      total += mult[depth] * ps_compute_op (hw, &cop).time_s;
    }
  return total;
}
