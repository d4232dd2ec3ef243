/* Check suite for the HLO text reader and printer: the whole conformance
 * corpus reads and prints to a fixed point, the printer matches its golden
 * file, options drop what they say, constants keep their bits, and errors
 * point at the right line and column. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/ir/ir.h"
#include "partitioner/ir/sharding.h"

static char *
src_path (const char *rel)
{
  const char *src = g_getenv ("PS_SRCDIR");
  return g_build_filename (src ? src : PS_SRCDIR, rel, NULL);
}

/* XLA's test vectors, in the tree (tests/data/conformance/NOTICE). */
static char *
corpus_dir (void)
{
  return src_path ("tests/data/conformance");
}

static PsModule *
parse_ok (const char *text, const char *name)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (text, strlen (text), name, &error);
  ck_assert_msg (m != NULL, "%s: %s", name, error ? error->message : "?");
  return m;
}

static void
parse_fails (const char *text, const char *want)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (text, strlen (text), "t.hlo", &error);
  ck_assert_msg (m == NULL, "parsed: %s", text);
  ck_assert_str_eq (error->message, want);
  ck_assert_ptr_null (strchr (error->message, '\n'));
  g_error_free (error);
}

/* Reads every module of one corpus file; prints, reads back, prints again. */
static void
round_trip_file (const char *file)
{
  g_autofree char *dir = corpus_dir ();
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_autofree char *text = NULL;
  ck_assert_msg (g_file_get_contents (path, &text, NULL, NULL), "cannot read %s", path);
  char **lines = g_strsplit (text, "\n", -1);
  JsonParser *jp = json_parser_new ();
  int n = 0;
  for (int i = 0; lines[i]; i++)
    {
      if (!lines[i][0])
        continue;
      ck_assert (json_parser_load_from_data (jp, lines[i], -1, NULL));
      JsonObject *o = json_node_get_object (json_parser_get_root (jp));
      const char *name = json_object_get_string_member (o, "name");
      const char *hlo = json_object_get_string_member (o, "hlo");
      PsModule *m = parse_ok (hlo, name);
      char *p1 = ps_hlo_print (m, NULL);
      PsModule *m2 = parse_ok (p1, name);
      char *p2 = ps_hlo_print (m2, NULL);
      ck_assert_msg (strcmp (p1, p2) == 0, "%s: printing is not a fixed point", name);
      /* The reprinted module has the same instructions and shardings. */
      ck_assert_int_eq (m->computations->len, m2->computations->len);
      for (guint k = 0; k < m->entry->instrs->len; k++)
        {
          PsInstr *a = g_ptr_array_index (m->entry->instrs, k);
          PsInstr *b = g_ptr_array_index (m2->entry->instrs, k);
          ck_assert_str_eq (a->name, b->name);
          ck_assert (ps_shape_equal (a->shape, b->shape));
          ck_assert ((a->sharding == NULL) == (b->sharding == NULL));
          if (a->sharding)
            ck_assert_msg (ps_sharding_equal (a->sharding, b->sharding), "%s: %s", name, a->name);
        }
      g_free (p1);
      g_free (p2);
      ps_module_free (m);
      ps_module_free (m2);
      n++;
    }
  g_object_unref (jp);
  g_strfreev (lines);
  ck_assert_int_gt (n, 100);
}

START_TEST (test_corpus_partitioner)
{
  round_trip_file ("xla-partitioner.jsonl");
}
END_TEST

START_TEST (test_corpus_propagation)
{
  round_trip_file ("xla-propagation.jsonl");
}
END_TEST

START_TEST (test_corpus_propagation_expanded)
{
  round_trip_file ("xla-propagation_expanded.jsonl");
}
END_TEST

START_TEST (test_golden)
{
  g_autofree char *in = src_path ("tests/data/golden/printer_input.hlo");
  g_autofree char *out = src_path ("tests/data/golden/printer_output.hlo");
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse_file (in, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  g_autofree char *got = ps_hlo_print (m, NULL);
  g_autofree char *want = NULL;
  ck_assert (g_file_get_contents (out, &want, NULL, NULL));
  ck_assert_str_eq (got, want);
  /* The golden output is itself canonical. */
  g_autoptr (PsModule) m2 = parse_ok (want, "golden");
  g_autofree char *again = ps_hlo_print (m2, NULL);
  ck_assert_str_eq (again, want);
}
END_TEST

START_TEST (test_typed_attributes)
{
  g_autofree char *in = src_path ("tests/data/golden/printer_input.hlo");
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse_file (in, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  ck_assert_str_eq (m->name, "golden");
  ck_assert_int_eq (m->n_prop_to_output, 1);
  ck_assert (m->prop_to_output[0]);
  PsInstr *sl = ps_module_find_instr (m, "sl");
  ck_assert_int_eq (sl->slice_strides.v[0], 2);
  ck_assert_int_eq (sl->slice_limits.v[1], 3);
  ck_assert_int_eq (sl->shape->layout_n, 2);
  PsInstr *pd = ps_module_find_instr (m, "pd");
  ck_assert_int_eq (pd->n_pad, 2);
  ck_assert_int_eq (pd->padding[1].interior, 1);
  ck_assert_int_eq (pd->shape->layout_n, -1); /* inferred: no layout */
  PsInstr *w = ps_module_find_instr (m, "w");
  ck_assert_int_eq (w->window.n, 2);
  ck_assert_int_eq (w->window.dims[1].pad_hi, 1);
  ck_assert_ptr_eq (w->called[0], ps_module_find_computation (m, "sum"));
  PsInstr *cmp = ps_module_find_instr (m, "cmp");
  ck_assert_int_eq (cmp->comparison, PS_CMP_GE);
  ck_assert_str_eq (cmp->compare_type, "TOTALORDER");
  PsInstr *cc = ps_module_find_instr (m, "cc");
  ck_assert_str_eq (cc->custom_call_target, "Sharding");
  ck_assert_str_eq (cc->backend_config, "unspecified_dims=[0]");
  PsInstr *r = ps_module_find_instr (m, "r");
  ck_assert_str_eq (ps_instr_get_raw_attr (r, "frontend_attributes"), "{k=\"v\"}");
  PsInstr *p = ps_module_find_instr (m, "p");
  ck_assert_str_eq (p->metadata, "op_name=\"in\" source_file=\"a.py\"");
  ck_assert (ps_sharding_is_tiled (p->sharding));
  ck_assert_int_eq (ps_sharding_replication (p->sharding), 2);
  PsInstr *t = ps_module_find_instr (m, "t");
  ck_assert_int_eq (t->shape->n_elems, 7);
  ck_assert_ptr_eq (m->entry->root, ps_module_find_instr (m, "out"));
  ck_assert_int_eq (m->entry->params->len, 2);
  ck_assert_int_eq (p->src_line, 13);
  ck_assert_int_eq (p->src_col, 3);
  /* The module knows its file, so errors at an instruction name it. */
  ck_assert_str_eq (m->source_name, in);
  ps_instr_error (&error, PS_ERROR_INVALID, p, "bad %s", "thing");
  g_autofree char *want = g_strdup_printf ("%s:13:3: p: bad thing", in);
  ck_assert_str_eq (error->message, want);
  g_clear_error (&error);
  g_autoptr (PsModule) c = ps_module_clone (m);
  ck_assert_str_eq (c->source_name, in);
}
END_TEST

START_TEST (test_constants)
{
  static const char text[] =
    "ENTRY e {\n"
    "  a = bf16[3] constant({0.1, -65504, 3.0e38})\n"
    "  b = f16[2] constant({0.1, 65504})\n"
    "  c = c64[2] constant({(1, -2.5), (0, 0)})\n"
    "  d = u64[1] constant({18446744073709551615})\n"
    "  e = s64[] constant(-9223372036854775808)\n"
    "  f = f64[1] constant({0.1})\n"
    "  ROOT t = tuple(a, b, c, d, e, f)\n"
    "}\n";
  g_autoptr (PsModule) m = parse_ok (text, "consts");
  PsInstr *a = ps_module_find_instr (m, "a");
  uint16_t *bits = a->literal->data;
  ck_assert_uint_eq (bits[0], 0x3dcd); /* bf16 nearest to 0.1 */
  PsInstr *b = ps_module_find_instr (m, "b");
  bits = b->literal->data;
  ck_assert_uint_eq (bits[0], 0x2e66); /* f16 nearest to 0.1 */
  ck_assert_uint_eq (bits[1], 0x7bff); /* f16 max */
  PsInstr *c = ps_module_find_instr (m, "c");
  float *cv = c->literal->data;
  ck_assert (cv[0] == 1.0f && cv[1] == -2.5f);
  PsInstr *d = ps_module_find_instr (m, "d");
  ck_assert (((uint64_t *) d->literal->data)[0] == G_MAXUINT64);
  g_autofree char *p1 = ps_hlo_print (m, NULL);
  ck_assert_ptr_nonnull (strstr (p1, "bf16[3] constant({0.1, -65536, 3e+38})"));
  ck_assert_ptr_nonnull (strstr (p1, "f64[1] constant({0.1})"));
  g_autoptr (PsModule) m2 = parse_ok (p1, "consts2");
  PsInstr *a2 = ps_module_find_instr (m2, "a");
  ck_assert (memcmp (a->literal->data, a2->literal->data, 6) == 0);
  PsInstr *b2 = ps_module_find_instr (m2, "b");
  ck_assert (memcmp (b->literal->data, b2->literal->data, 4) == 0);
}
END_TEST

START_TEST (test_options)
{
  static const char text[] =
    "HloModule m\n"
    "ENTRY e {\n"
    "  ROOT p = f32[8]{0} parameter(0), sharding={devices=[2]0,1 metadata={op_name=\"x\"}}, metadata={op_name=\"y\"}\n"
    "}\n";
  g_autoptr (PsModule) m = parse_ok (text, "opts");
  PsHloPrintOptions o = { .omit_shardings = TRUE };
  g_autofree char *a = ps_hlo_print (m, &o);
  ck_assert_ptr_null (strstr (a, "sharding="));
  ck_assert_ptr_nonnull (strstr (a, "metadata={op_name=\"y\"}"));
  PsHloPrintOptions o2 = { .omit_metadata = TRUE, .omit_layouts = TRUE };
  g_autofree char *b = ps_hlo_print (m, &o2);
  ck_assert_ptr_null (strstr (b, "metadata"));
  ck_assert_ptr_nonnull (strstr (b, "sharding={"));
  ck_assert_ptr_null (strstr (b, "{0}"));
  g_autofree char *c = ps_hlo_print (m, NULL);
  ck_assert_ptr_nonnull (strstr (c, "op_name=\"x\""));
  ck_assert_ptr_nonnull (strstr (c, "f32[8]{0}"));
  g_autofree char *line = ps_hlo_instr_to_string (m->entry->root, &o);
  ck_assert_str_eq (line, "%p = f32[8]{0} parameter(0), metadata={op_name=\"y\"}");
}
END_TEST

START_TEST (test_grammar)
{
  /* Comments anywhere, an instruction spread over lines (opcode included),
   * '%' optional, no ROOT (last is root), no ENTRY (last is entry), a
   * single sharding on a tuple expanded per leaf, /\*index=N*\/ in shapes. */
  static const char text[] =
    "// leading comment\n"
    "ENTRY /* c */ %e {\n"
    "  %p = (f32[4], /*index=1*/ s32[2]) parameter(0), sharding={maximal device=1}\n"
    "  a = f32[4]\n"
    "    get-tuple-element(\n"
    "      p), // trailing\n"
    "    index=0\n"
    "  n =\n"
    "  f32[4]\n"
    "  negate(a)\n"
    "}\n";
  g_autoptr (PsModule) m = parse_ok (text, "grammar");
  ck_assert_str_eq (m->entry->name, "e");
  ck_assert_str_eq (m->entry->root->name, "n");
  ck_assert_int_eq (m->entry->root->opcode, PS_OP_NEGATE);
  PsInstr *p = ps_module_find_instr (m, "p");
  ck_assert (ps_sharding_is_tuple (p->sharding));
  ck_assert_int_eq (p->sharding->n_elems, 2);
}
END_TEST

START_TEST (test_errors)
{
  parse_fails ("ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT q = f32[8] nope(p)\n}\n",
               "t.hlo:3:19: unknown opcode 'nope'");
  /* A sharding error offset maps into the file, across lines. */
  parse_fails ("ENTRY e {\n  ROOT p = f32[8,8] parameter(0),\n    sharding={devices=[2,2]0,1,2}\n}\n",
               "t.hlo:3:28: tile dims need 4 device ids, found 3");
  parse_fails ("ENTRY e {\n  ROOT p = f32[8] parameter(0), sharding={devices=[2]0,1 bogus}\n}\n",
               "t.hlo:2:58: unknown sharding item 'bogus'");
  parse_fails ("ENTRY e {\n  ROOT p = f32[8] parameter(0), index=1, index=2\n}\n",
               "t.hlo:2:42: duplicate attribute 'index'");
  parse_fails ("", "t.hlo:1:1: no computation in the module");
  parse_fails ("ENTRY e {\n  ROOT p = f32[8] parameter(0)\n}\nENTRY e {\n  ROOT p = f32[8] parameter(0)\n}\n",
               "t.hlo:4:7: duplicate computation name 'e'");
  parse_fails ("ENTRY e {\n  ROOT t = tuple()\n  x = f32[] get-tuple-element(t), index=0\n}\n",
               "t.hlo:3:13: tuple index 0 out of range for a tuple of 0");
}
END_TEST

/* XLA's fusion instruction as optimized dumps print it: kind= and calls=
 * typed, the shape inferred from the fused computation's root, printed in
 * XLA's order (kind, then calls) as a fixed point; bad kinds, missing
 * attributes and operand counts are located errors. */
START_TEST (test_fusion)
{
  static const char text[] =
    "HloModule f\n"
    "%fused_computation (param_0: f32[4], param_1: f32[4]) -> f32[4] {\n"
    "  %param_0 = f32[4]{0} parameter(0)\n"
    "  %param_1 = f32[4]{0} parameter(1)\n"
    "  %add = f32[4]{0} add(f32[4]{0} %param_0, f32[4]{0} %param_1)\n"
    "  ROOT %exp = f32[4]{0} exponential(%add)\n"
    "}\n"
    "ENTRY %main (a: f32[4], b: f32[4]) -> f32[4] {\n"
    "  %a = f32[4]{0} parameter(0)\n"
    "  %b = f32[4]{0} parameter(1)\n"
    "  ROOT %fusion = fusion(%a, %b), kind=kLoop, calls=%fused_computation, metadata={op_name=\"exp\"}\n"
    "}\n";
  g_autoptr (PsModule) m = parse_ok (text, "fusion");
  PsInstr *f = m->entry->root;
  ck_assert_int_eq (f->opcode, PS_OP_FUSION);
  ck_assert_int_eq (f->fusion_kind, PS_FUSION_LOOP);
  ck_assert_int_eq (f->n_called, 1);
  ck_assert_str_eq (f->called[0]->name, "fused_computation");
  g_autofree char *shape = ps_shape_to_string (f->shape, FALSE);
  ck_assert_str_eq (shape, "f32[4]");
  g_autofree char *p1 = ps_hlo_print (m, NULL);
  ck_assert_msg (strstr (p1, "  ROOT %fusion = f32[4]{0} fusion(%a, %b), kind=kLoop, calls=%fused_computation, "
                         "metadata={op_name=\"exp\"}\n") != NULL, "%s", p1);
  g_autoptr (PsModule) m2 = parse_ok (p1, "fusion2");
  g_autofree char *p2 = ps_hlo_print (m2, NULL);
  ck_assert_str_eq (p1, p2);
  /* the other kinds */
  static const char *const kinds[] = { "kInput", "kOutput", "kCustom" };
  for (gsize k = 0; k < G_N_ELEMENTS (kinds); k++)
    {
      g_autofree char *t = g_strdup_printf ("fc {\n p = f32[2] parameter(0)\n ROOT n = f32[2] negate(p)\n}\n"
                                            "ENTRY e {\n x = f32[2] parameter(0)\n"
                                            " ROOT f = f32[2] fusion(x), kind=%s, calls=fc\n}\n", kinds[k]);
      g_autoptr (PsModule) mk = parse_ok (t, kinds[k]);
      ck_assert_int_eq (mk->entry->root->fusion_kind, PS_FUSION_INPUT + (int) k);
      g_autofree char *pk = ps_hlo_print (mk, NULL);
      g_autofree char *want = g_strdup_printf ("kind=%s, calls=%%fc", kinds[k]);
      ck_assert_msg (strstr (pk, want) != NULL, "%s", pk);
    }
  parse_fails ("fc {\n p = f32[2] parameter(0)\n ROOT n = f32[2] negate(p)\n}\n"
               "ENTRY e {\n x = f32[2] parameter(0)\n ROOT f = f32[2] fusion(x), kind=kFast, calls=fc\n}\n",
               "t.hlo:7:34: unknown fusion kind 'kFast' (kLoop, kInput, kOutput, kCustom)");
  parse_fails ("fc {\n p = f32[2] parameter(0)\n ROOT n = f32[2] negate(p)\n}\n"
               "ENTRY e {\n x = f32[2] parameter(0)\n ROOT f = f32[2] fusion(x), kind=kLoop\n}\n",
               "t.hlo:7:18: fusion 'f' needs attribute 'calls'");
  parse_fails ("fc {\n p = f32[2] parameter(0)\n ROOT n = f32[2] negate(p)\n}\n"
               "ENTRY e {\n x = f32[2] parameter(0)\n ROOT f = f32[2] fusion(x, x), kind=kLoop, calls=fc\n}\n",
               "t.hlo:7:7: fusion 'f' passes 2 operands to 'fc', which takes 1");
  parse_fails ("fc {\n p = f32[2] parameter(0)\n ROOT n = f32[2] negate(p)\n}\n"
               "ENTRY e {\n x = f32[2] parameter(0)\n ROOT f = f32[3] fusion(x), kind=kLoop, calls=fc\n}\n",
               "t.hlo:7:11: shape f32[3] of 'f' does not match f32[2], the shape its fusion produces");
}
END_TEST

/* Reads a file of tests/data/hlo/, prints it, reads the print back and
 * checks the second print is the same. transfer full: the first print. */
static char *
data_fixed_point (const char *file)
{
  g_autofree char *rel = g_build_filename ("tests/data/hlo", file, NULL);
  g_autofree char *path = src_path (rel);
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse_file (path, &error);
  ck_assert_msg (m != NULL, "%s: %s", file, error ? error->message : "");
  char *p1 = ps_hlo_print (m, NULL);
  g_autoptr (PsModule) m2 = parse_ok (p1, file);
  g_autofree char *p2 = ps_hlo_print (m2, NULL);
  ck_assert_msg (strcmp (p1, p2) == 0, "%s: printing is not a fixed point", file);
  return p1;
}

/* XLA's asynchronous collectives and variadic collectives: read with their
 * shapes checked (or inferred), printed as written, a fixed point. */
START_TEST (test_async_and_variadic)
{
  g_autofree char *p = data_fixed_point ("async_collectives.hlo");
  ck_assert (strstr (p, "all-gather-start(%param), dimensions={0}") != NULL);
  ck_assert (strstr (p, "%rs-done = f32[4,8]{1,0} async-done(%rs-update)") != NULL);
  /* shapes of the -done and the starts inferred */
  g_autoptr (PsModule) m = parse_ok (
    "HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y)\n}\n"
    "ENTRY e {\n p = f32[2] parameter(0)\n q = f32[3] parameter(1)\n"
    " s = all-gather-start(p, q), replica_groups={{0,1}}, dimensions={0}\n"
    " d = all-gather-done(s)\n"
    " c = collective-permute-start(p), source_target_pairs={{0,1},{1,0}}\n"
    " cd = collective-permute-done(c)\n"
    " r = reduce-scatter(p, p), replica_groups={{0,1}}, dimensions={0}, to_apply=sum\n"
    " ROOT t = tuple(d, cd, r)\n}\n", "infer");
  g_autofree char *ts = ps_shape_to_string (m->entry->root->shape, FALSE);
  ck_assert_str_eq (ts, "((f32[4], f32[6]), f32[2], (f32[1], f32[1]))");
  g_autofree char *cs = ps_shape_to_string (ps_module_find_instr (m, "c")->shape, FALSE);
  ck_assert_str_eq (cs, "(f32[2], f32[2], u32[], u32[])");
  parse_fails ("ENTRY e {\n p = f32[2] parameter(0)\n"
               " s = (f32[3], f32[4]) all-gather-start(p), replica_groups={{0,1}}, dimensions={0}\n"
               " ROOT d = f32[4] all-gather-done(s)\n}\n",
               "t.hlo:3:23: all-gather-start: the first element of its shape is f32[3], not its operands' f32[2]");
  parse_fails ("ENTRY e {\n p = f32[2] parameter(0)\n ROOT d = f32[4] all-gather-done(p)\n}\n",
               "t.hlo:3:18: all-gather-done takes the tuple its -start returns");
}
END_TEST

/* Inputs that are not HLO text say what they look like; XLA's splat
 * constants and scalar broadcasts without dimensions= read and print back
 * as written; an unbounded dim is a clear error. */
START_TEST (test_other_formats_and_forms)
{
  /* MLIR text goes to the StableHLO reader (test_stablehlo), a text
   * proto to the HloModuleProto reader (test_hlo_proto) */
  parse_fails ("module @jit_f attributes {mhlo.num_partitions = 1 : i32} {\n}\n", "t.hlo:1:1: no function @main");
  parse_fails ("name: \"jit_f\"\nentry_computation_name: \"main\"\n",
               "t.hlo:1:1: the module has no computations");
  parse_fails ("# RUN: hlo-opt %s\nHloModule m\n",
               "t.hlo:1:1: a line starting with '#' (a lit test's RUN line, a script or an MLIR alias?) "
               "is not HLO text; HLO comments are // and /* */");
  parse_fails ("{\"hlo\": \"...\"}\n",
               "t.hlo:1:1: this looks like JSON, not HLO text (podsim reads the text XLA prints: "
               "'HloModule NAME' then computations)");
  /* an unbounded dim reads and prints back (the stages after reading
   * refuse it: hlo_corpus.sh); "<=?" is no shape */
  g_autoptr (PsModule) ub = parse_ok ("ENTRY e {\n  ROOT x = f32[1,?]{1,0} parameter(0)\n}\n", "unbounded");
  PsInstr *ux = ps_module_find_instr (ub, "x");
  ck_assert (ps_shape_has_unbounded (ux->shape));
  ck_assert_int_eq (ux->shape->dynamic[0], 0);
  ck_assert_int_eq (ux->shape->dynamic[1], PS_DIM_UNBOUNDED);
  g_autofree char *us = ps_shape_to_string (ux->shape, TRUE);
  ck_assert_str_eq (us, "f32[1,?]{1,0}");
  parse_fails ("ENTRY e {\n  ROOT x = f32[1,<=?] parameter(0)\n}\n",
               "t.hlo:2:20: expected a bound after '<=', found '?'");
  /* an older dump's "HloModule NAME:" (XLA's lexer drops the colon) */
  g_autoptr (PsModule) colon = parse_ok ("HloModule convolution.167:\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n",
                                         "colon");
  ck_assert_str_eq (colon->name, "convolution.167");
  /* a lit test's // RUN and // CHECK lines are comments */
  g_autoptr (PsModule) lit = parse_ok ("// RUN: hlo-opt %s | FileCheck %s\nHloModule m\nENTRY e {\n"
                                       "  ROOT p = f32[2] parameter(0)\n}\n// CHECK: parameter\n", "lit");
  static const char forms[] =
    "ENTRY e {\n  x = f32[] parameter(0)\n  b = f32[4,8] broadcast(x)\n  c = s8[10] constant(1)\n"
    "  ROOT t = (f32[4,8], s8[10]) tuple(b, c)\n}\n";
  g_autoptr (PsModule) m = parse_ok (forms, "forms");
  PsInstr *c = ps_module_find_instr (m, "c");
  ck_assert_int_eq (c->literal->n, 10);
  ck_assert (c->literal->splat);
  ck_assert_int_eq (((const int8_t *) c->literal->data)[9], 1);
  g_autofree char *p1 = ps_hlo_print (m, NULL);
  ck_assert_msg (strstr (p1, "%c = s8[10] constant(1)\n") != NULL, "%s", p1);
  ck_assert_msg (strstr (p1, "%b = f32[4,8] broadcast(%x), dimensions={}\n") != NULL, "%s", p1);
  g_autoptr (PsModule) m2 = parse_ok (p1, "forms2");
  g_autofree char *p2 = ps_hlo_print (m2, NULL);
  ck_assert_str_eq (p1, p2);
  /* iota replica groups: 0..7 as [4,2], transposed, as 2 groups of 4 */
  g_autoptr (PsModule) io = parse_ok ("s {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT z = f32[] add(x, y)\n}\n"
                                      "ENTRY e {\n p = f32[2] parameter(0)\n ROOT a = f32[2] all-reduce(p), "
                                      "replica_groups=[2,4]<=[4,2]T(1,0), to_apply=s\n}\n", "iota");
  g_autofree char *iop = ps_hlo_print (io, NULL);
  ck_assert_msg (strstr (iop, "replica_groups={{0,2,4,6},{1,3,5,7}}") != NULL, "%s", iop);
  g_autoptr (PsModule) io1 = parse_ok ("ENTRY e {\n p = s32[4] parameter(0)\n ROOT a = s32[32] all-gather(p), "
                                       "dimensions={0}, replica_groups=[1,8]<=[8]\n}\n", "iota1");
  ck_assert_int_eq (io1->entry->root->group_size, 8);
  parse_fails ("ENTRY e {\n p = s32[4] parameter(0)\n ROOT a = s32[32] all-gather(p), "
               "dimensions={0}, replica_groups=[2,8]<=[8]\n}\n",
               "t.hlo:3:65: iota replica groups: [G,S] must hold the 8 ids of the dims after '<=' (and T(...) "
               "name each of those dims once)");
  /* a broadcast of a non-scalar still needs its dimensions */
  parse_fails ("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT b = f32[4,8] broadcast(x)\n}\n",
               "t.hlo:3:21: broadcast 'b' needs attribute 'dimensions'");
}
END_TEST

/* The narrow element types of quantized and fp8 programs: ranges checked,
 * fp8 values rounded to the type, printed so they read back to the same
 * codes. */
START_TEST (test_narrow_types)
{
  static const char text[] =
    "ENTRY e {\n  a = s4[4] constant({-8, -1, 0, 7})\n  b = u4[3] constant({0, 9, 15})\n"
    "  c = f8e4m3fn[4] constant({0.1, 448, -3.5, nan})\n  d = f8e5m2[3] constant({0.1, 57344, -inf})\n"
    "  ROOT t = (s4[4], u4[3], f8e4m3fn[4], f8e5m2[3]) tuple(a, b, c, d)\n}\n";
  g_autoptr (PsModule) m = parse_ok (text, "narrow");
  g_autofree char *p1 = ps_hlo_print (m, NULL);
  ck_assert_msg (strstr (p1, "%c = f8e4m3fn[4] constant({0.1, 448, -3.5, nan})") != NULL, "%s", p1);
  ck_assert_msg (strstr (p1, "%d = f8e5m2[3] constant({0.09, 57344, -inf})") != NULL, "%s", p1);
  ck_assert_int_eq (((const uint8_t *) ps_module_find_instr (m, "c")->literal->data)[0], 0x1d); /* 0.0011.101: 1.625 * 2^-4 */
  g_autoptr (PsModule) m2 = parse_ok (p1, "narrow2");
  g_autofree char *p2 = ps_hlo_print (m2, NULL);
  ck_assert_str_eq (p1, p2);
  parse_fails ("ENTRY e {\n  ROOT a = s4[1] constant({8})\n}\n", "t.hlo:2:28: 8 is out of range for s4");
  parse_fails ("ENTRY e {\n  ROOT a = u4[1] constant({16})\n}\n", "t.hlo:2:28: 16 is out of range for u4");
}
END_TEST

/* HloModuleProto text (partitioner/hlo/hlo_proto.h): each proto of
 * tests/data/hloproto/, written by hand from xla/service/hlo.proto, reads
 * into the IR of the HLO text of the same module beside it (the same
 * printed bytes); several modules split by "// -----"; errors at the
 * proto's FILE:LINE:COL (more in tests/data/bad/bad_proto_*.hlo). */
START_TEST (test_hlo_proto)
{
  static const char *const pairs[] = { "step", "conv", "collectives", "literals", "spmd" };
  for (gsize i = 0; i < G_N_ELEMENTS (pairs); i++)
    {
      g_autofree char *pb = g_strdup_printf ("../hloproto/%s.pbtxt", pairs[i]);
      g_autofree char *hl = g_strdup_printf ("../hloproto/%s.hlo", pairs[i]);
      g_autofree char *a = data_fixed_point (pb);
      g_autofree char *b = data_fixed_point (hl);
      ck_assert_msg (strcmp (a, b) == 0, "%s:\n%s\nvs\n%s", pairs[i], a, b);
    }
  g_autofree char *path = src_path ("tests/data/hloproto/split.pbtxt");
  GError *error = NULL;
  g_autoptr (PsModule) second = ps_hlo_parse_file_module (path, "second", &error);
  ck_assert_msg (second != NULL, "%s", error ? error->message : "");
  ck_assert_str_eq (second->name, "second");
  g_autoptr (PsModule) first = ps_hlo_parse_file (path, &error);
  ck_assert_msg (first != NULL, "%s", error ? error->message : "");
  ck_assert_str_eq (first->name, "first");
  /* the lit-test forms: RUN lines, then hlo_module { ... } or name: ... */
  static const char lit[] =
    "# RUN: xla-translate -hlo-to-mlir-hlo %s | FileCheck %s\n"
    "hlo_module {\n  name: \"main\"\n  entry_computation_id: 4\n  computations {\n    name: \"main.4\"\n"
    "    instructions { name: \"Arg_0.1\" opcode: \"parameter\" id: 1 shape { element_type: S32 layout { } } }\n"
    "    instructions { name: \"Arg_1.2\" opcode: \"parameter\" parameter_number: 1 id: 2\n"
    "      shape { element_type: F32 dimensions: 2 layout { minor_to_major: 0 } is_dynamic_dimension: true } }\n"
    "    instructions { name: \"tuple.3\" opcode: \"tuple\" id: 3 shape { element_type: TUPLE } }\n"
    "    id: 4\n    root_id: 3\n  }\n  host_program_shape { result { element_type: TUPLE } }\n}\n";
  g_autoptr (PsModule) m = parse_ok (lit, "lit");
  g_autofree char *p = ps_hlo_print (m, NULL);
  ck_assert_msg (strstr (p, "%Arg_1.2 = f32[<=2]{0} parameter(1)\n") != NULL, "%s", p);
  ck_assert_msg (strstr (p, "ROOT %tuple.3 = () tuple()\n") != NULL, "%s", p);
  parse_fails ("name: \"m\"\ncomputations {\n  name: \"e\" id: 1\n  instructions { name: \"a\" opcode: \"parameter\" id: 1 "
               "shape { element_type: F32 dimensions: 4 } }\n  instructions { name: \"n\" opcode: \"negate\" id: 2 "
               "operand_ids: 1 shape { element_type: F32 dimensions: 4 } dimensions: 1 }\n}\n",
               "t.hlo:5:108: HloInstructionProto (negate 'n') field 'dimensions' is not read by podsim (doc/hlo.md, "
               "\"HloModuleProto text\" lists the fields it reads)");
  parse_fails ("name: \"m\"\ncomputations {\n  name: \"e\" id: 1\n  instructions { name: \"a\" opcode: \"sine\" id: 1 "
               "shape { element_type: F32 } }\n}\n",
               "t.hlo:4:3: sine takes 1 operand, got 0");
  parse_fails ("name: \"m\" computations { name: \"e\" id: 1 instructions { name: \"a\" opcode: \"parameter\" id: 1 "
               "shape { element_type: F32 } } }\nstack_frame_index { file_names: \"x\\q\" }\n",
               "t.hlo:2:35: unknown escape '\\q' in a string");
}
END_TEST

/* StableHLO text (JAX's default) reads into the same IR as the HLO text of
 * the same program: tests/data/stablehlo/mlp_step.mlir and .hlo, written by
 * hand from the StableHLO spec, print the same; what the reader does not
 * take is refused where it stands. */
START_TEST (test_stablehlo)
{
  g_autofree char *a = data_fixed_point ("../stablehlo/mlp_step.mlir");
  g_autofree char *b = data_fixed_point ("../stablehlo/mlp_step.hlo");
  ck_assert_str_eq (a, b);
  g_autofree char *sa = data_fixed_point ("../stablehlo/slices.mlir");
  g_autofree char *sb = data_fixed_point ("../stablehlo/slices.hlo");
  ck_assert_str_eq (sa, sb);
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<f32>) -> tensor<6xf32> {\n"
               "    %0 = stablehlo.pad %arg0, %arg1, low = [1], high = [1, 0], interior = [0] : "
               "(tensor<4xf32>, tensor<f32>) -> tensor<6xf32>\n    return %0 : tensor<6xf32>\n  }\n}\n",
               "t.hlo:3:5: pad's low, high and interior lists differ in length");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<2xf32> {\n"
               "    %0 = stablehlo.slice %arg0 [1:] : (tensor<4xf32>) -> tensor<2xf32>\n    return %0 : tensor<2xf32>\n  }\n}\n",
               "t.hlo:3:35: expected a number, found ']'");
  g_autofree char *ra = data_fixed_point ("../stablehlo/reduce_region.mlir");
  g_autofree char *rb = data_fixed_point ("../stablehlo/reduce_region.hlo");
  ck_assert_str_eq (ra, rb);
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<f32>) -> tensor<f32> {\n"
               "    %0 = stablehlo.reduce(%arg0 init: %arg1) across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>\n"
               "     reducer(%a: tensor<f32>, %b: tensor<f32>) {\n      %1 = stablehlo.add %a, %b : tensor<f32>\n    }\n"
               "    return %0 : tensor<f32>\n  }\n}\n",
               "t.hlo:4:13: region has no stablehlo.return");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0 = \"stablehlo.negate\"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:10: the generic form of stablehlo.negate is not read (only its pretty form)");
  parse_fails ("module @m {\n  func.func public @main() -> tensor<f32> {\n"
               "    %0 = stablehlo.constant dense<0xFF80> : tensor<f32>\n    return %0 : tensor<f32>\n  }\n}\n",
               "t.hlo:3:5: hexadecimal constant 0xFF80 is not read for f32");
  g_autofree char *ca = data_fixed_point ("../stablehlo/callees.mlir");
  g_autofree char *cb = data_fixed_point ("../stablehlo/callees.hlo");
  ck_assert_str_eq (ca, cb);
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0 = call @f(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n"
               "  func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0 = call @f(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:6:13: function @f calls itself (directly or through others): HLO has no recursion");
  g_autofree char *ha = data_fixed_point ("../stablehlo/chlo.mlir");
  g_autofree char *hb = data_fixed_point ("../stablehlo/chlo.hlo");
  ck_assert_str_eq (ha, hb);
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0 = chlo.lgamma %arg0 : tensor<4xf32> -> tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:10: chlo.lgamma has no single HLO instruction and is not read; JAX's as_text(dialect=\"hlo\") "
               "writes it as the HLO it expands to");
  g_autofree char *n = data_fixed_point ("../stablehlo/negate.mlir");
  ck_assert_msg (strstr (n, "ROOT %v0 = f32[8] negate(%arg0)") != NULL, "%s", n);
  g_autofree char *xa = data_fixed_point ("../stablehlo/argmax.mlir");
  g_autofree char *xb = data_fixed_point ("../stablehlo/argmax.hlo");
  ck_assert_str_eq (xa, xb);
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<f32>) -> tensor<f32> {\n"
               "    %0:2 = stablehlo.reduce(%arg0 init: %arg1) across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>\n"
               "    return %0#0 : tensor<f32>\n  }\n}\n",
               "t.hlo:3:5: stablehlo.reduce has 1 operand but 2 results");
  g_autofree char *wa = data_fixed_point ("../stablehlo/scan.mlir");
  g_autofree char *wb = data_fixed_point ("../stablehlo/scan.hlo");
  ck_assert_str_eq (wa, wb);
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0:2 = stablehlo.while(%iterArg = %arg0) : tensor<4xf32>\n    return %0#0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:5: stablehlo.while has 1 loop variables but 2 results");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0:2 = stablehlo.sort %arg0 : tensor<4xf32>\n    return %0#0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:5: operations with several results are not read yet (stablehlo.while, reduce, scatter, sort and call are)");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0 = stablehlo.fft %arg0 : tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:10: operation stablehlo.fft is not read yet (doc/hlo.md lists what the StableHLO "
               "reader takes)");
  /* Shardy shardings read as the GSPMD shardings of the same meaning */
  g_autofree char *ya = data_fixed_point ("../stablehlo/sdy.mlir");
  g_autofree char *yb = data_fixed_point ("../stablehlo/sdy_mhlo.mlir");
  ck_assert_str_eq (ya, yb);
  ck_assert_msg (strstr (ya, "sharding={devices=[8,1]<=[2,4]T(1,0)}") != NULL, "%s", ya);
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}]>}) "
               "-> tensor<4xf32> {\n    return %arg0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:2:77: unknown mesh @mesh (declare it with sdy.mesh before its use)");
  parse_fails ("module @m {\n  sdy.mesh @mesh = <[\"x\"=2]>\n  func.func public @main(%arg0: tensor<4xf32> {sdy.sharding = "
               "#sdy.sharding<@mesh, [{\"z\"}]>}) -> tensor<4xf32> {\n    return %arg0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:86: mesh @mesh has no axis \"z\"");
  parse_fails ("module @m {\n  sdy.mesh @mesh = <[\"x\"=2]>\n  func.func public @main(%arg0: tensor<4x4xf32> {sdy.sharding = "
               "#sdy.sharding<@mesh, [{\"x\"}, {\"x\"}]>}) -> tensor<4x4xf32> {\n    return %arg0 : tensor<4x4xf32>\n  }\n}\n",
               "t.hlo:3:95: mesh @mesh's axis \"x\" is used twice");
  parse_fails ("module @m {\n  sdy.mesh @mesh = <[\"x\"=4]>\n  func.func public @main(%arg0: tensor<4xf32> {sdy.sharding = "
               "#sdy.sharding<@mesh, [{\"x\":(1)2}]>}) -> tensor<4xf32> {\n    return %arg0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:86: sub-axes (\"x\":(k)n) are not read yet");
  parse_fails ("module @m {\n  sdy.mesh @mesh = <[\"x\"=0]>\n}\n", "t.hlo:2:12: mesh axis \"x\" has size 0 (1 to 65536)");
  /* tensor<?x4xf32> is HLO's f32[?,4] (read and printed; refused after
   * reading), and so is a '?' bound */
  g_autoptr (PsModule) sub = parse_ok ("module @m {\n  func.func public @main(%arg0: tensor<?x4xf32>, %arg1: "
                                       "tensor<?x4xf32, #stablehlo.bounds<?, ?>>) -> tensor<?x4xf32> {\n"
                                       "    return %arg0 : tensor<?x4xf32>\n  }\n}\n", "unbounded mlir");
  g_autofree char *sus = ps_shape_to_string (ps_module_find_instr (sub, "arg1")->shape, FALSE);
  ck_assert_str_eq (sus, "f32[?,4]");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<?x4xf32, #stablehlo.bounds<8>>) -> tensor<4xf32> {\n"
               "    return %arg0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:2:33: #stablehlo.bounds<...> gives 1 bound(s) for a tensor of rank 2");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<?x4xf32, #stablehlo.bounds<x, ?>>) -> tensor<4xf32> {\n"
               "    return %arg0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:2:33: dynamic dimension '?' needs a bound of digits in #stablehlo.bounds<...> or none ('?')");
  /* gather, scatter, convolution and several results: pairs of the same
   * program in both forms, and what is refused */
  static const char *const pairs[] = { "gather", "scatter", "conv", "results", "dynamic" };
  for (gsize i = 0; i < G_N_ELEMENTS (pairs); i++)
    {
      g_autofree char *pm = g_strdup_printf ("../stablehlo/%s.mlir", pairs[i]);
      g_autofree char *ph = g_strdup_printf ("../stablehlo/%s.hlo", pairs[i]);
      g_autofree char *ma = data_fixed_point (pm);
      g_autofree char *hb = data_fixed_point (ph);
      ck_assert_str_eq (ma, hb);
    }
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<1x1xi32>) -> tensor<1xf32> {\n"
               "    %0 = \"stablehlo.gather\"(%arg0, %arg1) <{slice_sizes = array<i64: 1>}> : "
               "(tensor<4xf32>, tensor<1x1xi32>) -> tensor<1xf32>\n    return %0 : tensor<1xf32>\n  }\n}\n",
               "t.hlo:3:5: missing attribute dimension_numbers");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<1x1xi32>) -> tensor<1xf32> {\n"
               "    %0 = \"stablehlo.gather\"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [], "
               "collapsed_slice_dims = [0], start_index_map = [0]>, slice_sizes = array<i64: 1>}> : "
               "(tensor<4xf32>, tensor<1x1xi32>) -> tensor<1xf32>\n    return %0 : tensor<1xf32>\n  }\n}\n",
               "t.hlo:3:5: missing attribute index_vector_dim");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<1x1xi32>) -> tensor<4xf32> {\n"
               "    %0:2 = \"stablehlo.scatter\"(%arg0, %arg0, %arg1, %arg0, %arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
               "    return %0#0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:67: expected '(' to open the update region, found ':'");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<1x1xi32>) -> tensor<4xf32> {\n"
               "    %0 = \"stablehlo.scatter\"(%arg0, %arg1) : (tensor<4xf32>) -> tensor<4xf32>\n"
               "    return %0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:5: stablehlo.scatter of 2 operands and 1 results: it takes n inputs, their indices and n updates "
               "for n results");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<1x4x4x1xf32>, %arg1: tensor<3x3x1x1xf32>) -> tensor<1x2x2x1xf32> {\n"
               "    %0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], "
               "window = {stride = [1, 1, 1]} : (tensor<1x4x4x1xf32>, tensor<3x3x1x1xf32>) -> tensor<1x2x2x1xf32>\n"
               "    return %0 : tensor<1x2x2x1xf32>\n  }\n}\n",
               "t.hlo:3:5: convolution window_strides has 3 entries, expected 2");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<1x4x4x1xf32>, %arg1: tensor<3x3x1x1xf32>) -> tensor<1x2x2x1xf32> {\n"
               "    %0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, 0, 1, f]x[0, 1, i, q]->[b, 0, 1, f], "
               "window = {} : (tensor<1x4x4x1xf32>, tensor<3x3x1x1xf32>) -> tensor<1x2x2x1xf32>\n"
               "    return %0 : tensor<1x2x2x1xf32>\n  }\n}\n",
               "t.hlo:3:5: convolution dimension numbers '[b, 0, 1, f]x[0, 1, i, q]->[b, 0, 1, f]' are not read "
               "(labels b, f, i, o and spatial dims 0 to 9)");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<1x4x4x1xf32>, %arg1: tensor<3x3x1x1xf32>) -> tensor<1x2x2x1xf32> {\n"
               "    %0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]x[b, 0, 1, f], "
               "window = {} : (tensor<1x4x4x1xf32>, tensor<3x3x1x1xf32>) -> tensor<1x2x2x1xf32>\n"
               "    return %0 : tensor<1x2x2x1xf32>\n  }\n}\n",
               "t.hlo:3:5: convolution dimension numbers '[b, 0, 1, f]x[0, 1, i, o]x[b, 0, 1, f]' are not read "
               "(labels b, f, i, o and spatial dims 0 to 9)");
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {\n"
               "    return %arg0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:2:13: function @main returns 1 value but its type has 2 results");
  /* an error the HLO reader finds maps back to the StableHLO position */
  parse_fails ("module @m {\n  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<8xf32>) -> tensor<4xf32> {\n"
               "    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n",
               "t.hlo:3:5: add operands have different shapes f32[4] and f32[8]");
}
END_TEST

/* A file of several modules: the first by default, any by name, and an
 * unknown name lists those there are. */
START_TEST (test_multiple_modules)
{
  static const char text[] =
    "HloModule first\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n\n"
    "HloModule second, num_partitions=2\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n";
  g_autoptr (PsModule) a = parse_ok (text, "two");
  ck_assert_str_eq (a->name, "first");
  GError *error = NULL;
  g_autoptr (PsModule) b = ps_hlo_parse_module (text, strlen (text), "t.hlo", "second", &error);
  ck_assert_msg (b != NULL, "%s", error ? error->message : "");
  ck_assert_str_eq (b->name, "second");
  ck_assert_int_eq (b->num_partitions, 2);
  ck_assert_str_eq (b->entry->root->name, "n");
  PsModule *c = ps_hlo_parse_module (text, strlen (text), "t.hlo", "third", &error);
  ck_assert_ptr_null (c);
  ck_assert_str_eq (error->message, "t.hlo: --module third: no such module (the text has first, second)");
  g_clear_error (&error);
  /* errors in the second module keep the file's line numbers */
  static const char bad[] =
    "HloModule first\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n"
    "HloModule second\nENTRY e {\n  ROOT p = f32[2] nope(p)\n}\n";
  c = ps_hlo_parse_module (bad, strlen (bad), "t.hlo", "second", &error);
  ck_assert_ptr_null (c);
  ck_assert_str_eq (error->message, "t.hlo:7:19: unknown opcode 'nope'");
  g_clear_error (&error);
}
END_TEST

/* input_output_alias in XLA's three spellings, printed in its current one,
 * carried by clones; errors as HloInputOutputAliasConfig::Verify. */
START_TEST (test_input_output_alias)
{
  static const char body[] =
    "\n\nENTRY e {\n  w = f32[4,4] parameter(0)\n  v = (f32[4,4], f32[2]) parameter(1)\n"
    "  g = f32[4,4] multiply(w, w)\n  nv = f32[4,4] get-tuple-element(v), index=0\n"
    "  l = f32[] constant(0)\n"
    "  ROOT t = (f32[], f32[4,4], f32[4,4]) tuple(l, g, nv)\n}\n";
  static const char *const headers[] = {
    "HloModule a, input_output_alias={ {1}: (0, {}, may-alias), {2}: (1, {0}, must-alias) }",
    "HloModule a, input_output_alias={{1}: (0, {}), {2}: (1, {0}, must-alias)}",
  };
  for (int i = 0; i < 2; i++)
    {
      g_autofree char *text = g_strconcat (headers[i], body, NULL);
      g_autoptr (PsModule) m = parse_ok (text, "alias.hlo");
      ck_assert_int_eq (m->n_aliases, 2);
      ck_assert_int_eq (m->aliases[1].parameter, 1);
      ck_assert_int_eq (m->aliases[1].param_index.n, 1);
      ck_assert (m->aliases[1].must_alias && !m->aliases[0].must_alias);
      g_autofree char *printed = ps_hlo_print (m, NULL);
      ck_assert_msg (g_str_has_prefix (printed, headers[0]), "%s", printed);
      g_autoptr (PsModule) c = ps_module_clone (m);
      g_autofree char *again = ps_hlo_print (c, NULL);
      ck_assert_str_eq (printed, again);
    }
  g_autoptr (PsModule) old = parse_ok ("HloModule o, input_output_alias={ {}: 0 }\n\n"
                                       "ENTRY e {\n  p = f32[8] parameter(0)\n"
                                       "  ROOT n = f32[8] negate(p)\n}\n", "old.hlo");
  ck_assert_int_eq (old->n_aliases, 1);
  ck_assert_int_eq (old->aliases[0].output_index.n, 0);
  static const char tail[] = "\n\nENTRY e {\n  p = f32[8] parameter(0)\n  q = f32[2] parameter(1)\n"
                             "  ROOT t = (f32[8], f32[8]) tuple(p, p)\n}\n";
  static const struct { const char *attr, *want; } bad[] = {
    { "{ {2}: (0, {}) }", "t.hlo:1:33: input_output_alias: output {2} is not an element of the entry's result" },
    { "{ {0}: (2, {}) }", "t.hlo:1:33: input_output_alias: parameter 2 {} is not an element of an entry parameter (2 parameters)" },
    { "{ {0}: (1, {}) }", "t.hlo:1:33: input_output_alias: output {0} (32 bytes) and parameter 1 {} (8 bytes) differ in size" },
    { "{ {0}: (0, {}), {1}: (0, {}) }", "t.hlo:1:33: input_output_alias: parameter 0 {} aliased twice" },
    { "{ {0}: (0, {}, maybe) }", "t.hlo:1:48: input_output_alias: unknown kind 'maybe' (may-alias, must-alias)" },
  };
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *text = g_strconcat ("HloModule b, input_output_alias=", bad[i].attr, tail, NULL);
      parse_fails (text, bad[i].want);
    }
}
END_TEST

/* The batch-norm ops as XLA prints them: typed epsilon (a float) and
 * feature_index, required, printed back in XLA's order. */
START_TEST (test_batch_norm)
{
  static const char text[] =
    "HloModule bn\n\n"
    "ENTRY %e (x: f32[2,4,3], s: f32[3], o: f32[3]) -> (f32[2,4,3], f32[2,4,3], (f32[2,4,3], f32[3], f32[3])) {\n"
    "  %x = f32[2,4,3] parameter(0)\n"
    "  %s = f32[3] parameter(1)\n"
    "  %o = f32[3] parameter(2)\n"
    "  %t = (f32[2,4,3], f32[3], f32[3]) batch-norm-training(%x, %s, %o), epsilon=1e-05, feature_index=2\n"
    "  %y = f32[2,4,3] get-tuple-element(%t), index=0\n"
    "  %m = f32[3] get-tuple-element(%t), index=1\n"
    "  %v = f32[3] get-tuple-element(%t), index=2\n"
    "  %i = f32[2,4,3] batch-norm-inference(%x, %s, %o, %m, %v), epsilon=0.001, feature_index=2\n"
    "  %g = (f32[2,4,3], f32[3], f32[3]) batch-norm-grad(%x, %s, %m, %v, %y), epsilon=0.5, feature_index=2\n"
    "  ROOT %r = (f32[2,4,3], f32[2,4,3], (f32[2,4,3], f32[3], f32[3])) tuple(%y, %i, %g)\n"
    "}\n";
  g_autoptr (PsModule) m = parse_ok (text, "bn");
  PsInstr *t = ps_module_find_instr (m, "t");
  ck_assert_int_eq (t->opcode, PS_OP_BATCH_NORM_TRAINING);
  ck_assert_int_eq (t->feature_index, 2);
  ck_assert (t->epsilon == 1e-05f);
  ck_assert (ps_module_find_instr (m, "i")->epsilon == 0.001f);
  ck_assert_int_eq (ps_module_find_instr (m, "g")->opcode, PS_OP_BATCH_NORM_GRAD);
  g_autofree char *out = ps_hlo_print (m, NULL);
  ck_assert_str_eq (out, text);
  /* The shape may be left out: inference gives the tuple. */
  g_autoptr (PsModule) m2 = parse_ok ("ENTRY e {\n  x = f32[2,3] parameter(0)\n  s = f32[3] parameter(1)\n"
                                      "  ROOT t = batch-norm-training(x, s, s), epsilon=1, feature_index=1\n}\n",
                                      "bn2");
  g_autofree char *ts = ps_shape_to_string (m2->entry->root->shape, FALSE);
  ck_assert_str_eq (ts, "(f32[2,3], f32[3], f32[3])");
  parse_fails ("ENTRY e {\n  x = f32[2,3] parameter(0)\n  s = f32[3] parameter(1)\n"
               "  ROOT t = batch-norm-training(x, s, s), feature_index=1\n}\n",
               "t.hlo:4:12: batch-norm-training 't' needs attribute 'epsilon'");
  parse_fails ("ENTRY e {\n  x = f32[2,3] parameter(0)\n  s = f32[3] parameter(1)\n"
               "  ROOT t = batch-norm-training(x, s, s), epsilon=-1, feature_index=1\n}\n",
               "t.hlo:4:50: epsilon must be a finite number >= 0, found '-1'");
  parse_fails ("ENTRY e {\n  x = f32[2,3] parameter(0)\n  s = f32[3] parameter(1)\n"
               "  ROOT t = batch-norm-training(x, s, s), epsilon=x1, feature_index=1\n}\n",
               "t.hlo:4:50: epsilon: 'x1' is not a f32 value");
  parse_fails ("ENTRY e {\n  x = f32[2,3] parameter(0)\n  s = f32[3] parameter(1)\n"
               "  ROOT t = batch-norm-training(x, s, s), epsilon=1, feature_index=0\n}\n",
               "t.hlo:4:12: batch-norm-training: operand 1 is f32[3]; the 2 features of dim 0 of f32[2,3] "
               "need a rank-1 array of that size");
}
END_TEST

START_TEST (test_example)
{
  g_autofree char *path = src_path ("examples/transformer_layer.hlo");
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse_file (path, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  int annotated = 0;
  for (guint i = 0; i < m->entry->instrs->len; i++)
    {
      PsInstr *in = g_ptr_array_index (m->entry->instrs, i);
      if (in->sharding)
        {
          annotated++;
          ck_assert_int_eq (in->opcode, PS_OP_PARAMETER);
        }
    }
  ck_assert_int_eq (annotated, 8);
  /* The activations are split as mesh_split(x, 2x4 mesh, [0, -1, 1]). */
  int64_t mesh[2] = { 2, 4 }, map[3] = { 0, -1, 1 };
  g_autoptr (PsSharding) want = ps_sharding_mesh_split (3, 2, mesh, NULL, map, &error);
  ck_assert (ps_sharding_equal (ps_module_find_instr (m, "x")->sharding, want));
  int64_t map_g[1] = { 1 };
  g_autoptr (PsSharding) want_g = ps_sharding_mesh_split (1, 2, mesh, NULL, map_g, &error);
  ck_assert (ps_sharding_equal (ps_module_find_instr (m, "gamma")->sharding, want_g));
  ck_assert_int_eq (m->num_partitions, 8);
  ck_assert_str_eq (m->entry->root->name, "out");
}
END_TEST


/* XLA's parser takes precisions in any case (StringToPrecision lowercases
 * the name) and literal-valued attributes (a shape, then the value); both
 * from XLA's hlo_to_mhlo/tests/import.hlo. */
START_TEST (test_xla_spellings)
{
  const char *t = "ENTRY e {\n  a = f32[1,4] parameter(0)\n  b = f32[4,1] parameter(1)\n"
                  "  d = f32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={high,highest}\n"
                  "  ROOT c = f32[1,1] custom-call(d), custom_call_target=\"SetBound\", literal=s32[] 1\n}\n";
  PsModule *m = parse_ok (t, "t.hlo");
  g_autofree char *once = ps_hlo_print (m, NULL);
  ck_assert_msg (strstr (once, "operand_precision={HIGH,HIGHEST}") != NULL, "%s", once);
  ck_assert_msg (strstr (once, "literal=s32[] 1") != NULL, "%s", once);
  PsModule *m2 = parse_ok (once, "once.hlo");
  g_autofree char *twice = ps_hlo_print (m2, NULL);
  ck_assert_str_eq (once, twice);
  ps_module_free (m);
  ps_module_free (m2);
}
END_TEST

/* StableHLO's names of XLA's narrow types. */
START_TEST (test_stablehlo_narrow_types)
{
  const char *t = "module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
                  "    %0 = stablehlo.convert %arg0 : (tensor<4xf32>) -> tensor<4xf4E2M1FN>\n"
                  "    %1 = stablehlo.convert %0 : (tensor<4xf4E2M1FN>) -> tensor<4xf8E8M0FNU>\n"
                  "    %2 = stablehlo.convert %1 : (tensor<4xf8E8M0FNU>) -> tensor<4xf8E4M3FNUZ>\n"
                  "    %3 = stablehlo.convert %2 : (tensor<4xf8E4M3FNUZ>) -> tensor<4xi2>\n"
                  "    %4 = stablehlo.convert %3 : (tensor<4xi2>) -> tensor<4xf32>\n"
                  "    return %4 : tensor<4xf32>\n  }\n}\n";
  PsModule *m = parse_ok (t, "t.mlir");
  g_autofree char *once = ps_hlo_print (m, NULL);
  ck_assert_msg (strstr (once, "f4e2m1fn[4] convert") && strstr (once, "f8e8m0fnu[4] convert")
                 && strstr (once, "f8e4m3fnuz[4] convert") && strstr (once, "s2[4] convert"), "%s", once);
  ps_module_free (m);
}
END_TEST

START_TEST (test_collectives)
{
  static const char text[] =
    "HloModule coll, num_partitions=4\n"
    "%sum { %a = f32[] parameter(0)\n %b = f32[] parameter(1)\n ROOT %s = f32[] add(%a, %b) }\n"
    "ENTRY %main {\n"
    "  %p = f32[2,8] parameter(0)\n"
    "  %ag = all-gather(%p), dimensions={0}, replica_groups={{0,1},{2,3}}, channel_id=1, use_global_device_ids=true\n"
    "  %ar = f32[4,8] all-reduce(%ag), to_apply=%sum, replica_groups={{0,1,2,3}}\n"
    "  %rs = reduce-scatter(%ar), dimensions={1}, to_apply=%sum, replica_groups={{0,1,2,3}}\n"
    "  %a2a = f32[4,2] all-to-all(%rs), dimensions={0}, replica_groups={{0,1},{2,3}}\n"
    "  ROOT %cp = f32[4,2] collective-permute(%a2a), source_target_pairs={{0,1},{1,0},{2,3},{3,2}}\n"
    "}\n";
  g_autoptr (PsModule) m = parse_ok (text, "coll");
  PsInstr *ag = ps_module_find_instr (m, "ag");
  g_autofree char *ags = ps_shape_to_string (ag->shape, FALSE);
  ck_assert_str_eq (ags, "f32[4,8]"); /* inferred from the group size */
  ck_assert_int_eq (ag->n_groups, 2);
  ck_assert_int_eq (ag->group_size, 2);
  ck_assert_int_eq (ag->replica_groups[3], 3);
  ck_assert_int_eq (ag->channel_id, 1);
  ck_assert (ag->use_global_device_ids);
  g_autofree char *rss = ps_shape_to_string (ps_module_find_instr (m, "rs")->shape, FALSE);
  ck_assert_str_eq (rss, "f32[4,2]");
  PsInstr *cp = ps_module_find_instr (m, "cp");
  ck_assert_int_eq (cp->n_pairs, 4);
  ck_assert_int_eq (cp->source_target_pairs[5], 3);
  g_autofree char *p1 = ps_hlo_print (m, NULL);
  g_autoptr (PsModule) m2 = parse_ok (p1, "coll2");
  g_autofree char *p2 = ps_hlo_print (m2, NULL);
  ck_assert_str_eq (p1, p2);
  parse_fails ("ENTRY e {\n  p = f32[2,8] parameter(0)\n"
               "  ROOT ag = f32[2,8] all-gather(p), dimensions={0}, replica_groups={{0,1},{2,3}}\n}\n",
               "t.hlo:3:13: shape f32[2,8] of 'ag' does not match f32[4,8], the shape its all-gather produces");
  /* Groups of different sizes: all-reduce only (XLA's verifier). */
  parse_fails ("sum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
               "ENTRY e {\n  p = f32[2,8] parameter(0)\n"
               "  ROOT ag = f32[4,8] all-gather(p), dimensions={0}, replica_groups={{0,1},{2}}\n}\n",
               "t.hlo:8:8: all-gather 'ag': replica groups of different sizes (XLA's verifier takes them for all-reduce only)");
  parse_fails ("ENTRY e {\n  p = f32[2,8] parameter(0)\n"
               "  ROOT ar = f32[2,8] all-reduce(p), replica_groups={{0,1},{}}, to_apply=e\n}\n",
               "t.hlo:3:59: an empty replica group (XLA's verifier refuses them too)");
}
END_TEST

/* Every prefix and a few thousand seeded mutations of a module that uses
 * most of the grammar either read (and then print to a fixed point) or
 * fail with one "m.hlo:LINE:COL: ..." line; none crashes (the sanitizer
 * build runs this too). */
static void
read_or_one_line (const char *text, gsize len)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (text, len, "m.hlo", &error);
  if (!m)
    {
      ck_assert_ptr_nonnull (error);
      ck_assert_msg (g_str_has_prefix (error->message, "m.hlo:"), "%s", error->message);
      ck_assert_ptr_null (strchr (error->message, '\n'));
      g_error_free (error);
      return;
    }
  char *p1 = ps_hlo_print (m, NULL);
  PsModule *m2 = ps_hlo_parse (p1, strlen (p1), "m2.hlo", &error);
  ck_assert_msg (m2 != NULL, "printed text does not read back: %s\n%s", error ? error->message : "", p1);
  char *p2 = ps_hlo_print (m2, NULL);
  ck_assert_str_eq (p1, p2);
  g_free (p1);
  g_free (p2);
  ps_module_free (m);
  ps_module_free (m2);
}

START_TEST (test_mutations)
{
  g_autofree char *in = src_path ("tests/data/golden/printer_input.hlo");
  g_autofree char *text = NULL;
  gsize len = 0;
  ck_assert (g_file_get_contents (in, &text, &len, NULL));
  for (gsize cut = 0; cut < len; cut += 3)
    read_or_one_line (text, cut);
  static const char alphabet[] = "{}()[],=%:/*\"x0-19 \n<>T.abfs";
  GRand *rng = g_rand_new_with_seed (20260601);
  char *buf = g_malloc (len);
  for (int r = 0; r < 3000; r++)
    {
      memcpy (buf, text, len);
      int flips = 1 + g_rand_int_range (rng, 0, 3);
      for (int f = 0; f < flips; f++)
        buf[g_rand_int_range (rng, 0, (gint32) len)] =
          alphabet[g_rand_int_range (rng, 0, (gint32) sizeof alphabet - 1)];
      read_or_one_line (buf, len);
    }
  g_free (buf);
  g_rand_free (rng);
}
END_TEST

static Suite *
hlo_suite (void)
{
  Suite *s = suite_create ("hlo");
  ps_check_case (s, "text", 0,
                 PS_CHECK_TESTS (test_golden, test_typed_attributes,
                                 test_constants, test_options, test_grammar,
                                 test_errors, test_example, test_batch_norm,
                                 test_input_output_alias, test_collectives,
                                 test_xla_spellings,
                                 test_stablehlo_narrow_types, test_mutations,
                                 test_fusion, test_async_and_variadic,
                                 test_multiple_modules,
                                 test_other_formats_and_forms,
                                 test_narrow_types, test_stablehlo,
                                 test_hlo_proto));
  ps_check_case (s, "corpus", 600,
                 PS_CHECK_TESTS (test_corpus_partitioner,
                                 test_corpus_propagation,
                                 test_corpus_propagation_expanded));
  return s;
}

int
main (void)
{
  return ps_check_run (hlo_suite (), CK_FORK_GETENV);
}
