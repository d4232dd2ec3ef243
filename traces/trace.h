/* The step trace: what one training step does on every device of an SPMD
 * program, as the compiler side hands it to the simulator.
 *
 * A trace is ONE event list that every device runs (SPMD), plus the logical
 * device mesh and its device order, so that its size does not grow with the
 * device count. Events are fused compute ops (FLOPs, HBM bytes, MXU dims),
 * collectives (kind, bytes per device, replica groups in a compact form,
 * optionally asynchronous as a start ... done pair) and memory watermarks.
 * doc/trace-format.md specifies the text form (`.pst`, or gzip `.pst.gz`).
 *
 * Use:
 *   - to build one (lowering, tests): ps_trace_new(), set the header fields
 *     through ps_trace_header(), ps_trace_add_*(), then ps_trace_write().
 *   - to read one whole: ps_trace_read() (validates everything).
 *   - to stream one (the simulator, `podsim trace check`): ps_trace_reader_open(),
 *     ps_trace_reader_header(), ps_trace_reader_next() until it gives NULL.
 * Replica groups and permute pairs stay compact in the trace;
 * ps_trace_groups_expand() and ps_trace_pairs_expand() give explicit device
 * lists when a consumer needs them.
 *
 * Ownership: a PsTrace owns its header strings, event names and the arrays
 * inside its events. ps_trace_add_* copy what they are given (transfer none).
 * Events handed out by a reader are borrowed and valid until the next call
 * to ps_trace_reader_next() or ps_trace_reader_free().
 *
 * traces/ includes GLib and zlib only; it never includes partitioner/ or sim/.
 */
#ifndef PS_TRACES_TRACE_H
#define PS_TRACES_TRACE_H

#include <glib.h>

#include "common/error.h"
#include "common/params.h"

G_BEGIN_DECLS

/* Versions: 1 (events only) and 2 (adds loops). The reader accepts both;
 * the writer writes the lowest version that can express the trace (1 when
 * it has no loop), so older readers keep reading what they can. */
#define PS_TRACE_FORMAT_VERSION 2
#define PS_TRACE_FORMAT_VERSION_MIN 1

/* Deepest loop nesting a trace may have. */
#define PS_TRACE_MAX_LOOP_DEPTH 16

/* Largest mesh / iota rank the format allows. */
#define PS_TRACE_MAX_RANK 8

/* Most devices a trace may name (a TPU v3 pod has 2048 cores); keeps every
 * per-device table a reader or simulator builds small. */
#define PS_TRACE_MAX_DEVICES (1u << 24)

/* ---- element types -------------------------------------------------------- */

/* Same names as HLO ("bf16", "f32", ...), but traces/ does not include the IR. */
typedef enum {
  PS_TRACE_PRED, PS_TRACE_S8, PS_TRACE_S16, PS_TRACE_S32, PS_TRACE_S64,
  PS_TRACE_U8, PS_TRACE_U16, PS_TRACE_U32, PS_TRACE_U64,
  PS_TRACE_F16, PS_TRACE_BF16, PS_TRACE_F32, PS_TRACE_F64,
  PS_TRACE_C64, PS_TRACE_C128,
  PS_TRACE_DTYPE_COUNT
} PsTraceDtype;

const char *ps_trace_dtype_name (PsTraceDtype t);
gboolean ps_trace_dtype_from_name (const char *name, PsTraceDtype *out);
int ps_trace_dtype_size_bytes (PsTraceDtype t);

/* ---- mesh ------------------------------------------------------------------ */

/* How mesh positions (row-major over dims) map to logical device ids. */
typedef enum {
  PS_TRACE_ORDER_ARANGE,   /* position i holds device i */
  PS_TRACE_ORDER_ARANGE_T, /* arange over the reversed dims, transposed:
                            * for dims [a,b], mesh[i][j] = j*a + i */
  PS_TRACE_ORDER_NONPOD2D, /* Lingvo's GetNonPod2dMesh: needs `physical`
                            * (x, y, cores); 2-D meshes only */
  PS_TRACE_ORDER_LIST,     /* explicit: `devices` */
} PsTraceDeviceOrder;

typedef struct {
  guint rank;                        /* 1 .. PS_TRACE_MAX_RANK */
  gint64 dims[PS_TRACE_MAX_RANK];
  PsTraceDeviceOrder order;
  gint64 physical[3];                /* NONPOD2D only: x, y, cores per chip */
  guint32 *devices;                  /* LIST only: product(dims) ids, owned */
} PsTraceMesh;

/* Device id at every mesh position, row-major. n = product of dims.
 * The mesh must be valid (as after reading, or ps_trace_validate()).
 * transfer full (g_free). */
guint32 *ps_trace_mesh_device_ids (const PsTraceMesh *mesh, guint64 *n_out);

/* A mesh shape as users write it, "32x64" or "4x4x8": 1 .. PS_TRACE_MAX_RANK
 * dims of at least 1, PS_TRACE_MAX_DEVICES devices at most. Sets
 * mesh->rank and mesh->dims (the order is left alone). FALSE with a
 * PS_ERROR_OPTION error starting with `what` (the option, "--mesh")
 * otherwise. The one mesh parser of the command line and of model files
 * (models/family.c). */
gboolean ps_trace_mesh_parse_dims (const char *text, const char *what, PsTraceMesh *mesh,
                                   GError **error);

/* The logical mesh a trace is written over, as its readers declare it:
 * [parallelism] mesh of the hlo family, --mesh of `podsim trace lower`.
 * The macro is for a family's spec table (an array of values); the
 * variable is the same spec for option lists. */
#define PS_TRACE_PARAM_MESH \
  { .section = "parallelism", .key = "mesh", .type = PS_PARAM_MESH, .def = "", \
    .doc = "Logical device mesh of the trace, e.g. 2x4 (dims mappings name its axes; empty: one axis of all cores)", \
    .max = PS_PARAM_MESH_MAX_RANK }
extern const PsParamSpec ps_trace_param_mesh;

/* Sets mesh->order from a device order's name as users write it:
 * "arange", "arange_T" or "nonpod2d" (which takes `physical`: chips x,
 * chips y, cores per chip). FALSE for any other name. */
gboolean ps_trace_mesh_set_order (PsTraceMesh *mesh, const char *name, const gint64 *physical);

/* ---- header ---------------------------------------------------------------- */

/* Totals over all events; the writer computes them, the reader checks them. */
typedef struct {
  guint64 n_events;        /* every event line (compute, collective, done,
                            * memory, loop, endloop) as written */
  /* The sums are over the events one step runs: an event inside loops
   * counts the product of their trip counts. */
  guint64 flops;           /* sum of compute flops */
  guint64 read_bytes;      /* sum of compute HBM bytes read */
  guint64 write_bytes;     /* sum of compute HBM bytes written */
  guint64 collective_bytes;/* sum of collective in_bytes */
  guint64 peak_bytes;      /* per-device peak live HBM bytes (from memory
                            * analysis; >= every memory event) */
} PsTraceTotals;

typedef struct {
  guint version;           /* PS_TRACE_FORMAT_VERSION */
  char *program;           /* owned; never NULL once read */
  guint64 n_devices;       /* == product of mesh dims */
  PsTraceMesh mesh;
  char *slice;             /* optional hint ("v3-32", "4x4"); owned or NULL */
  PsTraceTotals totals;
} PsTraceHeader;

/* ---- events ---------------------------------------------------------------- */

typedef enum {
  PS_TRACE_EVENT_COMPUTE,
  PS_TRACE_EVENT_COLLECTIVE, /* synchronous, or the start of an async one */
  PS_TRACE_EVENT_DONE,       /* completion of the async collective `async_id` */
  PS_TRACE_EVENT_MEMORY,     /* live bytes per device after the previous event */
  PS_TRACE_EVENT_LOOP,       /* the events up to the matching END_LOOP run
                              * `trips` times (format version 2) */
  PS_TRACE_EVENT_END_LOOP,
  PS_TRACE_EVENT_KIND_COUNT
} PsTraceEventKind;

typedef enum {
  PS_TRACE_OP_MATMUL,        /* dot: uses the MXU dims */
  PS_TRACE_OP_CONV,          /* convolution as an implicit matmul: MXU dims */
  PS_TRACE_OP_ELEMENTWISE,   /* vector unit only */
  PS_TRACE_OP_REDUCE,        /* reduce, reduce-window */
  PS_TRACE_OP_DATA_MOVEMENT, /* copy, transpose, slice, pad, concat, gather, ... */
  PS_TRACE_OP_OTHER,         /* sort, rng, custom calls: bytes and vector ops */
  PS_TRACE_OP_COUNT
} PsTraceOpKind;

const char *ps_trace_op_kind_name (PsTraceOpKind k);   /* "matmul", "data-movement" */

typedef enum {
  PS_TRACE_PRECISION_DEFAULT, /* 1 bf16 MXU pass */
  PS_TRACE_PRECISION_HIGH,    /* 3 passes for f32 */
  PS_TRACE_PRECISION_HIGHEST, /* 6 passes for f32 */
} PsTracePrecision;

const char *ps_trace_precision_name (PsTracePrecision p);

typedef struct {
  PsTraceOpKind op;
  PsTraceDtype dtype;         /* operand element type the MXU / VPU sees */
  PsTracePrecision precision;
  guint64 flops;              /* dot/conv: 2 * multiply-adds */
  guint64 read_bytes;         /* HBM bytes read per device */
  guint64 write_bytes;        /* HBM bytes written per device */
  guint64 vector_ops;         /* element operations on the vector unit */
  /* matmul-like ops: out[batch, m, n] = sum_k lhs[batch, m, k] * rhs[batch, k, n];
   * has_mxu FALSE (and all 0) for ops that do not use the MXU. */
  gboolean has_mxu;
  guint64 mxu_batch, mxu_m, mxu_k, mxu_n;
  /* conv only: kernel window positions, each contracting mxu_k input
   * features (0 or 1: none, K is the whole contraction as for a matmul). */
  guint64 mxu_window;
} PsTraceCompute;

typedef enum {
  PS_TRACE_ALL_REDUCE,
  PS_TRACE_ALL_GATHER,
  PS_TRACE_REDUCE_SCATTER,
  PS_TRACE_ALL_TO_ALL,
  PS_TRACE_COLLECTIVE_PERMUTE,
  PS_TRACE_COLLECTIVE_COUNT
} PsTraceCollectiveKind;

const char *ps_trace_collective_kind_name (PsTraceCollectiveKind k); /* "all-reduce" */

/* Replica groups, kept compact. Every group has the same size. */
typedef enum {
  PS_TRACE_GROUPS_ALL,  /* one group of every device, in device-id order */
  PS_TRACE_GROUPS_AXES, /* devices that differ only along `axes` of the mesh */
  PS_TRACE_GROUPS_IOTA, /* XLA iota form [n_groups,group_size]<=[dims]T(perm) */
  PS_TRACE_GROUPS_LIST, /* explicit */
} PsTraceGroupsForm;

typedef struct {
  PsTraceGroupsForm form;
  guint n_axes;                          /* AXES */
  guint axes[PS_TRACE_MAX_RANK];         /* AXES: distinct mesh axes, in order */
  guint64 n_groups, group_size;          /* IOTA, LIST (set by readers for all) */
  guint iota_rank;                       /* IOTA: reshape dims and permutation */
  gint64 iota_dims[PS_TRACE_MAX_RANK];
  guint iota_perm[PS_TRACE_MAX_RANK];    /* identity when no T(...) */
  guint32 *devices;                      /* LIST: n_groups*group_size ids, owned */
} PsTraceGroups;

/* Source -> target pairs of a collective-permute. */
typedef enum {
  PS_TRACE_PAIRS_SHIFT, /* every device sends to the one `offset` positions
                         * further along mesh `axis`; with wrap, cyclically,
                         * without, devices shifted off the edge send nothing */
  PS_TRACE_PAIRS_LIST,  /* explicit */
} PsTracePairsForm;

typedef struct {
  PsTracePairsForm form;
  guint axis;                 /* SHIFT */
  gint64 offset;              /* SHIFT: non-zero */
  gboolean wrap;              /* SHIFT */
  guint64 n_pairs;            /* LIST */
  guint32 *pairs;             /* LIST: 2*n_pairs ids (source, target), owned */
} PsTracePairs;

typedef struct {
  PsTraceCollectiveKind kind;
  PsTraceDtype dtype;
  guint64 in_bytes;           /* per device, operand */
  guint64 out_bytes;          /* per device, result */
  PsTraceGroups groups;       /* all kinds but collective-permute */
  PsTracePairs pairs;         /* collective-permute only */
  guint64 async_id;           /* 0: synchronous; else the id a later DONE names;
                               * compute between start and done overlaps */
} PsTraceCollective;

typedef struct {
  PsTraceEventKind kind;
  const char *name;           /* COMPUTE, COLLECTIVE, LOOP: borrowed; else NULL */
  PsTraceCompute compute;     /* COMPUTE */
  PsTraceCollective collective; /* COLLECTIVE */
  guint64 async_id;           /* DONE */
  guint64 live_bytes;         /* MEMORY */
  guint64 trips;              /* LOOP: times the body runs (0 allowed) */
} PsTraceEvent;

/* ---- in-memory traces ------------------------------------------------------- */

typedef struct PsTrace PsTrace;

/* An empty trace: 1 device, mesh [1] arange; program "unnamed" when NULL
 * or empty. transfer full. */
PsTrace *ps_trace_new (const char *program);
void ps_trace_free (PsTrace *trace);

/* The header, to read or to fill in. Set strings with ps_trace_set_*;
 * mesh.devices, if set directly, must be g_malloc'ed (the trace frees it).
 * totals are recomputed by ps_trace_write() except totals.peak_bytes, which
 * the producer sets (it is raised to the largest memory event). transfer none. */
PsTraceHeader *ps_trace_header (PsTrace *trace);
const PsTraceHeader *ps_trace_get_header (const PsTrace *trace);
/* NULL or "" removes the hint. */
void ps_trace_set_slice (PsTrace *trace, const char *slice);
/* Sets n_devices and the mesh (dims, order; devices copied for LIST). */
void ps_trace_set_mesh (PsTrace *trace, guint rank, const gint64 *dims,
                        PsTraceDeviceOrder order, const guint32 *devices);

void ps_trace_add_compute (PsTrace *trace, const char *name,
                           const PsTraceCompute *compute);
void ps_trace_add_collective (PsTrace *trace, const char *name,
                              const PsTraceCollective *collective);
void ps_trace_add_done (PsTrace *trace, guint64 async_id);
void ps_trace_add_memory (PsTrace *trace, guint64 live_bytes);
/* A loop: the events added until the matching ps_trace_add_end_loop() run
 * `trips` times. A collective started in a loop body is done in the same
 * body; loops nest up to PS_TRACE_MAX_LOOP_DEPTH. */
void ps_trace_add_loop (PsTrace *trace, const char *name, guint64 trips);
void ps_trace_add_end_loop (PsTrace *trace);
/* Does the trace use loops (and so need format version 2)? */
gboolean ps_trace_has_loops (const PsTrace *trace);

guint64 ps_trace_n_events (const PsTrace *trace);
/* transfer none. */
const PsTraceEvent *ps_trace_get_event (const PsTrace *trace, guint64 index);

/* Checks what the reader checks (mesh, groups fit the mesh, async pairs match,
 * ...) on an in-memory trace. Messages start with "event N: ". */
gboolean ps_trace_validate (const PsTrace *trace, GError **error);

/* Recomputes header totals from the events (keeps peak_bytes at least the
 * largest memory event). Sums that would overflow 64 bits saturate (the
 * trace then fails validation). */
void ps_trace_update_totals (PsTrace *trace);

/* The text form, totals recomputed, with footer. transfer full. */
char *ps_trace_to_text (const PsTrace *trace, gsize *len_out);

/* Validates, then writes `path` atomically: gzip when it ends in ".gz",
 * plain text otherwise, "-" for standard output (plain). Byte-identical
 * output for identical traces. */
gboolean ps_trace_write (const PsTrace *trace, const char *path, GError **error);

/* Reads and validates a whole trace (".pst" or ".pst.gz"; "-" is standard
 * input). Errors: "FILE:LINE:COL: what" or "FILE: what". transfer full. */
PsTrace *ps_trace_read (const char *path, GError **error);

/* Parses a trace held in memory (plain text); `name` is used in messages. */
PsTrace *ps_trace_parse (const char *name, const char *text, gsize len,
                         GError **error);

/* ---- streaming reader -------------------------------------------------------- */

typedef struct PsTraceReader PsTraceReader;

/* Opens `path` (gzip or plain, detected from content; "-" is standard input)
 * and reads and validates the header. transfer full. */
PsTraceReader *ps_trace_reader_open (const char *path, GError **error);
/* transfer none; valid for the reader's life. */
const PsTraceHeader *ps_trace_reader_header (const PsTraceReader *reader);
/* Reads the next event. Returns TRUE with *event set, or TRUE with *event =
 * NULL at the end (footer checked: event count, checksum, totals); FALSE with
 * error on a malformed, truncated or corrupt file. *event is transfer none. */
gboolean ps_trace_reader_next (PsTraceReader *reader, const PsTraceEvent **event,
                               GError **error);
/* Line number (1-based, in the decompressed text) of the last line read. */
guint64 ps_trace_reader_line (const PsTraceReader *reader);
void ps_trace_reader_free (PsTraceReader *reader);

/* ---- group and pair expansion ---------------------------------------------- */

/* Explicit replica groups: n_groups * group_size device ids, group-major.
 * Arguments must be valid (as after reading or ps_trace_validate()).
 * transfer full (g_free). */
guint32 *ps_trace_groups_expand (const PsTraceGroups *groups,
                                 const PsTraceHeader *header,
                                 guint64 *n_groups, guint64 *group_size);

/* Explicit permute pairs: 2 * n_pairs ids (source, target), sorted by source.
 * transfer full (g_free). */
guint32 *ps_trace_pairs_expand (const PsTracePairs *pairs,
                                const PsTraceHeader *header, guint64 *n_pairs);

/* Compact text forms as written in the trace ("axes:1", "[2,4]<=[4,2]T(1,0)",
 * "{{0,1},{2,3}}", "shift:0:1:wrap"). transfer full. */
char *ps_trace_groups_to_string (const PsTraceGroups *groups);
char *ps_trace_pairs_to_string (const PsTracePairs *pairs);

/* Parses the compact forms above (as in a trace line, without "groups=").
 * Messages are "TEXT:1:COL: what". Arrays in *out are g_malloc'ed: release
 * them with ps_trace_groups_clear() / ps_trace_pairs_clear(). */
gboolean ps_trace_groups_parse (const char *text, PsTraceGroups *out, GError **error);
gboolean ps_trace_pairs_parse (const char *text, PsTracePairs *out, GError **error);
void ps_trace_groups_clear (PsTraceGroups *groups);
void ps_trace_pairs_clear (PsTracePairs *pairs);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsTrace, ps_trace_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsTraceReader, ps_trace_reader_free)

G_END_DECLS

#endif
