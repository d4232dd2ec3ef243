/* Check suite for partitioner/sharding: the text form over the whole
 * conformance corpus, normalisation, equality, tile geometry, mesh_split and
 * parse errors. */
#include "config.h"

#include <check.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/ir/ir.h"
#include "partitioner/ir/sharding.h"

/* ir.h declares no autoptr for PsShape; a local alias avoids clashing with
 * one added later. */

static PsSharding *
parse_ok (const char *text)
{
  GError *error = NULL;
  PsSharding *s = ps_sharding_from_string (text, "test", &error);
  ck_assert_msg (s != NULL, "'%s' failed: %s", text, error ? error->message : "?");
  return s;
}

static char *
canon (const char *text)
{
  g_autoptr (PsSharding) s = parse_ok (text);
  return ps_sharding_to_string (s);
}

#define ck_assert_canon(in, out) \
  do { \
    g_autofree char *got_ = canon (in); \
    ck_assert_str_eq (got_, out); \
  } while (0)

static gboolean
equal_text (const char *a, const char *b)
{
  g_autoptr (PsSharding) sa = parse_ok (a);
  g_autoptr (PsSharding) sb = parse_ok (b);
  return ps_sharding_equal (sa, sb);
}

/* ---- corpus ------------------------------------------------------------- */

/* XLA's test vectors, in the tree (tests/data/conformance/NOTICE). */
static const char *
corpus_dir (void)
{
  static char *dir;
  if (dir == NULL)
    {
      const char *src = g_getenv ("PS_SRCDIR");
      dir = g_build_filename (src ? src : PS_SRCDIR, "tests", "data", "conformance", NULL);
    }
  return dir;
}

typedef struct {
  int n_checked;
  GHashTable *distinct;
} Corpus;

static void
check_one (Corpus *c, const char *text, gsize len, const char *where)
{
  g_autofree char *str = g_strndup (text, len);
  gsize off = 0;
  GError *error = NULL;
  g_autoptr (PsSharding) s = ps_sharding_parse (text, len, &off, &error);
  ck_assert_msg (s != NULL, "%s: '%s' at %zu: %s", where, str, (size_t) off,
                 error ? error->message : "?");
  /* Printing is canonical: it reparses to an equal sharding and printing
   * that gives the same text. */
  g_autofree char *printed = ps_sharding_to_string (s);
  g_autoptr (PsSharding) again = parse_ok (printed);
  ck_assert_msg (ps_sharding_equal (s, again), "%s: '%s' printed '%s' reparses unequal",
                 where, str, printed);
  g_autofree char *printed2 = ps_sharding_to_string (again);
  ck_assert_str_eq (printed, printed2);
  c->n_checked++;
  g_hash_table_add (c->distinct, g_steal_pointer (&str));
}

/* Every `sharding=` value in an HLO text, found by balancing braces. */
static void
scan_hlo (Corpus *c, const char *hlo, const char *where)
{
  const char *p = hlo;
  while ((p = strstr (p, "sharding=")) != NULL)
    {
      gboolean word_start = p == hlo || !(g_ascii_isalnum (p[-1]) || p[-1] == '_');
      p += strlen ("sharding=");
      if (!word_start || *p != '{')
        continue;
      const char *q = p;
      int depth = 0;
      for (; *q; q++)
        {
          if (*q == '"')
            {
              for (q++; *q && *q != '"'; q++)
                if (*q == '\\' && q[1])
                  q++;
            }
          else if (*q == '{')
            depth++;
          else if (*q == '}' && --depth == 0)
            break;
        }
      ck_assert_msg (*q == '}', "%s: unbalanced sharding", where);
      check_one (c, p, (gsize) (q + 1 - p), where);
      p = q + 1;
    }
}

static void
scan_file (Corpus *c, const char *name)
{
  g_autofree char *path = g_build_filename (corpus_dir (), name, NULL);
  g_autofree char *data = NULL;
  GError *error = NULL;
  ck_assert_msg (g_file_get_contents (path, &data, NULL, &error), "%s",
                 error ? error->message : path);
  g_auto (GStrv) lines = g_strsplit (data, "\n", -1);
  for (int i = 0; lines[i]; i++)
    {
      if (lines[i][0] == '\0')
        continue;
      g_autoptr (JsonParser) jp = json_parser_new ();
      ck_assert (json_parser_load_from_data (jp, lines[i], -1, NULL));
      JsonObject *o = json_node_get_object (json_parser_get_root (jp));
      g_autofree char *where = g_strdup_printf ("%s:%d", name, i + 1);
      scan_hlo (c, json_object_get_string_member (o, "hlo"), where);
      if (!json_object_has_member (o, "expect"))
        continue;
      JsonNode *en = json_object_get_member (o, "expect");
      if (!JSON_NODE_HOLDS_ARRAY (en))
        continue;
      JsonArray *ex = json_node_get_array (en);
      for (guint k = 0; k < json_array_get_length (ex); k++)
        {
          JsonNode *n = json_array_get_element (ex, k);
          if (!JSON_NODE_HOLDS_OBJECT (n))
            continue;
          JsonObject *e = json_node_get_object (n);
          if (!json_object_has_member (e, "sharding"))
            continue;
          JsonNode *sn = json_object_get_member (e, "sharding");
          if (json_node_get_value_type (sn) != G_TYPE_STRING)
            continue;
          const char *t = json_node_get_string (sn);
          check_one (c, t, strlen (t), where);
        }
    }
}

START_TEST (test_corpus)
{
  Corpus c = { 0, g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL) };
  scan_file (&c, "xla-propagation.jsonl");
  scan_file (&c, "xla-propagation_expanded.jsonl");
  scan_file (&c, "xla-partitioner.jsonl");
  /* The corpus has ~3500 sharding occurrences, ~400 distinct texts; a scan
   * that silently found none must not pass. */
  g_print ("corpus: %d shardings, %u distinct\n", c.n_checked, g_hash_table_size (c.distinct));
  ck_assert_int_gt (c.n_checked, 3000);
  ck_assert_int_gt (g_hash_table_size (c.distinct), 350);
  g_hash_table_unref (c.distinct);
}
END_TEST

/* ---- iota and equality --------------------------------------------------- */

START_TEST (test_iota_equals_list)
{
  ck_assert (equal_text ("{devices=[4,2]<=[8]}", "{devices=[4,2]0,1,2,3,4,5,6,7}"));
  ck_assert (equal_text ("{devices=[4,2]<=[2,4]T(1,0)}", "{devices=[4,2]0,4,1,5,2,6,3,7}"));
  ck_assert (equal_text ("{devices=[2,2,4]<=[2,2,4]T(2,1,0)}",
                         "{devices=[2,2,4]0,8,4,12,1,9,5,13,2,10,6,14,3,11,7,15}"));
  ck_assert (equal_text ("{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
                         "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"));
  /* Same dims, other order: different shardings. */
  ck_assert (!equal_text ("{devices=[4,2]<=[8]}", "{devices=[4,2]<=[2,4]T(1,0)}"));
  ck_assert (!equal_text ("{devices=[4,2]<=[8]}", "{devices=[2,4]<=[8]}"));
  ck_assert (!equal_text ("{devices=[2]0,1}", "{devices=[2]1,0}"));
  ck_assert (!equal_text ("{replicated}", "{manual}"));
  ck_assert (!equal_text ("{maximal device=0}", "{maximal device=1}"));
  ck_assert (equal_text ("{maximal device=3}", "{maximal device=3 metadata={op_name=\"x\"}}"));
  /* Metadata is ignored, shard groups are not (except by equal_layout). */
  ck_assert (equal_text ("{replicated metadata={op_name=\"a\"}}", "{replicated}"));
  ck_assert (!equal_text ("{replicated shard_as 1}", "{replicated}"));
  ck_assert (!equal_text ("{replicated shard_as 1}", "{replicated shard_like 1}"));
  ck_assert (!equal_text ("{replicated shard_as 1}", "{replicated shard_as 2}"));
  g_autoptr (PsSharding) a = parse_ok ("{devices=[2]0,1 shard_as 1}");
  g_autoptr (PsSharding) b = parse_ok ("{devices=[2]<=[2]}");
  ck_assert (!ps_sharding_equal (a, b));
  ck_assert (ps_sharding_equal_layout (a, b));
  /* Tuples compare per leaf. */
  ck_assert (equal_text ("{{devices=[2]<=[2]}, {replicated}}", "{{devices=[2]0,1},{replicated}}"));
  ck_assert (!equal_text ("{{devices=[2]0,1}, {replicated}}", "{{replicated}, {devices=[2]0,1}}"));
  ck_assert (!equal_text ("{{replicated}}", "{replicated}"));
  ck_assert (equal_text ("{}", "{ }"));
}
END_TEST

START_TEST (test_print_forms)
{
  /* Iota-representable arrays print in the canonical iota form, others as
   * a list. */
  ck_assert_canon ("{devices=[4,2]0,1,2,3,4,5,6,7}", "{devices=[4,2]<=[8]}");
  ck_assert_canon ("{devices=[4,2]0,4,1,5,2,6,3,7}", "{devices=[4,2]<=[2,4]T(1,0)}");
  ck_assert_canon ("{devices=[2,2,4]0,8,4,12,1,9,5,13,2,10,6,14,3,11,7,15}",
                   "{devices=[2,2,4]<=[2,2,4]T(2,1,0)}");
  /* Non-canonical iota forms print canonically (dims contiguous in both
   * orders merge). */
  ck_assert_canon ("{devices=[8]<=[2,4]}", "{devices=[8]<=[8]}");
  ck_assert_canon ("{devices=[2,4]<=[2,2,2]T(0,1,2)}", "{devices=[2,4]<=[8]}");
  ck_assert_canon ("{devices=[2,2,2]<=[2,2,2]T(1,2,0)}", "{devices=[2,2,2]<=[2,4]T(1,0)}");
  ck_assert_canon ("{devices=[2,1]1,0}", "{devices=[2,1]1,0}");
  ck_assert_canon ("{devices=[4]0,2,1,5}", "{devices=[4]0,2,1,5}");
  ck_assert_canon ("{devices=[2]1,2}", "{devices=[2]1,2}");
  ck_assert_canon ("{devices=[1,1]0}", "{devices=[1,1]<=[1]}");
  ck_assert_canon ("{devices=[1]3}", "{devices=[1]3}");
  ck_assert_canon ("{ maximal  device=2 }", "{maximal device=2}");
  ck_assert_canon ("{unknown shard_like 0}", "{unknown shard_like 0}");
  ck_assert_canon ("{replicated shard_as 3}", "{replicated shard_as 3}");
  ck_assert_canon ("{devices=[2,1]0,1 metadata={op_name=\"b\"}}",
                   "{devices=[2,1]<=[2] metadata={op_name=\"b\"}}");
  ck_assert_canon ("{replicated metadata={{op_name=\"a\"}, {op_name=\"b}\"}}}",
                   "{replicated metadata={{op_name=\"a\"}, {op_name=\"b}\"}}}");
  ck_assert_canon ("{{devices=[2,1]0,1},{manual}}", "{{devices=[2,1]<=[2]}, {manual}}");
  ck_assert_canon ("{\n  /*index=0*/{replicated},\n  // c\n  {maximal device=0}}",
                   "{{replicated}, {maximal device=0}}");
  ck_assert_canon ("{}", "{}");
  ck_assert_canon ("{devices=[1,1,1,4,8]0,1,2,3,4,5,6,7,16,17,18,19,20,21,22,23,24,25\n"
                   "    ,26,27,28,29,30,31,8,9,10,11,12,13,14,15 last_tile_dim_replicate}",
                   "{devices=[1,1,1,4,8]0,1,2,3,4,5,6,7,16,17,18,19,20,21,22,23,24,25,26,27,"
                   "28,29,30,31,8,9,10,11,12,13,14,15 last_tile_dim_replicate}");

  /* Without metadata. */
  g_autoptr (PsSharding) s = parse_ok ("{devices=[2]0,1 metadata={op_name=\"a\"}}");
  GString *out = g_string_new (NULL);
  ps_sharding_append (out, s, FALSE);
  ck_assert_str_eq (out->str, "{devices=[2]<=[2]}");
  g_string_free (out, TRUE);
  ck_assert_str_eq (s->metadata, "{op_name=\"a\"}");
}
END_TEST

/* ---- normalisation ------------------------------------------------------- */

START_TEST (test_normalise)
{
  /* Replication spanning every device. */
  ck_assert_canon ("{devices=[1,1,4]0,1,2,3 last_tile_dim_replicate}", "{replicated}");
  ck_assert_canon ("{devices=[4]<=[4] last_tile_dim_replicate}", "{replicated}");
  ck_assert_canon ("{devices=[1,2,2]0,1,2,3 last_tile_dims={replicated, replicated}}",
                   "{replicated}");
  /* Only manual left. */
  ck_assert_canon ("{devices=[1,4]0,1,2,3 last_tile_dims={manual}}", "{manual}");
  ck_assert_canon ("{devices=[1,2,2]<=[4] last_tile_dims={manual, replicated}}",
                   "{devices=[1,2,2]<=[4] last_tile_dims={manual, replicated}}");
  ck_assert_canon ("{devices=[1,4,1]<=[4] last_tile_dims={manual, replicated}}", "{manual}");
  /* Size-1 trailing replicate dim and size-1 subgroup dims dropped. */
  ck_assert_canon ("{devices=[2,1,1]0,1 last_tile_dim_replicate}", "{devices=[2,1]<=[2]}");
  ck_assert_canon ("{devices=[2,2,1]0,1,2,3 last_tile_dims={manual, replicated}}",
                   "{devices=[2,2]<=[4] last_tile_dims={manual}}");
  ck_assert_canon ("{devices=[2,1,2]3,2,1,0 last_tile_dims={manual, replicated}}",
                   "{devices=[2,2]2,3,0,1 last_tile_dim_replicate}");
  /* Kinds sorted manual first; the array transposed to match. */
  ck_assert_canon ("{devices=[1,1,2,2]0,1,2,3 last_tile_dims={replicated, manual}}",
                   "{devices=[1,1,2,2]<=[2,2]T(1,0) last_tile_dims={manual, replicated}}");
  ck_assert (equal_text ("{devices=[1,1,2,2]0,1,2,3 last_tile_dims={replicated, manual}}",
                         "{devices=[1,1,2,2]0,2,1,3 last_tile_dims={manual, replicated}}"));
  /* Same kinds merged. */
  ck_assert_canon ("{devices=[2,2,2]<=[8] last_tile_dims={replicated, replicated}}",
                   "{devices=[2,4]<=[8] last_tile_dim_replicate}");
  ck_assert_canon ("{devices=[2,2,2]<=[8] last_tile_dims={manual, manual}}",
                   "{devices=[2,4]<=[8] last_tile_dims={manual}}");
  /* last_tile_dim_replicate is last_tile_dims={replicated}. */
  ck_assert (equal_text ("{devices=[2,2]0,1,2,3 last_tile_dims={replicated}}",
                         "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"));
  /* Device ids within each replication group sorted. */
  ck_assert_canon ("{devices=[2,2]3,1,2,0 last_tile_dim_replicate}",
                   "{devices=[2,2]1,3,0,2 last_tile_dim_replicate}");
  ck_assert (equal_text ("{devices=[2,1,2]1,0,3,2 last_tile_dim_replicate}",
                         "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"));
  /* Sorting happens along the replicated dim, not the manual one. */
  ck_assert_canon ("{devices=[1,2,2]3,2,1,0 last_tile_dims={manual, replicated}}",
                   "{devices=[1,2,2]2,3,0,1 last_tile_dims={manual, replicated}}");
  /* Nothing left at all: the one device holds everything. */
  ck_assert_canon ("{devices=[1,1]3 last_tile_dims={manual, replicated}}", "{maximal device=3}");
  /* Plain tiles are not touched, even trivial ones. */
  ck_assert_canon ("{devices=[1,1]0}", "{devices=[1,1]<=[1]}");

  /* The constructors normalise the same way. */
  int64_t dims[] = { 2, 2 };
  int64_t devs[] = { 3, 1, 2, 0 };
  g_autoptr (PsSharding) p = ps_sharding_partial (2, dims, devs);
  g_autofree char *ps = ps_sharding_to_string (p);
  ck_assert_str_eq (ps, "{devices=[2,2]1,3,0,2 last_tile_dim_replicate}");
  int64_t d3[] = { 1, 4 };
  int64_t iota4[] = { 0, 1, 2, 3 };
  g_autoptr (PsSharding) r = ps_sharding_partial (2, d3, iota4);
  ck_assert (ps_sharding_is_replicated (r));
  PsSubgroupKind k2[] = { PS_SUBGROUP_REPLICATED, PS_SUBGROUP_MANUAL };
  int64_t d4[] = { 1, 2, 2 };
  g_autoptr (PsSharding) sg = ps_sharding_subgroup (3, d4, iota4, 2, k2);
  g_autoptr (PsSharding) sg2
    = parse_ok ("{devices=[1,2,2]0,2,1,3 last_tile_dims={manual, replicated}}");
  ck_assert (ps_sharding_equal (sg, sg2));
  g_autoptr (PsSharding) t = ps_sharding_tiled (2, dims, devs);
  g_autofree char *ts = ps_sharding_to_string (t);
  ck_assert_str_eq (ts, "{devices=[2,2]3,1,2,0}");
}
END_TEST

START_TEST (test_copy_queries)
{
  g_autoptr (PsSharding) s = parse_ok ("{devices=[2,1,4]<=[8] last_tile_dim_replicate"
                                       " metadata={op_name=\"q\"} shard_like 2}");
  g_autoptr (PsSharding) c = ps_sharding_copy (s);
  ck_assert (ps_sharding_equal (s, c));
  ck_assert_str_eq (c->metadata, "{op_name=\"q\"}");
  ck_assert_int_eq (c->group_kind, PS_SHARD_GROUP_LIKE);
  ck_assert_int_eq (c->group_id, 2);
  ck_assert (ps_sharding_is_tiled (s));
  ck_assert (!ps_sharding_is_replicated (s));
  ck_assert_int_eq (ps_sharding_data_rank (s), 2);
  ck_assert_int_eq (ps_sharding_num_tiles (s), 2);
  ck_assert_int_eq (ps_sharding_replication (s), 4);
  ck_assert (!ps_sharding_has_manual_subgroup (s));
  ck_assert (ps_sharding_uses_device (s, 7));
  ck_assert (!ps_sharding_uses_device (s, 8));
  ck_assert_int_eq (ps_sharding_min_devices (s), 8);
  int64_t idx[3];
  ck_assert (ps_sharding_device_index (s, 6, idx));
  ck_assert_int_eq (idx[0], 1);
  ck_assert_int_eq (idx[1], 0);
  ck_assert_int_eq (idx[2], 2);
  ck_assert (!ps_sharding_device_index (s, 9, idx));

  g_autoptr (PsSharding) m = parse_ok ("{devices=[2,2]0,2,1,3 last_tile_dims={manual}}");
  ck_assert (ps_sharding_has_manual_subgroup (m));
  ck_assert_int_eq (ps_sharding_replication (m), 1);
  ck_assert (!ps_sharding_is_manual (m));

  g_autoptr (PsSharding) t = parse_ok ("{{maximal device=5}, {replicated}, {manual}}");
  ck_assert (ps_sharding_is_tuple (t));
  ck_assert_int_eq (ps_sharding_min_devices (t), 6);
  ck_assert (!ps_sharding_is_replicated (t));
  g_autoptr (PsSharding) l1 = ps_sharding_leaf (t, 1);
  ck_assert (ps_sharding_is_replicated (l1));
  g_autoptr (PsSharding) l0 = ps_sharding_leaf (t, 0);
  ck_assert (ps_sharding_is_maximal (l0));
  g_autoptr (PsSharding) lr = ps_sharding_leaf (l1, 3);
  ck_assert (ps_sharding_is_replicated (lr));
  g_autoptr (PsSharding) rt = parse_ok ("{{replicated}, {replicated}}");
  ck_assert (ps_sharding_is_replicated (rt));
  g_autoptr (PsSharding) empty = parse_ok ("{}");
  ck_assert (ps_sharding_is_tuple (empty));
  ck_assert_int_eq (empty->n_elems, 0);
  g_autoptr (PsSharding) rr = ps_sharding_replicated ();
  ck_assert_int_eq (ps_sharding_min_devices (rr), 0);
}
END_TEST

START_TEST (test_tuple_construct)
{
  PsSharding *inner[] = { ps_sharding_replicated (), ps_sharding_maximal (1) };
  PsSharding *elems[] = { ps_sharding_manual (), ps_sharding_tuple (2, inner) };
  g_autoptr (PsSharding) t = ps_sharding_tuple (2, elems);
  /* Nested tuples flatten to leaves, depth first. */
  ck_assert_int_eq (t->n_elems, 3);
  g_autofree char *txt = ps_sharding_to_string (t);
  ck_assert_str_eq (txt, "{{manual}, {replicated}, {maximal device=1}}");

  int64_t d[] = { 2, 3 };
  g_autoptr (PsShape) a = ps_shape_new_array (PS_F32, 2, d);
  g_autoptr (PsShape) sc = ps_shape_new_scalar (PS_S32);
  PsShape *in_elems[] = { a, sc };
  g_autoptr (PsShape) in = ps_shape_new_tuple (2, in_elems);
  PsShape *out_elems[] = { in, a };
  g_autoptr (PsShape) tup = ps_shape_new_tuple (2, out_elems);
  g_autoptr (PsSharding) one = parse_ok ("{devices=[2,1]0,1}");
  g_autoptr (PsSharding) ex = ps_sharding_expand_to_shape (one, tup);
  ck_assert (ps_sharding_is_tuple (ex));
  ck_assert_int_eq (ex->n_elems, 3);
  for (int i = 0; i < 3; i++)
    ck_assert (ps_sharding_equal (ex->elems[i], one));
  g_autoptr (PsSharding) same = ps_sharding_expand_to_shape (one, a);
  ck_assert (ps_sharding_equal (same, one));
  g_autoptr (PsSharding) ex2 = ps_sharding_expand_to_shape (ex, tup);
  ck_assert (ps_sharding_equal (ex2, ex));
}
END_TEST

/* ---- tile geometry ------------------------------------------------------- */

START_TEST (test_tile_bounds)
{
  int64_t d[] = { 10, 3 };
  g_autoptr (PsShape) shape = ps_shape_new_array (PS_F32, 2, d);
  g_autoptr (PsSharding) s = parse_ok ("{devices=[4,1]3,2,1,0}");
  g_autoptr (PsShape) local = ps_sharding_tile_shape (s, shape);
  ck_assert_int_eq (local->rank, 2);
  ck_assert_int_eq (local->dims[0], 3);
  ck_assert_int_eq (local->dims[1], 3);
  int64_t off[2], lim[2];
  /* Device 3 holds tile 0, device 0 holds the short last tile. */
  ck_assert (ps_sharding_tile_bounds (s, shape, 3, off, lim));
  ck_assert_int_eq (off[0], 0);
  ck_assert_int_eq (lim[0], 3);
  ck_assert_int_eq (off[1], 0);
  ck_assert_int_eq (lim[1], 3);
  ck_assert (ps_sharding_tile_bounds (s, shape, 1, off, lim));
  ck_assert_int_eq (off[0], 6);
  ck_assert_int_eq (lim[0], 9);
  ck_assert (ps_sharding_tile_bounds (s, shape, 0, off, lim));
  ck_assert_int_eq (off[0], 9);
  ck_assert_int_eq (lim[0], 10);
  ck_assert (!ps_sharding_tile_bounds (s, shape, 4, off, lim));

  /* 5 over 4: tiles of 2, the last one empty. */
  int64_t d5[] = { 5 };
  g_autoptr (PsShape) s5 = ps_shape_new_array (PS_BF16, 1, d5);
  g_autoptr (PsSharding) t4 = parse_ok ("{devices=[4]<=[4]}");
  g_autoptr (PsShape) l5 = ps_sharding_tile_shape (t4, s5);
  ck_assert_int_eq (l5->dims[0], 2);
  ck_assert_int_eq (l5->etype, PS_BF16);
  ck_assert (ps_sharding_tile_bounds (t4, s5, 2, off, lim));
  ck_assert_int_eq (off[0], 4);
  ck_assert_int_eq (lim[0], 5);
  ck_assert (ps_sharding_tile_bounds (t4, s5, 3, off, lim));
  ck_assert_int_eq (off[0], 5);
  ck_assert_int_eq (lim[0], 5);

  /* Partial replication: both members of a group hold the same tile. */
  int64_t d8[] = { 8, 6 };
  g_autoptr (PsShape) s8 = ps_shape_new_array (PS_F32, 2, d8);
  g_autoptr (PsSharding) pr = parse_ok ("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  g_autoptr (PsShape) l8 = ps_sharding_tile_shape (pr, s8);
  ck_assert_int_eq (l8->dims[0], 4);
  ck_assert_int_eq (l8->dims[1], 6);
  ck_assert (ps_sharding_tile_bounds (pr, s8, 3, off, lim));
  ck_assert_int_eq (off[0], 4);
  ck_assert_int_eq (lim[0], 8);
  ck_assert (ps_sharding_tile_bounds (pr, s8, 2, off, lim));
  ck_assert_int_eq (off[0], 4);

  /* Replicated and maximal. */
  g_autoptr (PsSharding) rep = ps_sharding_replicated ();
  ck_assert (ps_sharding_tile_bounds (rep, s8, 17, off, lim));
  ck_assert_int_eq (lim[0], 8);
  g_autoptr (PsSharding) mx = ps_sharding_maximal (1);
  ck_assert (ps_sharding_tile_bounds (mx, s8, 1, off, lim));
  ck_assert (!ps_sharding_tile_bounds (mx, s8, 0, off, lim));
  g_autoptr (PsShape) full = ps_sharding_tile_shape (rep, s8);
  ck_assert (ps_shape_equal (full, s8));

  /* Tuples per leaf. */
  PsShape *elems[] = { s8, s5 };
  g_autoptr (PsShape) tup = ps_shape_new_tuple (2, elems);
  g_autoptr (PsSharding) ts = parse_ok ("{{devices=[1,2]0,1}, {devices=[2]1,0}}");
  g_autoptr (PsShape) lt = ps_sharding_tile_shape (ts, tup);
  ck_assert_int_eq (lt->elems[0]->dims[0], 8);
  ck_assert_int_eq (lt->elems[0]->dims[1], 3);
  ck_assert_int_eq (lt->elems[1]->dims[0], 3);
}
END_TEST

/* ---- mesh_split ------------------------------------------------------------ */

static char *
mesh_split_text (int rank, int mesh_rank, const int64_t *mesh_dims, const int64_t *devs,
                 const int64_t *mapping)
{
  GError *error = NULL;
  g_autoptr (PsSharding) s = ps_sharding_mesh_split (rank, mesh_rank, mesh_dims, devs, mapping,
                                                     &error);
  ck_assert_msg (s != NULL, "%s", error ? error->message : "?");
  return ps_sharding_to_string (s);
}

#define ck_assert_mesh(rank, mr, md, devs, map, want) \
  do { \
    g_autofree char *got_ = mesh_split_text (rank, mr, md, devs, map); \
    ck_assert_str_eq (got_, want); \
  } while (0)

START_TEST (test_mesh_split)
{
  int64_t mesh[] = { 2, 4 };
  /* Both mesh dims used, in order: the mesh itself. */
  ck_assert_mesh (2, 2, mesh, NULL, ((int64_t[]) { 0, 1 }), "{devices=[2,4]<=[8]}");
  /* Swapped: the mesh transposed. */
  ck_assert_mesh (2, 2, mesh, NULL, ((int64_t[]) { 1, 0 }), "{devices=[4,2]<=[2,4]T(1,0)}");
  /* Unused mesh dims become a replicated subgroup. */
  ck_assert_mesh (2, 2, mesh, NULL, ((int64_t[]) { 0, -1 }),
                  "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
  ck_assert_mesh (2, 2, mesh, NULL, ((int64_t[]) { -1, 0 }),
                  "{devices=[1,2,4]<=[8] last_tile_dim_replicate}");
  ck_assert_mesh (3, 2, mesh, NULL, ((int64_t[]) { -1, 1, -1 }),
                  "{devices=[1,4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}");
  ck_assert_mesh (2, 2, mesh, NULL, ((int64_t[]) { -1, -1 }), "{replicated}");
  ck_assert_mesh (0, 2, mesh, NULL, NULL, "{replicated}");
  /* A 3D mesh with the middle dim unused: groups are mesh rows of dim 1. */
  int64_t m3[] = { 2, 2, 2 };
  ck_assert_mesh (2, 3, m3, NULL, ((int64_t[]) { 2, 0 }),
                  "{devices=[2,2,2]<=[4,2]T(1,0) last_tile_dim_replicate}");
  {
    /* Check the array behind that string by hand: tile (i,j,r) holds mesh
     * device (j, r, i). */
    g_autoptr (PsSharding) s = ps_sharding_mesh_split (2, 3, m3, NULL, (int64_t[]) { 2, 0 }, NULL);
    int64_t want[] = { 0, 2, 4, 6, 1, 3, 5, 7 };
    for (int i = 0; i < 8; i++)
      ck_assert_int_eq (s->devices[i], want[i]);
  }
  /* An explicit device order: replication groups sorted. */
  int64_t m22[] = { 2, 2 };
  int64_t rev[] = { 3, 2, 1, 0 };
  ck_assert_mesh (2, 2, m22, rev, ((int64_t[]) { 0, -1 }),
                  "{devices=[2,1,2]2,3,0,1 last_tile_dim_replicate}");
  ck_assert_mesh (1, 2, m22, rev, ((int64_t[]) { 1 }),
                  "{devices=[2,2]1,3,0,2 last_tile_dim_replicate}");
  ck_assert_mesh (2, 2, m22, rev, ((int64_t[]) { 0, 1 }), "{devices=[2,2]3,2,1,0}");

  /* Errors. */
  GError *error = NULL;
  ck_assert (ps_sharding_mesh_split (2, 2, mesh, NULL, (int64_t[]) { 0, 0 }, &error) == NULL);
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_INVALID));
  ck_assert (strstr (error->message, "used by two") != NULL);
  g_clear_error (&error);
  ck_assert (ps_sharding_mesh_split (1, 2, mesh, NULL, (int64_t[]) { 2 }, &error) == NULL);
  ck_assert (strstr (error->message, "mesh has 2 dims") != NULL);
  g_clear_error (&error);
  int64_t dup[] = { 0, 1, 1, 3 };
  ck_assert (ps_sharding_mesh_split (1, 2, m22, dup, (int64_t[]) { 0 }, &error) == NULL);
  ck_assert (strstr (error->message, "listed twice") != NULL);
  g_clear_error (&error);
}
END_TEST

/* ---- randomised iota forms ------------------------------------------------ */

/* The array of iota form [R]T(perm), computed straight from the definition:
 * output multi-index o has value sum_j o[j] * stride_R[perm[j]]. */
static void
expand_by_definition (int k, const int64_t *r, const int64_t *perm, int64_t *out)
{
  int64_t stride[8], odims[8], idx[8] = { 0 };
  int64_t n = 1;
  for (int i = k - 1; i >= 0; i--)
    {
      stride[i] = n;
      n *= r[i];
    }
  for (int j = 0; j < k; j++)
    odims[j] = r[perm[j]];
  for (int64_t f = 0; f < n; f++)
    {
      int64_t v = 0;
      for (int j = 0; j < k; j++)
        v += idx[j] * stride[perm[j]];
      out[f] = v;
      for (int j = k - 1; j >= 0 && ++idx[j] == odims[j]; j--)
        idx[j] = 0;
    }
}

START_TEST (test_iota_random)
{
  GRand *rng = g_rand_new_with_seed (20260101);
  int n_iota_printed = 0;
  for (int iter = 0; iter < 400; iter++)
    {
      int k = g_rand_int_range (rng, 1, 5);
      int64_t r[8], perm[8], n = 1;
      for (int i = 0; i < k; i++)
        {
          r[i] = g_rand_int_range (rng, 1, 5);
          n *= r[i];
          perm[i] = i;
        }
      for (int i = k - 1; i > 0; i--)
        {
          int j = g_rand_int_range (rng, 0, i + 1);
          int64_t t = perm[i];
          perm[i] = perm[j];
          perm[j] = t;
        }
      /* Tile dims: n split into factors by peeling random divisors. */
      int64_t d[8];
      int nd = 0;
      int64_t rest = n;
      while (nd < 3 && rest > 1)
        {
          int64_t f = g_rand_int_range (rng, 1, (gint32) rest + 1);
          while (rest % f != 0)
            f--;
          d[nd++] = f;
          rest /= f;
        }
      d[nd++] = rest;
      GString *txt = g_string_new ("{devices=[");
      for (int i = 0; i < nd; i++)
        g_string_append_printf (txt, "%s%" G_GINT64_FORMAT, i ? "," : "", d[i]);
      g_string_append (txt, "]<=[");
      for (int i = 0; i < k; i++)
        g_string_append_printf (txt, "%s%" G_GINT64_FORMAT, i ? "," : "", r[i]);
      g_string_append (txt, "]T(");
      for (int i = 0; i < k; i++)
        g_string_append_printf (txt, "%s%" G_GINT64_FORMAT, i ? "," : "", perm[i]);
      g_string_append (txt, ")}");
      g_autoptr (PsSharding) s = parse_ok (txt->str);
      int64_t want[256];
      expand_by_definition (k, r, perm, want);
      ck_assert_int_eq (s->n_devices, n);
      for (int64_t i = 0; i < n; i++)
        ck_assert_msg (s->devices[i] == want[i], "%s: element %" G_GINT64_FORMAT, txt->str, i);
      /* The explicit list compares equal, and both print the same. */
      GString *list = g_string_new ("{devices=[");
      for (int i = 0; i < nd; i++)
        g_string_append_printf (list, "%s%" G_GINT64_FORMAT, i ? "," : "", d[i]);
      g_string_append_c (list, ']');
      for (int64_t i = 0; i < n; i++)
        g_string_append_printf (list, "%s%" G_GINT64_FORMAT, i ? "," : "", want[i]);
      g_string_append_c (list, '}');
      g_autoptr (PsSharding) l = parse_ok (list->str);
      ck_assert (ps_sharding_equal (s, l));
      g_autofree char *ps = ps_sharding_to_string (s);
      g_autofree char *pl = ps_sharding_to_string (l);
      ck_assert_str_eq (ps, pl);
      /* Every such array is an iota form, so it must print as one. */
      ck_assert_msg (strstr (ps, "<=[") != NULL, "%s printed %s", txt->str, ps);
      n_iota_printed++;
      g_autoptr (PsSharding) again = parse_ok (ps);
      ck_assert (ps_sharding_equal (again, s));
      g_string_free (txt, TRUE);
      g_string_free (list, TRUE);
    }
  ck_assert_int_eq (n_iota_printed, 400);
  g_rand_free (rng);
}
END_TEST

START_TEST (test_partial_random)
{
  /* Shuffling devices inside replication groups never changes a partially
   * replicated sharding; moving a device to another group does. */
  GRand *rng = g_rand_new_with_seed (7);
  for (int iter = 0; iter < 200; iter++)
    {
      int64_t tiles = g_rand_int_range (rng, 2, 5), group = g_rand_int_range (rng, 2, 5);
      int64_t n = tiles * group, a[32], b[32];
      for (int64_t i = 0; i < n; i++)
        a[i] = i;
      for (int64_t i = n - 1; i > 0; i--)
        {
          int64_t j = g_rand_int_range (rng, 0, (gint32) i + 1), t = a[i];
          a[i] = a[j];
          a[j] = t;
        }
      memcpy (b, a, sizeof (a));
      for (int64_t g = 0; g < n; g += group)
        for (int64_t i = group - 1; i > 0; i--)
          {
            int64_t j = g_rand_int_range (rng, 0, (gint32) i + 1), t = b[g + i];
            b[g + i] = b[g + j];
            b[g + j] = t;
          }
      int64_t dims[] = { tiles, 1, group };
      g_autoptr (PsSharding) sa = ps_sharding_partial (3, dims, a);
      g_autoptr (PsSharding) sb = ps_sharding_partial (3, dims, b);
      ck_assert (ps_sharding_equal (sa, sb));
      for (int64_t g = 0; g < n; g += group)
        for (int64_t i = 1; i < group; i++)
          ck_assert (sa->devices[g + i - 1] < sa->devices[g + i]);
      /* Swap across the first two groups. */
      int64_t t = b[0];
      b[0] = b[group];
      b[group] = t;
      g_autoptr (PsSharding) sc = ps_sharding_partial (3, dims, b);
      ck_assert (!ps_sharding_equal (sa, sc));
    }
  g_rand_free (rng);
}
END_TEST

START_TEST (test_mutations)
{
  /* Malformed input must give a sharding or an error with an offset inside
   * the text, never a crash (the sanitizer build checks memory too). */
  static const char *const seeds[] = {
    "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate metadata={op_name=\"a\"}}",
    "{devices=[4,2]<=[2,4]T(1,0) last_tile_dims={manual, replicated}}",
    "{{maximal device=0}, {replicated shard_as 1}, {unknown shard_like 2}}",
    "{devices=[2,2,4]<=[2,2,4]T(2,1,0)}",
  };
  static const char alphabet[] = "{}[],<=T()0123456789 _=\"/*\nadeilmnoprstuvx";
  GRand *rng = g_rand_new_with_seed (99);
  int n_ok = 0, n_err = 0;
  for (int iter = 0; iter < 3000; iter++)
    {
      const char *seed = seeds[iter % G_N_ELEMENTS (seeds)];
      g_autofree char *t = g_strdup (seed);
      gsize len = strlen (t);
      int edits = g_rand_int_range (rng, 1, 4);
      for (int e = 0; e < edits; e++)
        {
          gsize at = (gsize) g_rand_int_range (rng, 0, (gint32) len);
          int kind = g_rand_int_range (rng, 0, 3);
          if (kind == 0)
            t[at] = alphabet[g_rand_int_range (rng, 0, sizeof alphabet - 1)];
          else if (kind == 1)
            {
              memmove (t + at, t + at + 1, len - at);
              len--;
            }
          else
            len = at;           /* truncate */
          t[len] = '\0';
          if (len == 0)
            break;
        }
      gsize off = 9999;
      GError *error = NULL;
      PsSharding *s = ps_sharding_parse (t, len, &off, &error);
      if (s != NULL)
        {
          g_autofree char *p = ps_sharding_to_string (s);
          g_autoptr (PsSharding) again = parse_ok (p);
          ck_assert (ps_sharding_equal (s, again));
          ps_sharding_free (s);
          n_ok++;
        }
      else
        {
          ck_assert_msg (off <= len, "'%s': offset %zu past the end", t, (size_t) off);
          ck_assert (error != NULL && error->message[0] != '\0');
          g_error_free (error);
          n_err++;
        }
    }
  ck_assert_int_gt (n_err, 1000);
  ck_assert_int_gt (n_ok, 10);
  g_rand_free (rng);
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

typedef struct {
  const char *text;
  gsize offset;
  const char *message;
} BadCase;

static const BadCase bad_cases[] = {
  { "", 0, "expected '{'" },
  { "replicated", 0, "expected '{'" },
  { "{replicated", 0, "unterminated sharding" },
  { "{replicatd}", 1, "unknown sharding item 'replicatd'" },
  { "{maximal}", 1, "needs 'device=N'" },
  { "{maximal device=}", 16, "expected device id" },
  { "{replicated device=3}", 19, "belongs to a maximal" },
  { "{replicated devices=[2]0,1}", 12, "two kinds" },
  { "{devices=[2,2]0,1,2}", 14, "need 4 device ids, found 3" },
  { "{devices=[2,2]0,1,2,3,4}", 22, "more device ids" },
  { "{devices=[2,2]0,1,2,2}", 20, "device 2 appears twice" },
  { "{devices=[2,2]<=[3]}", 14, "iota reshape dims hold 3 devices" },
  { "{devices=[2,2]<=[2,2]T(0,0)}", 25, "transpose dim 0 appears twice" },
  { "{devices=[2,2]<=[2,2]T(0,2)}", 25, "out of range" },
  { "{devices=[2,2]<=[2,2]T(0)}", 21, "transpose has 1 dims" },
  { "{devices=[2,2]<2,2]}", 14, "expected '<='" },
  { "{devices=[0,2]0}", 10, "at least 1" },
  { "{devices=[-1]0}", 10, "must not be negative" },
  { "{devices=[2]0,-1}", 14, "must not be negative" },
  { "{devices=[2,3}", 13, "expected ']'" },
  { "{devices=2]0,1}", 9, "expected '['" },
  { "{devices=[2]0,1 last_tile_dims={foo}}", 32, "expected 'manual' or 'replicated'" },
  { "{devices=[2]0,1 last_tile_dims={manual, manual}}", 16, "2 subgroup dims" },
  { "{devices=[2]0,1 last_tile_dim_replicate last_tile_dim_replicate}", 40, "given twice" },
  { "{replicated last_tile_dim_replicate}", 12, "need a tiled sharding" },
  { "{replicated} x", 13, "unexpected text after" },
  { "{{replicated}, {manual}", 23, "expected '}'" },
  { "{{replicated}, manual}", 15, "expected '{'" },
  { "{{replicated} {manual}}", 14, "expected '}'" },
  { "{replicated metadata=op}", 21, "expected '{' after 'metadata='" },
  { "{replicated metadata={op_name=\"a}}", 21, "unterminated string" },
  { "{replicated shard_as}", 20, "expected shard group id" },
  { "{replicated shard_as 1 shard_like 2}", 23, "shard group given twice" },
  { "{}}", 2, "unexpected text after" },
  { "{devices=[99999999,99999999]<=[1]}", 9, "more than" },
  { "{devices=[2]0,99999999999999999999}", 14, "too large" },
  { "{devices=[9999999999999,9999999999999]0}", 9, "more than" },
  { "{replicated,}", 11, "unexpected ','" },
};

START_TEST (test_bad)
{
  const BadCase *b = &bad_cases[_i];
  gsize off = 9999;
  GError *error = NULL;
  PsSharding *s = ps_sharding_parse (b->text, strlen (b->text), &off, &error);
  ck_assert_msg (s == NULL, "'%s' parsed", b->text);
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_PARSE));
  ck_assert_msg (strstr (error->message, b->message) != NULL, "'%s': message '%s' lacks '%s'",
                 b->text, error->message, b->message);
  ck_assert_msg (off == b->offset, "'%s': offset %zu, want %zu (%s)", b->text, (size_t) off,
                 (size_t) b->offset, error->message);
  g_error_free (error);
}
END_TEST

START_TEST (test_from_string_position)
{
  GError *error = NULL;
  ck_assert (ps_sharding_from_string ("{devices=[2,2]\n  0,1,1,3}", "f.hlo", &error) == NULL);
  ck_assert_str_eq (error->message, "f.hlo:2:7: device 1 appears twice");
  g_clear_error (&error);
  ck_assert (ps_sharding_from_string ("{bogus}", NULL, &error) == NULL);
  ck_assert_str_eq (error->message, "sharding:1:2: unknown sharding item 'bogus'");
  g_clear_error (&error);
  /* Parsing a sub-range ignores what follows it. */
  gsize off;
  g_autoptr (PsSharding) s = ps_sharding_parse ("{replicated}, foo", 12, &off, NULL);
  ck_assert (s != NULL);
}
END_TEST

/* ps_sharding_share: equal to a copy, its device array one with the
 * original's whichever is freed first; a copy of a shared one has its own. */
START_TEST (test_share)
{
  const char *texts[] = { "{devices=[2,2]0,2,1,3}", "{devices=[2,1,2]3,1,2,0 last_tile_dim_replicate}",
                          "{{replicated}, {devices=[4]3,2,1,0}}", "{maximal device=1}" };
  for (gsize k = 0; k < G_N_ELEMENTS (texts); k++)
    {
      PsSharding *s = ps_sharding_from_string (texts[k], NULL, NULL);
      ck_assert (s != NULL);
      PsSharding *a = ps_sharding_share (s), *b = ps_sharding_share (a);
      PsSharding *c = ps_sharding_copy (b);
      ck_assert (ps_sharding_equal (s, a) && ps_sharding_equal (s, b) && ps_sharding_equal (s, c));
      g_autofree char *ts = ps_sharding_to_string (s), *tb = ps_sharding_to_string (b);
      ck_assert_str_eq (ts, tb);
      const PsSharding *leaf = s->kind == PS_SHARDING_TUPLE ? s->elems[1] : s;
      const PsSharding *bleaf = b->kind == PS_SHARDING_TUPLE ? b->elems[1] : b;
      const PsSharding *cleaf = c->kind == PS_SHARDING_TUPLE ? c->elems[1] : c;
      ck_assert (bleaf->devices == leaf->devices);
      ck_assert (leaf->devices == NULL || cleaf->devices != leaf->devices);
      ck_assert (cleaf->devices_ref == NULL);
      /* The original first: the others still read its array. */
      ps_sharding_free (s);
      ck_assert (ps_sharding_equal (a, c) && ps_sharding_equal (b, c));
      ps_sharding_free (b);
      ck_assert (ps_sharding_equal (a, c));
      ps_sharding_free (a);
      ps_sharding_free (c);
    }
}
END_TEST

/* Findings of tests/fuzz/fuzz_sharding: each tests/data/bad/sharding-*.txt
 * (raw bytes, NULs and CRs included) is refused with the error in its .err
 * sidecar, "OFFSET: message". */
START_TEST (test_bad_files)
{
  const char *src = g_getenv ("PS_SRCDIR");
  g_autofree char *dir = g_build_filename (src ? src : PS_SRCDIR, "tests", "data", "bad", NULL);
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  ck_assert (d != NULL);
  int n = 0;
  const char *name;
  while ((name = g_dir_read_name (d)) != NULL)
    {
      if (!g_str_has_prefix (name, "sharding-") || !g_str_has_suffix (name, ".txt"))
        continue;
      g_autofree char *path = g_build_filename (dir, name, NULL);
      g_autofree char *errpath = g_strconcat (path, ".err", NULL);
      g_autofree char *data = NULL, *want = NULL;
      gsize len = 0;
      ck_assert (g_file_get_contents (path, &data, &len, NULL));
      ck_assert_msg (g_file_get_contents (errpath, &want, NULL, NULL), "%s has no .err", name);
      g_strchomp (want);
      gsize off = 0;
      GError *error = NULL;
      /* Exactly the file's bytes, no NUL after them, as the fuzzer passes
       * them: a read past the end is an ASan error in the sanitizer build. */
      g_autofree char *exact = g_memdup2 (data, len);
      PsSharding *sh = ps_sharding_parse (exact, len, &off, &error);
      ck_assert_msg (sh == NULL, "%s parsed", name);
      g_autofree char *got = g_strdup_printf ("%" G_GSIZE_FORMAT ": %s", off, error->message);
      ck_assert_msg (strcmp (got, want) == 0, "%s: got '%s', want '%s'", name, got, want);
      g_error_free (error);
      n++;
    }
  ck_assert_int_ge (n, 1);
}
END_TEST

static Suite *
sharding_suite (void)
{
  Suite *s = suite_create ("sharding");
  TCase *tc = ps_check_case (s, "sharding_forms_and_queries", 120,
                             PS_CHECK_TESTS (test_corpus,
                                             test_iota_equals_list,
                                             test_print_forms, test_normalise,
                                             test_copy_queries,
                                             test_tuple_construct,
                                             test_tile_bounds, test_mesh_split,
                                             test_iota_random,
                                             test_partial_random));
  tcase_add_loop_test (tc, test_bad, 0, G_N_ELEMENTS (bad_cases));
  tcase_add_test (tc, test_from_string_position);
  tcase_add_test (tc, test_mutations);
  tcase_add_test (tc, test_bad_files);
  tcase_add_test (tc, test_share);
  return s;
}

int
main (void)
{
  return ps_check_run (sharding_suite (), CK_FORK_GETENV);
}
