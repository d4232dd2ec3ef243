/* The HLO text printer: writes a module of the graph IR as canonical HLO
 * text, the form `podsim hlo` prints and doc/hlo.md describes.
 *
 * Canonical means: one instruction per line, every result shape written
 * (inferred ones too), operands as bare %names, typed attributes in a fixed
 * order per opcode, then attributes podsim keeps verbatim, then sharding,
 * metadata and backend_config. Reading the output with ps_hlo_parse and
 * printing again gives the same bytes. Output depends only on the module.
 *
 * Ownership: the module is borrowed; returned strings are transfer full.
 */
#ifndef PS_PARTITIONER_HLO_PRINTER_H
#define PS_PARTITIONER_HLO_PRINTER_H

#include <glib.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* All fields FALSE (or opts NULL) = canonical: everything kept. */
typedef struct {
  gboolean omit_shardings;   /* drop sharding= (e.g. to show a program before propagation) */
  gboolean omit_metadata;    /* drop metadata= on instructions and inside shardings */
  gboolean omit_layouts;     /* print shapes without {layouts} */
} PsHloPrintOptions;

char *ps_hlo_print (const PsModule *m, const PsHloPrintOptions *opts);
/* One instruction as its line would read, without indent or newline. */
void ps_hlo_append_instr (GString *out, const PsInstr *in, const PsHloPrintOptions *opts);
char *ps_hlo_instr_to_string (const PsInstr *in, const PsHloPrintOptions *opts);

G_END_DECLS

#endif
