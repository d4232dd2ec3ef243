/* HloModuleProto in protobuf text format, read into the same IR as the HLO
 * text of the same module.
 *
 * XLA serializes a module as an HloModuleProto (xla/service/hlo.proto);
 * tools print its text format (`name: "main" computations { ... }`, or an
 * HloProto's `hlo_module { ... }`) where HLO text was wanted: XLA's
 * xla-translate lit tests, --xla_dump_hlo_as_text=false dumps converted
 * with protoc --decode, TF and JAX debugging. The reader parses the text
 * format into a tree, writes one HLO text instruction per
 * HloInstructionProto (operand_ids and called_computation_ids become names,
 * ShapeProto, OpSharding, Window, the dimension numbers, LiteralProto and
 * the other fields their HLO text attributes) and reads that text with the
 * HLO reader (ps_hlo_parse_module), so shapes, attributes and shardings are
 * checked by the same code as HLO text's. doc/hlo.md ("HloModuleProto
 * text") lists the fields it reads and those it skips.
 *
 * Errors name FILE:LINE:COL of the proto text: a field podsim does not
 * read that has a value other than its default is refused, naming it; an
 * error of the HLO reader is reported at the instruction it came from.
 * Several modules separated by `// -----` lines (xla-translate's
 * -split-input-file) are several modules of one text.
 *
 * Ownership: the text is borrowed; results are transfer full.
 */
#ifndef PS_PARTITIONER_HLO_PROTO_H
#define PS_PARTITIONER_HLO_PROTO_H

#include <glib.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* Whether the text begins like protobuf text format (after blanks and
 * '#' lines): `word:` or `word {` then `word:`. */
gboolean ps_hlo_proto_looks_like (const char *text, gsize len);

/* The HLO text the reader makes of `text` (for tests); NULL with an
 * error. */
char *ps_hlo_proto_to_hlo_text (const char *text, gsize len, const char *filename, GError **error);

/* The module `module` (NULL: the first) of the text. */
PsModule *ps_hlo_proto_parse (const char *text, gsize len, const char *filename, const char *module,
                              GError **error);

G_END_DECLS

#endif
