/* The graph IR: HLO-like modules of computations of instructions.
 *
 * This is the representation every stage of the compiler side works on: the
 * HLO reader produces it, the model builders (builder.h) produce it,
 * propagation annotates it with shardings, the SPMD partitioner rewrites it
 * into a per-device program (same IR, local shapes, collective
 * instructions), the interpreter runs it and lowering turns it into a trace.
 *
 * Ownership: a PsModule owns its computations; a computation owns its
 * instructions; an instruction owns its shape, sharding, literal and
 * attribute arrays. Pointers between instructions (operands, users) and to
 * computations (called) are borrowed. Free everything with ps_module_free().
 *
 * Attributes are typed fields of PsInstr; a field that an opcode does not use
 * stays at its zero value (NULL / 0 / empty PsInts). Attributes podsim does
 * not interpret (frontend_attributes, backend_config of unknown targets, ...)
 * are kept verbatim in `extra_attrs` so that printing round-trips.
 */
#ifndef PS_PARTITIONER_IR_H
#define PS_PARTITIONER_IR_H

#include <glib.h>
#include <stdint.h>

#include "common/checked.h"
#include "common/error.h"
#include "partitioner/ir/shape.h"

G_BEGIN_DECLS

typedef struct PsSharding PsSharding; /* partitioner/ir/sharding.h */

/* A list of int64 (dimension numbers, sizes, ...). */
typedef struct {
  int n;
  int64_t *v;           /* owned; NULL when n == 0 */
} PsInts;

/* ---- opcodes ------------------------------------------------------------ */

#define PS_OPCODE_LIST(X) \
  X (ABS, "abs") X (ADD, "add") X (ADD_DEPENDENCY, "add-dependency") \
  X (AFTER_ALL, "after-all") \
  X (ALL_GATHER, "all-gather") X (ALL_GATHER_START, "all-gather-start") \
  X (ALL_GATHER_DONE, "all-gather-done") X (ALL_REDUCE, "all-reduce") \
  X (ALL_REDUCE_START, "all-reduce-start") X (ALL_REDUCE_DONE, "all-reduce-done") \
  X (ASYNC_START, "async-start") X (ASYNC_UPDATE, "async-update") \
  X (ASYNC_DONE, "async-done") \
  X (ALL_TO_ALL, "all-to-all") X (AND, "and") X (ATAN2, "atan2") \
  X (BATCH_NORM_GRAD, "batch-norm-grad") \
  X (BATCH_NORM_INFERENCE, "batch-norm-inference") \
  X (BATCH_NORM_TRAINING, "batch-norm-training") \
  X (BITCAST, "bitcast") X (BITCAST_CONVERT, "bitcast-convert") \
  X (BROADCAST, "broadcast") X (CALL, "call") X (CALL_DONE, "call-done") \
  X (CALL_START, "call-start") X (CBRT, "cbrt") X (CEIL, "ceil") \
  X (CHOLESKY, "cholesky") X (CLAMP, "clamp") X (CLZ, "count-leading-zeros") \
  X (COLLECTIVE_BROADCAST, "collective-broadcast") \
  X (COLLECTIVE_PERMUTE, "collective-permute") \
  X (COLLECTIVE_PERMUTE_START, "collective-permute-start") \
  X (COLLECTIVE_PERMUTE_DONE, "collective-permute-done") X (COMPARE, "compare") \
  X (COMPLEX, "complex") X (CONCATENATE, "concatenate") \
  X (CONDITIONAL, "conditional") X (CONSTANT, "constant") \
  X (CONVERT, "convert") X (CONVOLUTION, "convolution") X (COPY, "copy") \
  X (COPY_START, "copy-start") X (COPY_DONE, "copy-done") \
  X (COSINE, "cosine") X (CUSTOM_CALL, "custom-call") X (DIVIDE, "divide") \
  X (DOMAIN, "domain") X (DOT, "dot") X (DYNAMIC_RESHAPE, "dynamic-reshape") \
  X (DYNAMIC_SLICE, "dynamic-slice") \
  X (DYNAMIC_UPDATE_SLICE, "dynamic-update-slice") X (ERF, "erf") \
  X (EXP, "exponential") X (EXPM1, "exponential-minus-one") X (FFT, "fft") \
  X (FLOOR, "floor") X (FUSION, "fusion") X (GATHER, "gather") \
  X (GET_DIMENSION_SIZE, "get-dimension-size") \
  X (GET_TUPLE_ELEMENT, "get-tuple-element") X (IMAG, "imag") \
  X (INFEED, "infeed") X (IOTA, "iota") X (IS_FINITE, "is-finite") \
  X (LOG, "log") X (LOG1P, "log-plus-one") X (LOGISTIC, "logistic") \
  X (MAP, "map") X (MAXIMUM, "maximum") X (MINIMUM, "minimum") \
  X (MULTIPLY, "multiply") X (NEGATE, "negate") X (NOT, "not") \
  X (OPTIMIZATION_BARRIER, "opt-barrier") X (OR, "or") \
  X (OUTFEED, "outfeed") X (PAD, "pad") X (PARAMETER, "parameter") \
  X (PARTITION_ID, "partition-id") X (POPCNT, "popcnt") X (POWER, "power") \
  X (RAGGED_DOT, "ragged-dot") \
  X (REAL, "real") X (RECV, "recv") X (RECV_DONE, "recv-done") \
  X (REDUCE, "reduce") X (REDUCE_PRECISION, "reduce-precision") \
  X (REDUCE_SCATTER, "reduce-scatter") X (REDUCE_WINDOW, "reduce-window") \
  X (REMAINDER, "remainder") X (REPLICA_ID, "replica-id") \
  X (RESHAPE, "reshape") X (REVERSE, "reverse") X (RNG, "rng") \
  X (RNG_BIT_GENERATOR, "rng-bit-generator") \
  X (RNG_GET_AND_UPDATE_STATE, "rng-get-and-update-state") \
  X (ROUND_NEAREST_AFZ, "round-nearest-afz") \
  X (ROUND_NEAREST_EVEN, "round-nearest-even") X (RSQRT, "rsqrt") \
  X (SCATTER, "scatter") X (SELECT, "select") \
  X (SELECT_AND_SCATTER, "select-and-scatter") X (SEND, "send") \
  X (SEND_DONE, "send-done") X (SET_DIMENSION_SIZE, "set-dimension-size") \
  X (SHIFT_LEFT, "shift-left") \
  X (SHIFT_RIGHT_ARITHMETIC, "shift-right-arithmetic") \
  X (SHIFT_RIGHT_LOGICAL, "shift-right-logical") X (SIGN, "sign") \
  X (SINE, "sine") X (SLICE, "slice") X (SORT, "sort") X (SQRT, "sqrt") \
  X (STOCHASTIC_CONVERT, "stochastic-convert") \
  X (SUBTRACT, "subtract") X (TAN, "tan") X (TANH, "tanh") \
  X (TOPK, "topk") X (TRANSPOSE, "transpose") \
  X (TRIANGULAR_SOLVE, "triangular-solve") X (TUPLE, "tuple") \
  X (WHILE, "while") X (XOR, "xor")

typedef enum {
#define PS_OPCODE_ENUM(id, name) PS_OP_##id,
  PS_OPCODE_LIST (PS_OPCODE_ENUM)
#undef PS_OPCODE_ENUM
  PS_OP_COUNT
} PsOpcode;

const char *ps_opcode_name (PsOpcode op);
gboolean ps_opcode_from_name (const char *s, gsize len, PsOpcode *out);
/* Unary/binary/ternary elementwise math (add, exp, select, clamp, convert,
 * compare, ...): output element i depends on operand elements i only. */
gboolean ps_opcode_is_elementwise (PsOpcode op);
gboolean ps_opcode_is_collective (PsOpcode op);

/* ---- attributes --------------------------------------------------------- */

/* One dimension of a window (convolution, reduce-window, select-and-scatter). */
typedef struct {
  int64_t size, stride, pad_lo, pad_hi;
  int64_t base_dilation;    /* "lhs_dilate" */
  int64_t window_dilation;  /* "rhs_dilate" */
  gboolean reversal;        /* "rhs_reversal" */
} PsWindowDim;

typedef struct {
  int n;                    /* 0 = no window attribute */
  PsWindowDim *dims;
} PsWindow;

/* Convolution dimension numbers, parsed from dim_labels=b01f_01io->b01f. */
typedef struct {
  gboolean present;
  int n_spatial;
  int64_t in_batch, in_feature, *in_spatial;
  int64_t k_in_feature, k_out_feature, *k_spatial;
  int64_t out_batch, out_feature, *out_spatial;
} PsConvDims;

typedef struct {
  PsInts lhs_batch, rhs_batch, lhs_contracting, rhs_contracting;
} PsDotDims;

typedef struct { int64_t lo, hi, interior; } PsPadDim;

typedef struct {
  PsInts offset_dims, collapsed_slice_dims, start_index_map;
  PsInts operand_batching_dims, start_indices_batching_dims;
  PsInts slice_sizes;
  int64_t index_vector_dim;
  gboolean indices_are_sorted;
} PsGatherDims;

typedef struct {
  PsInts update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
  PsInts input_batching_dims, scatter_indices_batching_dims;
  int64_t index_vector_dim;
  gboolean indices_are_sorted, unique_indices;
} PsScatterDims;

typedef enum {
  PS_CMP_NONE, PS_CMP_EQ, PS_CMP_NE, PS_CMP_LT, PS_CMP_LE, PS_CMP_GT, PS_CMP_GE
} PsCompareDir;

/* A fusion's kind= (XLA's HloInstruction::FusionKind): how XLA's fusion
 * passes formed it. kLoop: elementwise ops fused into one loop; kInput: a
 * reduction fused with its producers; kOutput: a dot or convolution fused
 * with its consumers; kCustom: a backend-specific fusion (backend_config
 * says which). Cost models may read it; the interpreter ignores it. */
typedef enum {
  PS_FUSION_NONE, PS_FUSION_LOOP, PS_FUSION_INPUT, PS_FUSION_OUTPUT, PS_FUSION_CUSTOM
} PsFusionKind;

/* "kLoop", ... ("?" for PS_FUSION_NONE); FALSE when `s` names no kind. */
const char *ps_fusion_kind_name (PsFusionKind k);
gboolean ps_fusion_kind_from_name (const char *s, PsFusionKind *out);

typedef enum { PS_PRECISION_DEFAULT, PS_PRECISION_HIGH, PS_PRECISION_HIGHEST } PsPrecision;

/* A constant's value: `n` elements of `etype` in row-major order, stored in
 * the element's natural C representation (bf16 and f16 as uint16_t bits,
 * pred as uint8_t 0/1, c64 as two floats). Tuple constants are not used. */
typedef struct {
  PsElemType etype;
  int64_t n;
  void *data;               /* owned, n * ps_etype_size_bytes(etype) bytes */
  /* Written as one value for every element (XLA's splat form,
   * "s8[10] constant(1)"), and printed so; the data holds all n. */
  gboolean splat;
} PsLiteral;

/* An attribute kept verbatim: key=value as written (value text exact). */
typedef struct {
  char *key;
  char *value;
} PsRawAttr;

/* ---- instructions, computations, modules ------------------------------- */

typedef struct PsInstr PsInstr;
typedef struct PsComputation PsComputation;
typedef struct PsModule PsModule;

struct PsInstr {
  int id;                   /* unique in the module, assigned at creation */
  char *name;               /* without '%' */
  PsOpcode opcode;
  PsShape *shape;           /* owned */
  int n_operands;
  PsInstr **operands;       /* borrowed */
  GPtrArray *users;         /* PsInstr*, borrowed; kept in sync by the API */
  PsComputation *parent;
  PsSharding *sharding;     /* owned; NULL when the instruction has none */

  /* Called computations, in the order the opcode defines:
   *   reduce, reduce-window, scatter, sort, map, all-reduce, reduce-scatter,
   *   call, custom-call (called_computations), call-start: [to_apply]
   *   fusion: [calls] (the fused computation)
   *   async-start, -update, -done: [calls] (the wrapped computation; the
   *     -update and -done of newer dumps do not write it)
   *   while: [condition, body]
   *   conditional: branches in order; with a pred selector [true, false]
   *   select-and-scatter: [select, scatter] */
  int n_called;
  PsComputation **called;   /* borrowed */
  gboolean branches_as_list; /* conditional printed as branch_computations={} */

  /* Typed attributes (zero when unused). */
  int64_t parameter_number;        /* parameter */
  PsLiteral *literal;              /* constant; owned */
  PsInts dimensions;               /* broadcast, reduce, transpose, concatenate, reverse, sort, all-gather/all-to-all (dimensions={d}) */
  PsDotDims dot;                   /* dot */
  PsPrecision precision[2];        /* operand_precision (dot, convolution) */
  gboolean has_precision;
  PsWindow window;                 /* convolution, reduce-window, select-and-scatter */
  PsConvDims conv;                 /* convolution */
  int64_t feature_group_count;     /* convolution; 0 = not written (means 1) */
  int64_t batch_group_count;       /* convolution; 0 = not written (means 1) */
  PsInts slice_starts, slice_limits, slice_strides; /* slice */
  PsInts dynamic_slice_sizes;      /* dynamic-slice */
  int n_pad;                       /* pad: rank entries */
  PsPadDim *padding;
  PsGatherDims gather;             /* gather */
  PsScatterDims scatter;           /* scatter */
  int64_t tuple_index;             /* get-tuple-element "index" */
  int64_t iota_dimension;          /* iota */
  /* batch-norm-training, -inference, -grad: the feature dim of the operand
   * and the epsilon added to the variance (XLA stores it as a float). */
  int64_t feature_index;
  float epsilon;
  PsCompareDir comparison;         /* compare "direction" */
  char *compare_type;              /* compare "type" (TOTALORDER...), or NULL */
  gboolean is_stable;              /* sort */
  PsFusionKind fusion_kind;        /* fusion "kind" */
  /* Collectives. replica_groups: n_groups groups of group_size ids each.
   * Groups of different sizes, which XLA allows only for all-reduce
   * (CheckReplicaGroups in xla/service/hlo_verifier.cc), are held padded
   * to the largest with -1 (ps_instr_group_len). */
  int n_groups, group_size;
  int64_t *replica_groups;         /* n_groups * group_size, row-major */
  gboolean has_replica_groups;     /* attribute written (even as {}) */
  int64_t channel_id;              /* 0 = none */
  gboolean use_global_device_ids;
  int n_pairs;                     /* collective-permute */
  int64_t *source_target_pairs;    /* n_pairs * 2 */
  char *custom_call_target;        /* custom-call, without quotes */
  char *backend_config;            /* raw string contents, or NULL */
  gboolean custom_call_has_side_effect;
  char *metadata;                  /* text inside metadata={...}, or NULL */
  GPtrArray *extra_attrs;          /* PsRawAttr*, owned, in written order; or NULL */

  /* Where the instruction was defined in its source file (0 if built). */
  int src_line, src_col;
};

struct PsComputation {
  char *name;
  PsModule *parent;
  GPtrArray *instrs;               /* PsInstr*, owned, in program order */
  GPtrArray *params;               /* PsInstr*, borrowed, by parameter number */
  PsInstr *root;
  gboolean is_entry;
  char *execution_thread;          /* or NULL */
};

/* One entry of the module's input_output_alias: the entry result's element
 * at `output_index` is written into the buffer of parameter `parameter` (at
 * `param_index` within it), as XLA's HloInputOutputAliasConfig says: the
 * caller donates that parameter buffer. must-alias makes the aliasing
 * mandatory; may-alias (the default) lets the compiler decline. */
typedef struct {
  PsInts output_index;
  int64_t parameter;
  PsInts param_index;
  gboolean must_alias;
} PsAlias;

struct PsModule {
  char *name;
  /* The file it was read from ("<stdin>", "<hlo>"...), as error messages
   * name it; NULL for a module built in memory. Owned. */
  char *source_name;
  GPtrArray *computations;         /* PsComputation*, owned, callees before callers */
  PsComputation *entry;
  /* Header attributes. */
  int64_t num_partitions;          /* 0 = not written */
  int n_prop_to_output, n_prop_to_params;
  gboolean *prop_to_output;        /* allow_spmd_sharding_propagation_to_output */
  gboolean *prop_to_params;        /* ..._to_parameters */
  char *entry_layout;              /* entry_computation_layout text, or NULL */
  int n_aliases;                   /* input_output_alias entries */
  PsAlias *aliases;                /* owned */
  GPtrArray *extra_attrs;          /* other header attrs, PsRawAttr* */
  int next_id;
  /* Private to ir.c: instruction name -> PsInstr*, kept by the API so that
   * lookups and fresh names are O(1). Renaming an instruction by hand only
   * makes lookups of the new name fall back to a scan. */
  GHashTable *name_index;
};

PsModule *ps_module_new (const char *name);
void ps_module_free (PsModule *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsModule, ps_module_free)
/* Deep copy; called computations and operands are remapped. transfer full. */
PsModule *ps_module_clone (const PsModule *m);
/* Appends an input_output_alias entry (indices copied). */
void ps_module_add_alias (PsModule *m, int n_output_index, const int64_t *output_index,
                          int64_t parameter, int n_param_index, const int64_t *param_index,
                          gboolean must_alias);
/* Copies src's input_output_alias entries onto dst (replacing dst's). */
void ps_module_copy_aliases (PsModule *dst, const PsModule *src);
void ps_module_clear_aliases (PsModule *m);

PsComputation *ps_computation_new (PsModule *m, const char *name); /* appended */
/* Removes and frees c (not the entry); nothing may call it any more. */
void ps_module_remove_computation (PsModule *m, PsComputation *c);
PsComputation *ps_module_find_computation (const PsModule *m, const char *name);
PsInstr *ps_module_find_instr (const PsModule *m, const char *name); /* any computation */
PsInstr *ps_computation_find_instr (const PsComputation *c, const char *name);

/* Creates an instruction at the end of `c`. Takes ownership of `shape`;
 * operands are borrowed and get `instr` added to their users. A NULL name
 * makes a unique one from the opcode ("add.3"). */
PsInstr *ps_computation_add_instr (PsComputation *c, PsOpcode op,
                                   const char *name, PsShape *shape,
                                   int n_operands, PsInstr *const *operands);
void ps_instr_set_operand (PsInstr *instr, int i, PsInstr *new_operand);
/* Points every user of `old` (and the root, if it is `old`) at `repl`.
 * `repl` itself, if it uses `old`, keeps doing so (inserting after old). */
void ps_instr_replace_all_uses (PsInstr *old, PsInstr *repl);
/* Removes an instruction that has no users. */
void ps_computation_remove_instr (PsComputation *c, PsInstr *instr);
/* Removes every instruction of `dead` (a set of PsInstr* of c) in one pass;
 * each may be used only by other members of the set. Linear in the size of
 * c, where removing one at a time would be quadratic. */
void ps_computation_remove_instrs (PsComputation *c, GHashTable *dead);
/* Instructions in an order where every operand comes before its users
 * (stable: keeps program order where it can). transfer container. */
GPtrArray *ps_computation_post_order (const PsComputation *c);
void ps_instr_set_sharding (PsInstr *instr, const PsSharding *s); /* copies; NULL clears */
/* A user error at instruction `in`: "FILE:LINE:COL: NAME: message", FILE
 * being its module's source_name (no FILE for a module built in memory, no
 * LINE:COL for an instruction made by a pass). */
void ps_instr_error (GError **error, PsErrorCode code, const PsInstr *in, const char *fmt, ...)
  G_GNUC_PRINTF (4, 5);
void ps_instr_set_called (PsInstr *instr, int n, PsComputation *const *called);
/* Copies every typed and raw attribute of `src` into the fresh `dst`: not
 * the shape, operands, users, called computations, parent or sharding. */
void ps_instr_copy_attrs (PsInstr *dst, const PsInstr *src);
/* Whether a and b compute the same value from their operands: same opcode,
 * identical shape (layout included), the same operand and called
 * instructions/computations (by identity), the same sharding (printed form)
 * and equal attributes: all those ps_instr_copy_attrs copies except the
 * source position and the channel id (which only names a collective's
 * channel); literals compare by bytes. What CSE (cse.h) merges. */
gboolean ps_instr_same_value (const PsInstr *a, const PsInstr *b);

void ps_ints_set (PsInts *dst, int n, const int64_t *v);
void ps_ints_clear (PsInts *dst);
gboolean ps_ints_contains (const PsInts *a, int64_t v);
gboolean ps_ints_equal (const PsInts *a, const PsInts *b);
/* "{0,1}" ("{}" when empty). transfer full. */
char *ps_ints_to_string (const PsInts *a);
PsLiteral *ps_literal_new (PsElemType t, int64_t n);      /* zero-filled */
PsLiteral *ps_literal_copy (const PsLiteral *l);
void ps_literal_free (PsLiteral *l);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsLiteral, ps_literal_free)
/* Stores v into element i converted to the literal's type: floats rounded
 * to nearest even (bf16/f16 by common/float16.h), integers by C conversion
 * (v must be in range), pred v != 0, complex (v, 0). */
void ps_literal_set_f64 (PsLiteral *l, int64_t i, double v);
void ps_instr_add_raw_attr (PsInstr *instr, const char *key, const char *value);
const char *ps_instr_get_raw_attr (const PsInstr *instr, const char *key);

/* The members of replica group g (ids before the -1 padding of groups of
 * different sizes), and whether the groups differ in size. */
int ps_instr_group_len (const PsInstr *in, int g);
gboolean ps_instr_groups_ragged (const PsInstr *in);

/* A ragged-dot's modes (XLA's shape_inference.cc InferRaggedDotOpShape):
 * the lhs ragged dim is a non-contracting one (rows meet their group's
 * rhs slice along the rhs group dim), a contracting one (the result gets a
 * leading group dim) or a batch one (a dot). */
typedef enum {
  PS_RAGGED_NONE,             /* not a ragged-dot, or its dims do not read */
  PS_RAGGED_NON_CONTRACTING,
  PS_RAGGED_CONTRACTING,
  PS_RAGGED_BATCH,
} PsRaggedMode;
/* The mode of a ragged-dot, its lhs ragged dim and its rhs group dim (-1
 * when there is none), from `lhs_ragged_dims={d}` and `rhs_group_dims={g}`. */
PsRaggedMode ps_instr_ragged_dims (const PsInstr *in, int64_t *lhs_ragged, int64_t *rhs_group);

/* Checks operand counts, shapes and attribute consistency for every
 * instruction; errors name the instruction and its source position. */
gboolean ps_module_validate (const PsModule *m, const char *filename, GError **error);

/* Infers the result shape of `op` over `operands` with the attributes already
 * set on `proto` (used by the reader when a shape is omitted, and by the
 * builder). Returns NULL with an error when the shapes do not fit.
 * Error codes: PS_ERROR_INVALID when the operands or attributes do not fit
 * the opcode; PS_ERROR_UNSUPPORTED when the result cannot be derived
 * (reshape, broadcast, convert, iota, custom-call, ...) and proto->shape is
 * NULL. With proto->shape set, such opcodes check it and return a copy. */
PsShape *ps_infer_shape (const PsInstr *proto, GError **error);

G_END_DECLS

#endif
