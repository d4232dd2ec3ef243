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

/* `filename` only names the text in error messages (NULL = "<hlo>"). */
PsModule *ps_hlo_parse (const char *text, gsize len, const char *filename, GError **error);

/* Reads a file ("-" = standard input) and parses it. transfer full. */
PsModule *ps_hlo_parse_file (const char *path, GError **error);

G_END_DECLS

#endif
