/* Collectives as algorithms: each collective over its replica groups becomes,
 * per group, a sequence of phases of point-to-point transfers between cores,
 * which sim/ then runs on the SimGrid platform (ps_coll_run_*), where
 * concurrent transfers share link bandwidth.
 *
 * Algorithms (doc/collectives.md gives each with its closed-form cost and
 * its source); PsCollAlgorithm selects one:
 *  - PS_COLL_TORUS2D (default): a group whose chips all lie in one row or
 *    one column of the slice (a "1-D" group, including both cores of one
 *    chip) runs one bidirectional ring through its cores in the order the
 *    replica group lists them, as XLA's TPU runtime does (Lingvo's
 *    GetNonPod2dMesh permutes the device order to shape that ring). A group
 *    whose chips form a product set Xs x Ys over both dimensions, with the
 *    same number of member cores on every chip, runs the 2-D torus
 *    algorithm (Ying et al. 2018) with all links of both dimensions busy at
 *    once: the buffer is split in halves, one reduce-scatters along x then
 *    y, the other along y then x, concurrently (Google's ParaGraph
 *    "torus-2d"; the JAX scaling book's multi-axis collectives); both cores
 *    of a chip are members of the first stage's rings. All-gather is the
 *    mirror image, all-reduce is reduce-scatter, all-reduce of the second
 *    stage, all-gather.
 *  - PS_COLL_DIM_BY_DIM (podsim's algorithm until 2026-12): product groups
 *    use an on-chip step first and last and one torus dimension at a time:
 *    all-reduce = on-chip reduce-scatter, ring reduce-scatter along x, ring
 *    all-reduce along y, ring all-gather along x, on-chip all-gather.
 *  - PS_COLL_RING: every group runs one bidirectional ring through its cores
 *    in the listed order.
 *  A ring along a dimension follows the coordinates: naturally when the
 *  dimension has wrap links and the group covers it, else zig-zagging as
 *  Lingvo's ZigzagOrderOnDeviceMesh does (no step longer than two hops); with both cores
 *  of each chip in the ring it interleaves them on a wrapped dimension
 *  (c0, c1 of each chip in turn) and folds them on a mesh (core 0 out along
 *  the dimension, core 1 back), as Lingvo's GetNonPod2dMesh orders devices.
 *  Groups of other shapes run the listed-order ring under every algorithm.
 *  - all-to-all (every algorithm but the last two): one-shot direct transfers
 *    between every pair of members, routed in dimension order as on a mesh,
 *    never through a wrap link, so its time grows as sqrt(devices) up to the
 *    full pod as GShard (Lepikhin et al. 2020) reports for TPU v3.
 *  - PS_COLL_TORUS2D_WRAP_A2A: torus2d, but the all-to-all takes the shorter
 *    way round through the wrap links where the slice has them (podsim's
 *    all-to-all until 2026-12; teaching: what the wrap links could give).
 *  - PS_COLL_TORUS2D_STAGED_A2A: torus2d, but the all-to-all of a product
 *    group runs in two stages, a direct exchange within every row of the
 *    group, then within every column, each routed straight (teaching: what
 *    exchanging one dimension at a time costs, as Mesh TensorFlow's
 *    two-level MoE does with one all-to-all per mesh axis; no source says
 *    the v3 runtime staged its all-to-all, doc/collectives.md).
 *  - collective-permute: one direct transfer per source -> target pair.
 *
 * A pipelined ring phase of S steps is not simulated step by step (far too
 * slow at 2048 cores): each ring edge becomes ONE transfer carrying the bytes
 * of all its steps, and the phase adds S x the per-step latency (the largest
 * route latency of a step) analytically. SimGrid's links carry no latency:
 * CM02 shares a link in inverse proportion to each flow's route latency
 * (TCP's RTT unfairness), which an ICI router does not do. An
 * all-to-all is routed here, pair by pair, and each directed link then gets
 * one transfer carrying its total load, so a 2048-core all-to-all is a few
 * thousand transfers, not four million.
 *
 * `bytes` is the per-device buffer: the operand of all-reduce, all-to-all and
 * collective-permute, the result of all-gather, the operand of
 * reduce-scatter (the larger of operand and result).
 *
 * Ownership: plans are transfer full (ps_coll_plan_free); they borrow the
 * PsPlatform, which must outlive them.
 */
#ifndef PS_SIM_COLLECTIVES_H
#define PS_SIM_COLLECTIVES_H

#include <glib.h>
#include "common/params.h"

#include "sim/sgnet.h"
#include "topology/platform.h"
#include "traces/trace.h"

G_BEGIN_DECLS

typedef enum {
  PS_COLL_TORUS2D = 0,   /* default */
  PS_COLL_DIM_BY_DIM,
  PS_COLL_RING,
  PS_COLL_TORUS2D_WRAP_A2A,  /* torus2d, all-to-all through the wrap links (until 2026-12) */
  PS_COLL_TORUS2D_STAGED_A2A, /* torus2d, all-to-all staged: along x, then along y */
  PS_COLL_ALGORITHM_COUNT
} PsCollAlgorithm;

/* The option choosing the algorithms ([options] collectives;
 * common/params.h): its choices are this module's names. */
extern const PsParamSpec ps_coll_param_algorithm;

/* "torus2d", "dim-by-dim", "ring", "torus2d-wrap-a2a", "torus2d-staged-a2a".
 * transfer none. */
const char *ps_coll_algorithm_name (PsCollAlgorithm alg);
/* The name -> algorithm; a PS_ERROR_OPTION error naming `option` and the
 * known names otherwise. */
gboolean ps_coll_algorithm_parse (const char *name, const char *option, PsCollAlgorithm *out,
                                  GError **error);

typedef struct {
  int src_core, dst_core;
  double bytes;
} PsFlow;

typedef struct {
  const char *label;      /* "onchip-rs", "ring-x-rs", "2d-rs-1", "ring", "direct", ... */
  GArray *flows;          /* PsFlow */
  double latency_s;       /* steps x per-step latency, added after the transfers */
} PsPhase;

typedef struct {
  GPtrArray *phases;      /* PsPhase*, run one after the other */
  int first_core;         /* where its SimGrid actor lives */
} PsGroupPlan;

typedef struct {
  const PsPlatform *platform;
  PsCollAlgorithm algorithm;
  PsTraceCollectiveKind kind;
  double bytes;
  int n_groups;
  int group_size;         /* members per group (permute: pairs) */
  int *group_of_core;     /* per global core: group index or -1 */
  PsGroupPlan *groups;
  double launch_s;        /* hardware collective launch overhead */
  double *link_bytes;     /* per platform link id: bytes the plan moves */
  /* No link is ever shared: every link carries transfers of one group
   * only, and at most one at a time. Alone on the network, each transfer
   * then runs at its route's slowest link, which ps_coll_simulate() computes
   * without running SimGrid (the same numbers); `use_network` forces the
   * SimGrid run (tests). */
  gboolean exclusive_links;
  gboolean use_network;
  /* Groups that share links, transitively: per group a component index;
   * different components never share a link, so ps_coll_simulate() runs
   * each component on its own (SimGrid finishes a transfer in time linear
   * in the number in flight: smaller runs are much faster). */
  int *component;
  int n_components;
  /* Per group: the transfers of its largest phase, those it can have in
   * flight at once (the choice between host-to-host comms and mailbox
   * puts in ps_coll_simulate() depends on them). */
  int *group_flows;
} PsCollPlan;

/* Plans a collective over groups of cores with algorithm `alg`: `cores`
 * holds n_groups x group_size global core ids, group-major. A core in two
 * groups is a PS_ERROR_INVALID error. Not for collective-permute.
 * transfer full. */
PsCollPlan *ps_coll_plan_new (const PsPlatform *p, PsCollAlgorithm alg,
                              PsTraceCollectiveKind kind, double bytes,
                              const int *cores, int n_groups, int group_size, double launch_s,
                              GError **error);
/* A collective-permute: pairs holds n_pairs (source, target) core ids. All
 * pairs form one group. transfer full. */
PsCollPlan *ps_coll_plan_new_permute (const PsPlatform *p, double bytes, const int *pairs,
                                      int n_pairs, double launch_s, GError **error);
/* The plan of a trace's collective event, its devices placed on cores by
 * core_of_device (indexed by device id), with the bytes the event moves
 * (the larger of its input and output). transfer full. */
PsCollPlan *ps_coll_plan_for_trace (const PsPlatform *p, PsCollAlgorithm alg,
                                    const PsTraceHeader *h, const PsTraceCollective *c,
                                    const int *core_of_device, double launch_s, GError **error);
/* What two trace collectives share exactly when they make the same plan on
 * one placement: kind, bytes and groups (or pairs). transfer full. */
char *ps_coll_trace_key (const PsTraceCollective *c);
void ps_coll_plan_free (PsCollPlan *plan);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsCollPlan, ps_coll_plan_free)

/* Runs one group of a plan from inside an actor: launch overhead, then every
 * phase (start its transfers, wait for all, add its analytic latency). */
void ps_coll_run_group (PsSgNet *net, const PsCollPlan *plan, int group);

/* Simulates several collectives started together on an otherwise idle
 * network (one actor per group) and returns, for each plan, a newly
 * allocated array of per-group durations, plus the time until all finished.
 * Must be called from outside any actor (it runs the engine). One plan
 * with exclusive_links is computed directly (see PsCollPlan). */
double ps_coll_simulate (PsSgNet *net, PsCollPlan *const *plans, int n_plans,
                         double **group_durations_out);
/* Same, with group g of plan i starting offsets[i][g] seconds after the
 * others' common origin (offsets or offsets[i] NULL: 0); each duration is
 * measured from that group's own start. */
double ps_coll_simulate_at (PsSgNet *net, PsCollPlan *const *plans, int n_plans,
                            const double *const *offsets, double **group_durations_out);

/* A closed-form time of one plan alone on an idle network, without SimGrid
 * (so any number of them can be costed in one process): exactly what
 * ps_coll_simulate gives when the plan's links are exclusive; otherwise
 * the larger of two lower bounds, the slowest group with every transfer at
 * its route's slowest link as if alone, and the launch, the busiest link's
 * bytes at its bandwidth and the phases' latencies (podsim autoshard's
 * cheap cost, driver/autoshard.h). */
double ps_coll_plan_time_bound (const PsCollPlan *plan);

/* A group that starts when another group of the same simulation ends:
 * plan (an index below its own plan's; -1: not chained, at its offset)
 * and group of that one, and the time in between. */
typedef struct {
  int plan, group;
  double delay_s;
} PsCollChain;

/* Same, with chain[i][g] (chain or chain[i] NULL: none) making group g of
 * plan i start delay_s after the end of the group it names instead of at
 * its offset, so a collective that follows another's completion in the
 * program starts when the contended one really ends. With starts_out,
 * starts_out[i] receives each group's start after the common origin
 * (newly allocated). Chains need at least two plans (one plan's
 * components run separately and are never chained). */
double ps_coll_simulate_chained (PsSgNet *net, PsCollPlan *const *plans, int n_plans,
                                 const double *const *offsets, const PsCollChain *const *chain,
                                 double **group_durations_out, double **starts_out);

/* Algorithm bandwidth (bytes / time) and bus bandwidth (NCCL's convention:
 * algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather, reduce-scatter
 * and all-to-all, x 1 for collective-permute), n = group size. */
void ps_coll_bandwidths (PsTraceCollectiveKind kind, double bytes, int group_size,
                         double time_s, double *algbw, double *busbw);

/* "all-reduce" ... -> kind; FALSE on an unknown name. */
gboolean ps_coll_kind_parse (const char *name, PsTraceCollectiveKind *out);

G_END_DECLS

#endif
