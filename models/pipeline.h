/* Pipelining as GSPMD expresses it: a stack of identical layers split into
 * K stages, run over M microbatches by one loop (the GSPMD paper, section
 * 3.3, and Lingvo/Praxis' LayerwiseShardablePipelined).
 *
 * A stage runs L/K layers; layer j of every stage has its own weights
 * stacked over the stages, [K, ...] (stage k's row is layer k L/K + j),
 * with the stage dim split over one mesh axis. One stage's function (its
 * L/K layers, as the layer function writes them for one device) is
 * vectorized over the stage dim (partitioner/builder/vmap.h)
 * and run by a loop of M + K - 1 iterations over a state buffer
 * [K, microbatch...]: iteration i shifts the buffer by one stage (stage k
 * takes what stage k - 1 computed in iteration i - 1; stage 0 takes
 * microbatch i), runs every stage at once, and stage K - 1's output is
 * microbatch i - K + 1's result. The shift is written as the pad of a slice
 * along the stage dim; annotating that dim as split makes the partitioner
 * lower it to a CollectivePermute between neighbouring stages. The K - 1
 * extra iterations are the bubble: stage k computes on no microbatch in the
 * first k and the last K - 1 - k of them.
 *
 * Backward: the loop's reverse (partitioner/builder/scan.h); with remat
 * only each iteration's state buffer (the stage inputs) is saved and a
 * stage's forward is recomputed before its backward. Weight gradients are
 * summed over the iterations: gradient accumulation over microbatches.
 *
 * Ownership: PsPipelineRun is transfer full; instructions belong to the
 * net's computation.
 */
#ifndef PS_MODELS_PIPELINE_H
#define PS_MODELS_PIPELINE_H

#include <glib.h>
#include <stdint.h>

#include "models/layers.h"
#include "models/net.h"
#include "traces/trace.h"

G_BEGIN_DECLS

typedef struct {
  int stages;             /* K */
  int microbatches;       /* M */
  int layers_per_stage;   /* L / K */
  int stage_axis;         /* the net's mesh axis that splits the stage dim */
  char stage_letter;      /* the plan letter of the stage dim (mapped to stage_axis) */
  const char *act_letters;/* the layer's activation letters, e.g. "bsm" */
  gboolean remat;
  /* The layers report auxiliary loss terms (ps_net_layer_aux_loss: an MoE
   * layer's load balancing): each stage's terms are summed over the
   * iterations where the stage holds a microbatch (not the bubble's) into
   * ps_pipeline_aux_loss. FALSE: a layer reporting one is a bug. */
  gboolean aux_loss;
} PsPipeline;

typedef struct PsPipelineRun PsPipelineRun;

/* Weights of a pipelined stack: from this call on (until
 * ps_net_stack_weights (net, 0)), weights are [K, ...], split over the
 * stage axis; make one set per layer of a stage. (One stacked set
 * [K, L/K, ...] would make each iteration's weight gradient a sum of
 * pads, one per layer, each the size of all the stage's weights.) */
void ps_pipeline_stack_weights (PsNet *net, const PsPipeline *p);

/* The forward loop over `inputs` [M, microbatch...] (microbatch m's layer
 * input), `layers` the L/K layers of a stage, in order, over weights made
 * under ps_pipeline_stack_weights (each with a rebind function). Returns
 * the outputs [M, microbatch...]; *run keeps what the backward needs. */
PsInstr *ps_pipeline_forward (PsNet *net, const PsPipeline *p, const PsLayer *layers,
                              PsInstr *inputs, PsPipelineRun **run, GError **error);
/* With p->aux_loss: the sum of every layer's auxiliary term over the
 * stages and microbatches (f32 []); NULL otherwise. transfer none. */
PsInstr *ps_pipeline_aux_loss (const PsPipelineRun *run);
/* The backward loop: d_outputs is the gradient of the outputs, d_aux (an
 * f32 scalar; NULL without aux_loss) the loss's weight of the aux sum; the
 * stage weights' gradients are accumulated in the net and *d_inputs gets
 * the inputs' gradient. Frees run. */
gboolean ps_pipeline_backward (PsNet *net, PsPipelineRun *run, PsInstr *d_outputs, PsInstr *d_aux,
                               PsInstr **d_inputs, GError **error);
void ps_pipeline_run_free (PsPipelineRun *run);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsPipelineRun, ps_pipeline_run_free)

/* Device ids at each position of the mesh [K, rest...] (row-major) that
 * put neighbouring stages on neighbouring chips of a chips_x x chips_y
 * slice with `cores` cores per chip when the device order allows it: the
 * stage index is interleaved along x (stage k on chip columns x = k, k + K,
 * ...), or along y; when neither dimension is a multiple of K, the stages
 * follow a snake through the chips (rows of x, y reversed on odd rows, a
 * chip's cores in turn), so a shift is one hop or less when a stage fits
 * on one chip. K must divide the device count. transfer full. */
int64_t *ps_pipeline_mesh_devices (int stages, int chips_x, int chips_y, int cores);
/* The devices of a pipelined program of n devices ([stages, rest...]):
 * ps_pipeline_mesh_devices when `physical` (chips x, chips y, cores per
 * chip; may be NULL) has n cores, else 0 .. n - 1. transfer full. */
int64_t *ps_pipeline_program_devices (int stages, int64_t n, const int64_t *physical);
/* A model's trace mesh (models/family.h PsModelInfo.mesh) for such a
 * program: rank dims and the device list ids. */
void ps_pipeline_trace_mesh (PsTraceMesh *mesh, int rank, const int64_t *dims, const int64_t *ids);

/* Outside the loop (embedding, head, loss) the stage axis has nothing to
 * do: these work on the microbatches [M, B/M, ...] with the microbatch dim
 * split over the stage axis when K divides M (stage_letter in front of
 * act_letters), else the sequence dim ('s' of act_letters) when K divides
 * it, else neither ("u" + act_letters). ps_pipeline_enter annotates
 * x [M, B/M, ...] so and returns the loop's input, [M, B/M, ...] with the
 * microbatch dim replicated (an all-gather over the stage axis);
 * ps_pipeline_leave takes the outputs of ps_pipeline_forward back to the
 * outer layout (a slice on each device). */
PsInstr *ps_pipeline_enter (PsNet *net, const PsPipeline *p, PsInstr *x);
PsInstr *ps_pipeline_leave (PsNet *net, const PsPipeline *p, PsInstr *outputs);

/* x [B, ...] as [m, B/m, ...] (microbatch u is rows u B/m .. (u+1) B/m - 1,
 * as ps_net_microbatch slices them). */
PsInstr *ps_pipeline_split_batch (PsNet *net, PsInstr *x, int64_t m);

G_END_DECLS

#endif
