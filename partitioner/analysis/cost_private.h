/* Internals of the cost analysis (cost.h) that its multi-output fusion
 * pass (cost_mof.c) shares with cost.c; no other module includes
 * this. */
#ifndef PS_PARTITIONER_COST_PRIVATE_H
#define PS_PARTITIONER_COST_PRIVATE_H

#include "partitioner/analysis/cost.h"

G_BEGIN_DECLS

struct PsCostAnalysis {
  const PsModule *module;
  PsCostOptions opts;
  GHashTable *costs;       /* PsInstr* -> PsCost* (owned) */
  GHashTable *members;     /* root PsInstr* -> GPtrArray of members (owned) */
  GHashTable *totals;      /* PsComputation* -> PsCostCounts* (owned) */
  gboolean prefused;       /* the module came fused (fusion instructions) */
};

static inline PsCost *
ps_cost_lookup (PsCostAnalysis *a, const PsInstr *in)
{
  return g_hash_table_lookup (a->costs, in);
}

/* XLA mode, after the producer-consumer rules of cost.c made their
 * fusions (members and roots set): merges them into multi-output fusions
 * (cost.h, rules 6-8). `order` is comp's post order. The caller then sets
 * the roots again and calls ps_cost_mark_outputs. */
void ps_cost_multi_output_fusion (PsCostAnalysis *a, const PsComputation *comp, GPtrArray *order);
/* Sets PsCost.output on the members of comp's fusions read outside them. */
void ps_cost_mark_outputs (PsCostAnalysis *a, const PsComputation *comp, GPtrArray *order);

G_END_DECLS

#endif
