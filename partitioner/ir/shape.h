/* Element types and shapes of the graph IR: what a value is, independent of
 * the program that computes it. The lowest part of partitioner/ir/: shardings
 * (sharding.h) describe how a shape is split and need nothing else of the
 * IR; the IR (ir.h) includes both.
 *
 * Ownership: constructors return transfer full shapes (ps_shape_free);
 * arguments are borrowed; tuple constructors copy their elements.
 */
#ifndef PS_PARTITIONER_SHAPE_H
#define PS_PARTITIONER_SHAPE_H

#include <glib.h>
#include <stdint.h>

#include "common/checked.h"
#include "common/float16.h"

G_BEGIN_DECLS

/* ---- element types and shapes ------------------------------------------ */

typedef enum {
  PS_PRED, PS_S8, PS_S16, PS_S32, PS_S64, PS_U8, PS_U16, PS_U32, PS_U64,
  PS_F16, PS_BF16, PS_F32, PS_F64, PS_C64, PS_C128, PS_TOKEN,
  /* Narrow types of quantized and fp8 programs, every one of XLA's
   * PrimitiveType (xla/xla_data.proto). Values take one byte each here;
   * buffers pack the sub-byte ones (s1 u1 s2 u2 s4 u4 f4e2m1fn) as XLA
   * does (ps_shape_bytes); the floats as in common/float16.h
   * (ps_etype_minifloat). */
  PS_S4, PS_U4, PS_F8E4M3FN, PS_F8E5M2,
  PS_S1, PS_U1, PS_S2, PS_U2, PS_F8E4M3, PS_F8E3M4, PS_F8E4M3FNUZ,
  PS_F8E5M2FNUZ, PS_F8E4M3B11FNUZ, PS_F4E2M1FN, PS_F8E8M0FNU,
  PS_TUPLE,            /* not an element type: marks a tuple shape */
  PS_ETYPE_COUNT
} PsElemType;

const char *ps_etype_name (PsElemType t);            /* "f32" */
gboolean ps_etype_from_name (const char *s, gsize len, PsElemType *out);
int ps_etype_size_bytes (PsElemType t);              /* pred = 1, token = 0 */
gboolean ps_etype_is_float (PsElemType t);           /* the narrow floats, f16 bf16 f32 f64 */
/* Bits of one element in a packed buffer: 1, 2, 4 for the sub-byte types,
 * else 8 x ps_etype_size_bytes. */
int ps_etype_bits (PsElemType t);
/* The format of a narrow float type (f8*, f4e2m1fn), or NULL. */
const PsMinifloat *ps_etype_minifloat (PsElemType t);
/* A narrow float's code for v and the value of a code (the type must have
 * a ps_etype_minifloat). */
uint8_t ps_etype_minifloat_encode (PsElemType t, double v);
double ps_etype_minifloat_decode (PsElemType t, uint8_t code);
/* The range of an integral type, also of the sub-byte ones (s1: -1..0). */
void ps_etype_int_range (PsElemType t, int64_t *lo, uint64_t *hi);
gboolean ps_etype_is_complex (PsElemType t);
gboolean ps_etype_is_integral (PsElemType t);        /* signed and unsigned, not pred */
gboolean ps_etype_is_signed (PsElemType t);

/* An unbounded dynamic dim, written "?" (XLA's Shape::kUnboundedSize):
 * dynamic[i] holds this, dims[i] holds 0, a placeholder that no stage after
 * reading may take for a size (ps_shape_has_unbounded; doc/hlo.md). */
#define PS_DIM_UNBOUNDED 2

typedef struct PsShape PsShape;
struct PsShape {
  PsElemType etype;     /* PS_TUPLE for a tuple */
  int rank;             /* arrays: number of dims (0 = scalar) */
  int64_t *dims;        /* rank entries */
  gboolean *dynamic;    /* NULL, or rank flags: 0 a static dim, TRUE (1) a
                         * bounded dynamic dim "<=N" (dims[i] = N),
                         * PS_DIM_UNBOUNDED an unbounded one "?" */
  int layout_n;         /* -1 = no layout written; else number of entries */
  int64_t *layout;      /* minor-to-major; printing keeps it */
  char *layout_extra;   /* text after ':' inside the layout braces, or NULL */
  int n_elems;          /* tuples: element count */
  PsShape **elems;      /* tuples: owned elements */
};

PsShape *ps_shape_new_array (PsElemType t, int rank, const int64_t *dims);
PsShape *ps_shape_new_scalar (PsElemType t);
PsShape *ps_shape_new_tuple (int n, PsShape *const *elems); /* copies elems */
PsShape *ps_shape_copy (const PsShape *s);
void ps_shape_free (PsShape *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsShape, ps_shape_free)
gboolean ps_shape_is_tuple (const PsShape *s);
gboolean ps_shape_is_array (const PsShape *s);
/* Same element type and dims (layouts ignored); tuples elementwise. */
gboolean ps_shape_equal (const PsShape *a, const PsShape *b);
/* Same rank and dims, element type and layout ignored: what an elementwise
 * op or a select asks of its array operands (tuples compare as rank 0). */
gboolean ps_shape_same_dims (const PsShape *a, const PsShape *b);
int64_t ps_shape_elements (const PsShape *s);        /* arrays: product of dims */
/* The bytes of the compiled program's buffer: tuples the sum of their
 * leaves, s4/u4 packed two to a byte as XLA packs them (shape.c). */
int64_t ps_shape_bytes (const PsShape *s);
int64_t ps_shape_leaf_elements (const PsShape *s);   /* elements of all leaves */
/* Within podsim's limits (common/checked.h, doc/robustness.md): at most
 * PS_MAX_RANK dims, PS_MAX_ELEMENTS elements in all leaves together, tuples
 * nested at most PS_MAX_NESTING deep. Every shape a reader accepts or shape
 * inference produces is; so element counts and byte sizes of a valid module
 * cannot overflow. */
gboolean ps_shape_within_limits (const PsShape *s);
int ps_shape_leaf_count (const PsShape *s);          /* arrays: 1 */
/* Leaves of a tuple shape depth-first (arrays: the shape itself). transfer
 * container: the array is new, the shapes are borrowed. */
GPtrArray *ps_shape_leaves (const PsShape *s);
/* Text form "f32[8,16]{1,0}" or "(f32[8], s32[])". transfer full. */
char *ps_shape_to_string (const PsShape *s, gboolean with_layout);
void ps_shape_append (GString *out, const PsShape *s, gboolean with_layout);

/* Row-major strides of an array shape (rank entries, at least one
 * allocated; transfer full, g_free). */
int64_t *ps_shape_strides (const PsShape *s);
/* Identical shapes, layout and dynamic dims included (ps_shape_equal
 * compares element type and dims only). */
gboolean ps_shape_identical (const PsShape *a, const PsShape *b);
/* Some dim of s (of a leaf, for tuples) is unbounded ("?"). */
gboolean ps_shape_has_unbounded (const PsShape *s);

G_END_DECLS

#endif
