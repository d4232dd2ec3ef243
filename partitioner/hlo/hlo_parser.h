/* The HLO text reader: turns the text form of an HLO module (the subset XLA's
 * sharding tests use, see tests/data/conformance/HLO_SYNTAX.md and doc/hlo.md)
 * into the graph IR of ir.h.
 *
 * Usage: m = ps_hlo_parse (text, len, "model.hlo", &error). The reader
 * accepts comments anywhere, instructions spread over several lines, omitted
 * result shapes (inferred with ps_infer_shape), layouts, tuple shapes and
 * every attribute of the corpus; attributes it does not interpret are kept
 * verbatim in PsInstr.extra_attrs so that printing round-trips. The result
 * has been checked with ps_module_validate.
 *
 * Errors are one line "FILE:LINE:COL: what is wrong" in PS_ERROR
 * (PS_ERROR_PARSE for text that does not follow the grammar, PS_ERROR_INVALID
 * for well-formed text whose shapes or attributes do not fit).
 *
 * Ownership: the text is borrowed; the module is returned transfer full.
 */
#ifndef PS_PARTITIONER_HLO_PARSER_H
#define PS_PARTITIONER_HLO_PARSER_H

#include <glib.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* `filename` only names the text in error messages (NULL = "<hlo>").
 * A text of several modules (XLA's dumps and tests concatenate them, each
 * starting with an `HloModule NAME` line) gives its first. */
PsModule *ps_hlo_parse (const char *text, gsize len, const char *filename, GError **error);
/* The module called `module` (NULL: the first) of a text of one or more
 * modules; an error lists the names when there is none of that name. */
PsModule *ps_hlo_parse_module (const char *text, gsize len, const char *filename,
                               const char *module, GError **error);

/* Reads a file ("-" = standard input) and parses it. transfer full. */
PsModule *ps_hlo_parse_file (const char *path, GError **error);
PsModule *ps_hlo_parse_file_module (const char *path, const char *module, GError **error);

/* What the stages after reading take: the file's module `module` (NULL:
 * the first), made synchronous by ps_async_make_synchronous
 * (partitioner/ir/async.h: asynchronous pairs and variadic collectives of
 * an optimized dump in the forms the interpreter, partitioner and lowering
 * know; instructions podsim cannot simulate are an error here).
 * transfer full. */
PsModule *ps_hlo_load (const char *path, const char *module, GError **error);

/* The 1-based line and column of byte OFF of TEXT (LEN bytes), for readers
 * of other formats that report errors at a byte offset. */
void ps_hlo_offset_line_col (const char *text, gsize len, gsize off, int *line, int *col);

/* For readers that translate another format into HLO text (StableHLO,
 * HloModuleProto text): each line of the made text HLO carries a comment
 * holding "@OFFSET", the byte offset in the source TEXT (LEN bytes) it came
 * from. Sets *error to E's message (the HLO reader's, on file "<made>") at
 * the source line and column of the failing line's offset in FILE, or at
 * line 0 when that line has none; frees E. */
void ps_hlo_made_error_to_source (GError **error, GError *e, const char *hlo, const char *text, gsize len,
                                  const char *file);

G_END_DECLS

#endif
