/* Private to hlo_*.c (partitioner/hlo/, private prefix hl_; see
 * doc/architecture.md): literal values and the text forms of attributes that
 * the reader and the printer must agree on. Other modules use hlo_parser.h
 * and hlo_printer.h.
 */
#ifndef PS_PARTITIONER_HLO_PRIVATE_H
#define PS_PARTITIONER_HLO_PRIVATE_H

#include <glib.h>
#include <stdint.h>

#include "common/checked.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* Stores one scalar written as `tok` (len bytes: "1", "-2.5", "inf",
 * "true") into element `i` of `lit`. `im` is the imaginary part for complex
 * types (NULL otherwise). FALSE with a message (transfer full) when the text
 * is not a value of the literal's type. */
gboolean hl_literal_store (PsLiteral *lit, int64_t i, const char *tok, gsize len,
                           const char *im, gsize im_len, char **why);
/* Appends element i in the canonical text form (reparses to the same bits). */
void hl_literal_append_elem (GString *out, const PsLiteral *lit, int64_t i);
/* Appends the whole value as written inside constant(...): a scalar for
 * rank 0, else nested braces following `shape`'s dims. */
void hl_literal_append (GString *out, const PsLiteral *lit, const PsShape *shape);

/* dim_labels text ("b01f_01io->b01f") of convolution dimension numbers. */
void hl_conv_dims_append (GString *out, const PsConvDims *d);

G_END_DECLS

#endif
