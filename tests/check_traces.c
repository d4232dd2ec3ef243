/* Step traces: writer -> reader round trips of every event kind, compact
 * group and pair forms, device orders, and the reader's validation errors. */
#include "config.h"

#include <check.h>
#include <glib/gstdio.h>
#include <string.h>
#include <zlib.h>

#include "traces/trace.h"
#include "tests/suite_main.h"

/* A trace on a 2x4 mesh with one event of every kind and form. */
static PsTrace *
sample_trace (void)
{
  PsTrace *t = ps_trace_new ("round trip %odd name");
  gint64 dims[2] = { 2, 4 };
  ps_trace_set_mesh (t, 2, dims, PS_TRACE_ORDER_ARANGE, NULL);
  ps_trace_set_slice (t, "v3-8");
  ps_trace_header (t)->totals.peak_bytes = 1 << 20;

  PsTraceCompute mm = { .op = PS_TRACE_OP_MATMUL, .dtype = PS_TRACE_BF16,
                        .precision = PS_TRACE_PRECISION_HIGHEST, .flops = 2 * 4 * 128 * 256 * 512,
                        .read_bytes = 1000, .write_bytes = 2000, .vector_ops = 7,
                        .has_mxu = TRUE, .mxu_batch = 4, .mxu_m = 128, .mxu_k = 256,
                        .mxu_n = 512 };
  ps_trace_add_compute (t, "fusion.1", &mm);
  PsTraceCompute ew = { .op = PS_TRACE_OP_ELEMENTWISE, .dtype = PS_TRACE_F32,
                        .read_bytes = 64, .write_bytes = 32, .vector_ops = 16 };
  ps_trace_add_compute (t, "add with space", &ew);
  PsTraceCompute red = { .op = PS_TRACE_OP_REDUCE, .dtype = PS_TRACE_F32, .flops = 5,
                         .read_bytes = 8, .write_bytes = 4 };
  ps_trace_add_compute (t, "reduce", &red);

  PsTraceCollective ar = { .kind = PS_TRACE_ALL_REDUCE, .dtype = PS_TRACE_F32,
                           .in_bytes = 4096, .out_bytes = 4096,
                           .groups = { .form = PS_TRACE_GROUPS_AXES, .n_axes = 1, .axes = { 1 } } };
  ps_trace_add_collective (t, "all-reduce.1", &ar);
  PsTraceCollective ag = { .kind = PS_TRACE_ALL_GATHER, .dtype = PS_TRACE_BF16,
                           .in_bytes = 100, .out_bytes = 200, .async_id = 7,
                           .groups = { .form = PS_TRACE_GROUPS_IOTA, .n_groups = 4,
                                       .group_size = 2, .iota_rank = 2,
                                       .iota_dims = { 2, 4 }, .iota_perm = { 1, 0 } } };
  ps_trace_add_collective (t, "all-gather.2", &ag);
  ps_trace_add_compute (t, "overlapped", &ew);
  ps_trace_add_done (t, 7);
  guint32 groups[8] = { 0, 1, 2, 3, 7, 6, 5, 4 };
  PsTraceCollective rs = { .kind = PS_TRACE_REDUCE_SCATTER, .dtype = PS_TRACE_F32,
                           .in_bytes = 400, .out_bytes = 100,
                           .groups = { .form = PS_TRACE_GROUPS_LIST, .n_groups = 2,
                                       .group_size = 4, .devices = groups } };
  ps_trace_add_collective (t, "reduce-scatter", &rs);
  PsTraceCollective a2a = { .kind = PS_TRACE_ALL_TO_ALL, .dtype = PS_TRACE_S32,
                            .in_bytes = 800, .out_bytes = 800,
                            .groups = { .form = PS_TRACE_GROUPS_ALL } };
  ps_trace_add_collective (t, "a2a", &a2a);
  PsTraceCollective cp = { .kind = PS_TRACE_COLLECTIVE_PERMUTE, .dtype = PS_TRACE_F32,
                           .in_bytes = 12, .out_bytes = 12,
                           .pairs = { .form = PS_TRACE_PAIRS_SHIFT, .axis = 1, .offset = -1 } };
  ps_trace_add_collective (t, "halo", &cp);
  guint32 pairs[4] = { 3, 0, 0, 5 };
  PsTraceCollective cp2 = { .kind = PS_TRACE_COLLECTIVE_PERMUTE, .dtype = PS_TRACE_F32,
                            .in_bytes = 12, .out_bytes = 12,
                            .pairs = { .form = PS_TRACE_PAIRS_LIST, .n_pairs = 2, .pairs = pairs } };
  ps_trace_add_collective (t, "cp.list", &cp2);
  PsTraceCollective cp3 = { .kind = PS_TRACE_COLLECTIVE_PERMUTE, .dtype = PS_TRACE_F32,
                            .pairs = { .form = PS_TRACE_PAIRS_LIST } };
  ps_trace_add_collective (t, "cp.none", &cp3);
  ps_trace_add_memory (t, 123456);
  return t;
}

static void
assert_events_equal (const PsTraceEvent *a, const PsTraceEvent *b)
{
  ck_assert_int_eq (a->kind, b->kind);
  if (a->name || b->name)
    ck_assert_str_eq (a->name, b->name);
  switch (a->kind)
    {
    case PS_TRACE_EVENT_COMPUTE:
      {
        const PsTraceCompute *x = &a->compute, *y = &b->compute;
        ck_assert_int_eq (x->op, y->op);
        ck_assert_int_eq (x->dtype, y->dtype);
        ck_assert_int_eq (x->precision, y->precision);
        ck_assert_uint_eq (x->flops, y->flops);
        ck_assert_uint_eq (x->read_bytes, y->read_bytes);
        ck_assert_uint_eq (x->write_bytes, y->write_bytes);
        ck_assert_uint_eq (x->vector_ops, y->vector_ops);
        ck_assert_int_eq (x->has_mxu, y->has_mxu);
        ck_assert_uint_eq (x->mxu_batch, y->mxu_batch);
        ck_assert_uint_eq (x->mxu_m, y->mxu_m);
        ck_assert_uint_eq (x->mxu_k, y->mxu_k);
        ck_assert_uint_eq (x->mxu_n, y->mxu_n);
        ck_assert_uint_eq (x->mxu_window, y->mxu_window);
      }
      break;
    case PS_TRACE_EVENT_COLLECTIVE:
      {
        const PsTraceCollective *x = &a->collective, *y = &b->collective;
        ck_assert_int_eq (x->kind, y->kind);
        ck_assert_int_eq (x->dtype, y->dtype);
        ck_assert_uint_eq (x->in_bytes, y->in_bytes);
        ck_assert_uint_eq (x->out_bytes, y->out_bytes);
        ck_assert_uint_eq (x->async_id, y->async_id);
        g_autofree char *gx = ps_trace_groups_to_string (&x->groups);
        g_autofree char *gy = ps_trace_groups_to_string (&y->groups);
        ck_assert_str_eq (gx, gy);
        if (x->kind == PS_TRACE_COLLECTIVE_PERMUTE)
          {
            g_autofree char *px = ps_trace_pairs_to_string (&x->pairs);
            g_autofree char *py = ps_trace_pairs_to_string (&y->pairs);
            ck_assert_str_eq (px, py);
          }
        break;
      }
    case PS_TRACE_EVENT_DONE:
      ck_assert_uint_eq (a->async_id, b->async_id);
      break;
    case PS_TRACE_EVENT_MEMORY:
      ck_assert_uint_eq (a->live_bytes, b->live_bytes);
      break;
    case PS_TRACE_EVENT_LOOP:
      ck_assert_uint_eq (a->trips, b->trips);
      break;
    default:
      break;
    }
}

static char *
tmp_path (const char *name)
{
  return g_build_filename (g_get_tmp_dir (), name, NULL);
}

static void
round_trip (const char *file)
{
  g_autoptr (PsTrace) t = sample_trace ();
  GError *error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("check_traces_XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, file, NULL);
  ck_assert_msg (ps_trace_write (t, path, &error), "%s", error ? error->message : "");
  g_autoptr (PsTrace) back = ps_trace_read (path, &error);
  ck_assert_msg (back != NULL, "%s", error ? error->message : "");
  const PsTraceHeader *h = ps_trace_get_header (back);
  ck_assert_str_eq (h->program, "round trip %odd name");
  ck_assert_str_eq (h->slice, "v3-8");
  ck_assert_uint_eq (h->n_devices, 8);
  ck_assert_uint_eq (h->mesh.rank, 2);
  ck_assert_int_eq (h->mesh.dims[1], 4);
  ck_assert_uint_eq (h->totals.n_events, 13);
  ck_assert_uint_eq (h->totals.flops, 2ull * 4 * 128 * 256 * 512 + 5);
  ck_assert_uint_eq (h->totals.collective_bytes, 4096 + 100 + 400 + 800 + 12 + 12);
  ck_assert_uint_eq (h->totals.peak_bytes, 1 << 20);
  ck_assert_uint_eq (ps_trace_n_events (back), ps_trace_n_events (t));
  for (guint64 i = 0; i < ps_trace_n_events (t); i++)
    assert_events_equal (ps_trace_get_event (t, i), ps_trace_get_event (back, i));
  /* the text form is a fixed point */
  gsize la, lb;
  g_autofree char *ta = ps_trace_to_text (t, &la);
  g_autofree char *tb = ps_trace_to_text (back, &lb);
  ck_assert_uint_eq (la, lb);
  ck_assert (memcmp (ta, tb, la) == 0);
  /* writing twice gives the same bytes (gzip header without time stamp) */
  g_autofree char *path2 = g_build_filename (dir, file, NULL);
  g_autofree char *a = NULL, *b = NULL;
  gsize na, nb;
  ck_assert (g_file_get_contents (path, &a, &na, NULL));
  ck_assert (g_unlink (path) == 0);
  ck_assert (ps_trace_write (back, path2, &error));
  ck_assert (g_file_get_contents (path2, &b, &nb, NULL));
  ck_assert_uint_eq (na, nb);
  ck_assert (memcmp (a, b, na) == 0);
  if (g_str_has_suffix (file, ".gz"))
    ck_assert (na > 2 && (guint8) a[0] == 0x1f && (guint8) a[1] == 0x8b);
  g_unlink (path2);
  g_rmdir (dir);
}

START_TEST (test_round_trip_gz)
{
  round_trip ("t.pst.gz");
}
END_TEST

START_TEST (test_round_trip_plain)
{
  round_trip ("t.pst");
}
END_TEST

START_TEST (test_streaming)
{
  g_autoptr (PsTrace) t = sample_trace ();
  g_autofree char *dir = g_dir_make_tmp ("check_traces_XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "s.pst.gz", NULL);
  GError *error = NULL;
  ck_assert (ps_trace_write (t, path, &error));
  g_autoptr (PsTraceReader) r = ps_trace_reader_open (path, &error);
  ck_assert_ptr_nonnull (r);
  ck_assert_uint_eq (ps_trace_reader_header (r)->n_devices, 8);
  guint64 n = 0;
  const PsTraceEvent *e;
  while (ps_trace_reader_next (r, &e, &error) && e)
    {
      assert_events_equal (ps_trace_get_event (t, n), e);
      n++;
    }
  ck_assert_ptr_null (error);
  ck_assert_uint_eq (n, 13);
  /* after the end it keeps answering "end" */
  ck_assert (ps_trace_reader_next (r, &e, &error) && e == NULL);
  g_unlink (path);
  g_rmdir (dir);
}
END_TEST

static void
assert_ids (const guint32 *got, const guint32 *want, guint64 n)
{
  for (guint64 i = 0; i < n; i++)
    ck_assert_msg (got[i] == want[i], "index %u: got %u, want %u", (guint) i, got[i], want[i]);
}

START_TEST (test_groups_expand)
{
  g_autoptr (PsTrace) t = ps_trace_new ("g");
  gint64 dims[2] = { 2, 4 };
  ps_trace_set_mesh (t, 2, dims, PS_TRACE_ORDER_ARANGE, NULL);
  const PsTraceHeader *h = ps_trace_get_header (t);
  guint64 ng, gs;
  PsTraceGroups g = { .form = PS_TRACE_GROUPS_AXES, .n_axes = 1, .axes = { 1 } };
  g_autofree guint32 *a = ps_trace_groups_expand (&g, h, &ng, &gs);
  ck_assert_uint_eq (ng, 2);
  ck_assert_uint_eq (gs, 4);
  assert_ids (a, (guint32[]) { 0, 1, 2, 3, 4, 5, 6, 7 }, 8);
  g.axes[0] = 0;
  g_autofree guint32 *b = ps_trace_groups_expand (&g, h, &ng, &gs);
  ck_assert_uint_eq (ng, 4);
  assert_ids (b, (guint32[]) { 0, 4, 1, 5, 2, 6, 3, 7 }, 8);
  /* axes listed 1,0: members ordered with axis 1 outer */
  g.n_axes = 2;
  g.axes[0] = 1;
  g.axes[1] = 0;
  g_autofree guint32 *c = ps_trace_groups_expand (&g, h, &ng, &gs);
  ck_assert_uint_eq (ng, 1);
  assert_ids (c, (guint32[]) { 0, 4, 1, 5, 2, 6, 3, 7 }, 8);
  /* iota form equals the transposed arange */
  PsTraceGroups io;
  GError *error = NULL;
  ck_assert (ps_trace_groups_parse ("[4,2]<=[2,4]T(1,0)", &io, &error));
  g_autofree guint32 *d = ps_trace_groups_expand (&io, h, &ng, &gs);
  ck_assert_uint_eq (ng, 4);
  ck_assert_uint_eq (gs, 2);
  assert_ids (d, (guint32[]) { 0, 4, 1, 5, 2, 6, 3, 7 }, 8);
  ps_trace_groups_clear (&io);
  ck_assert (!ps_trace_groups_parse ("axes:0,x", &io, &error));
  ck_assert_str_eq (error->message, "axes:0,x:1:8: expected a number");
  g_clear_error (&error);
  /* axes on an arange_T mesh follow the mesh's device order */
  ps_trace_set_mesh (t, 2, dims, PS_TRACE_ORDER_ARANGE_T, NULL);
  g_autofree guint32 *ids = ps_trace_mesh_device_ids (&h->mesh, NULL);
  assert_ids (ids, (guint32[]) { 0, 2, 4, 6, 1, 3, 5, 7 }, 8);
  g.n_axes = 1;
  g.axes[0] = 1;
  g_autofree guint32 *e = ps_trace_groups_expand (&g, h, &ng, &gs);
  assert_ids (e, (guint32[]) { 0, 2, 4, 6, 1, 3, 5, 7 }, 8);
}
END_TEST

START_TEST (test_nonpod2d)
{
  g_autoptr (PsTrace) t = ps_trace_new ("g");
  gint64 dims[2] = { 4, 4 };
  ps_trace_set_mesh (t, 2, dims, PS_TRACE_ORDER_NONPOD2D, NULL);
  PsTraceHeader *h = ps_trace_header (t);
  h->mesh.physical[0] = 4;
  h->mesh.physical[1] = 2;
  h->mesh.physical[2] = 2;
  GError *error = NULL;
  ck_assert (ps_trace_validate (t, &error));
  g_autofree guint32 *ids = ps_trace_mesh_device_ids (&h->mesh, NULL);
  /* each row is a ring over a chip row's two cores; rows zig-zag 0,2,3,1 */
  assert_ids (ids, (guint32[]) { 0, 2, 3, 1, 8, 10, 11, 9, 12, 14, 15, 13, 4, 6, 7, 5 }, 16);
  h->mesh.physical[0] = 2;
  ck_assert (!ps_trace_validate (t, &error));
  ck_assert (strstr (error->message, "does not hold") != NULL);
  g_clear_error (&error);
}
END_TEST

START_TEST (test_pairs_expand)
{
  g_autoptr (PsTrace) t = ps_trace_new ("p");
  gint64 dims[2] = { 2, 4 };
  ps_trace_set_mesh (t, 2, dims, PS_TRACE_ORDER_ARANGE, NULL);
  const PsTraceHeader *h = ps_trace_get_header (t);
  guint64 n;
  PsTracePairs p = { .form = PS_TRACE_PAIRS_SHIFT, .axis = 1, .offset = 1, .wrap = TRUE };
  g_autofree guint32 *a = ps_trace_pairs_expand (&p, h, &n);
  ck_assert_uint_eq (n, 8);
  assert_ids (a, (guint32[]) { 0, 1, 1, 2, 2, 3, 3, 0, 4, 5, 5, 6, 6, 7, 7, 4 }, 16);
  PsTracePairs q = { .form = PS_TRACE_PAIRS_SHIFT, .axis = 0, .offset = -1 };
  g_autofree guint32 *b = ps_trace_pairs_expand (&q, h, &n);
  ck_assert_uint_eq (n, 4);
  assert_ids (b, (guint32[]) { 4, 0, 5, 1, 6, 2, 7, 3 }, 8);
}
END_TEST

/* ---- validation errors on text ---------------------------------------------------- */

static const char *head =
  "pstrace 1\nprogram p\ndevices 8\nmesh 2x4 order=arange\n"
  "totals events=1 flops=0 read_bytes=0 write_bytes=0 collective_bytes=%s peak_bytes=100\n";

/* A trace whose single event line is `event` (totals adjusted for
 * collective bytes `cbytes`) and a correct end line. */
static char *
one_event (const char *event, const char *cbytes)
{
  GString *s = g_string_new (NULL);
  g_string_append_printf (s, head, cbytes);
  g_string_append_printf (s, "%s\n", event);
  return g_string_free (s, FALSE);
}

/* Appends the correct end line using zlib's crc32, as another tool would. */
static char *
with_end (char *text, guint64 n_events)
{
  uLong crc = crc32 (0L, Z_NULL, 0);
  crc = crc32 (crc, (const Bytef *) text, (uInt) strlen (text));
  char *out = g_strdup_printf ("%send events=%" G_GUINT64_FORMAT " crc32=%08lx\n", text,
                               n_events, (unsigned long) crc);
  g_free (text);
  return out;
}

static void
expect_error (const char *text, const char *want)
{
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_trace_parse ("x.pst", text, strlen (text), &error);
  ck_assert_msg (t == NULL, "accepted:\n%s", text);
  ck_assert_msg (strstr (error->message, want) != NULL, "got '%s', want '%s'",
                 error->message, want);
  g_error_free (error);
}

static void
expect_event_error (const char *event, const char *cbytes, const char *want)
{
  g_autofree char *text = with_end (one_event (event, cbytes), 1);
  expect_error (text, want);
}

START_TEST (test_good_minimal)
{
  g_autofree char *text = with_end (one_event ("memory live_bytes=5", "0"), 1);
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_trace_parse ("x.pst", text, strlen (text), &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  /* a trace built without a name still writes a readable program line */
  g_autoptr (PsTrace) anon = ps_trace_new (NULL);
  ps_trace_set_slice (anon, "");
  gsize len;
  g_autofree char *out = ps_trace_to_text (anon, &len);
  g_autoptr (PsTrace) back = ps_trace_parse ("anon.pst", out, len, &error);
  ck_assert_msg (back != NULL, "%s", error ? error->message : "");
  ck_assert_str_eq (ps_trace_get_header (back)->program, "unnamed");
  ck_assert_ptr_null (ps_trace_get_header (back)->slice);
}
END_TEST

/* A convolution keeps its window apart from the contracted features. */
START_TEST (test_conv_window)
{
  const char *ev = "compute conv name=c dtype=bf16 flops=0 read_bytes=0 write_bytes=0"
                   " mxu=1x2097152x32x32 window=27";
  g_autofree char *text = with_end (one_event (ev, "0"), 1);
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_trace_parse ("x.pst", text, strlen (text), &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  const PsTraceCompute *c = &ps_trace_get_event (t, 0)->compute;
  ck_assert_uint_eq (c->mxu_window, 27);
  ck_assert_uint_eq (c->mxu_k, 32);
  gsize len;
  g_autofree char *out = ps_trace_to_text (t, &len);
  ck_assert_ptr_nonnull (strstr (out, " mxu=1x2097152x32x32 window=27\n"));
  expect_event_error ("compute matmul name=a dtype=bf16 flops=0 read_bytes=0 write_bytes=0 mxu=1x1x1x1 window=3",
                      "0", "x.pst:6:81: window= on a matmul event (only conv has a window)");
  expect_event_error ("compute conv name=a dtype=bf16 flops=0 read_bytes=0 write_bytes=0 mxu=1x1x1x1 window=0",
                      "0", "x.pst:6:86: window must be positive");
}
END_TEST

START_TEST (test_errors)
{
  expect_error ("pstrace 3\n", "x.pst:1:9: unsupported trace version 3 (this podsim reads versions 1 to 2)");
  expect_error ("hello\n", "x.pst:1:1: not a step trace");
  expect_error ("", "x.pst: empty file");
  expect_error ("pstrace 1\nprogram p\ndevices 6\nmesh 2x4 order=arange\n",
                "x.pst:4:6: mesh 2x4 holds 8 devices but the trace has 6");
  expect_error ("pstrace 1\nprogram p\ndevices 8\nmesh 2x4 order=zigzag\n",
                "x.pst:4:16: unknown device order 'zigzag'");
  expect_error ("pstrace 1\nprogram p\ndevices 8\nmesh 2x4 order=list:0,1,2,3,4,5,6,6\n",
                "x.pst:4:16: device 6 appears twice in the mesh order");
  expect_error ("pstrace 1\nprogram p\ndevices 16777217\n",
                "x.pst:3:9: device count 16777217 outside 1..16777216");
  expect_error ("pstrace 1\nprogram p\n", "x.pst: truncated trace: ends before the 'devices' line");
  /* no end line */
  g_autofree char *noend = one_event ("memory live_bytes=5", "0");
  expect_error (noend, "x.pst: truncated trace: no end line after 1 events");
  /* last line cut in the middle */
  g_autofree char *cut = g_strndup (noend, strlen (noend) - 3);
  expect_error (cut, "x.pst:6: truncated trace: last line has no newline");

  expect_event_error ("frobnicate x=1", "0", "x.pst:6:1: unknown event 'frobnicate'");
  expect_event_error ("compute matmul name=a dtype=bf16 flops=12x read_bytes=0 write_bytes=0 mxu=1x1x1x1",
                      "0", "x.pst:6:40: bad number '12x' for flops");
  expect_event_error ("compute gemm name=a dtype=bf16 flops=0 read_bytes=0 write_bytes=0",
                      "0", "x.pst:6:9: unknown compute kind 'gemm'");
  expect_event_error ("compute matmul name=a dtype=bf16 flops=0 read_bytes=0 write_bytes=0",
                      "0", "x.pst:6: matmul event without mxu=BxMxKxN dims");
  expect_event_error ("compute elementwise name=a dtype=bf17 flops=0 read_bytes=0 write_bytes=0",
                      "0", "x.pst:6:34: unknown dtype 'bf17'");
  expect_event_error ("compute elementwise name=a dtype=f32 flops=0 read_bytes=0",
                      "0", "compute line without write_bytes=");
  expect_event_error ("compute elementwise name=a dtype=f32 flops=0 read_bytes=0 write_bytes=0 colour=red",
                      "0", "x.pst:6:73: unknown field 'colour' in a compute line");
  expect_event_error ("collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups=axes:2",
                      "4", "x.pst:6:70: groups do not fit the mesh: groups name mesh axis 2 but "
                      "the mesh has 2 axes");
  expect_event_error ("collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups={{0,1,2,3},{4,5,6,8}}",
                      "4", "device 8 in replica groups is not below");
  expect_event_error ("collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups={{0,1,2,3},{4,5}}",
                      "4", "x.pst:6:81: group of 2 devices where the first has 4");
  expect_event_error ("collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups=[2,4]<=[2,2]",
                      "4", "iota groups [2,4] do not hold the 4 ids");
  expect_event_error ("collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups=[2,4]<=[65536,65536]",
                      "4", "iota reshape dim 65536 does not fit the 8 devices");
  expect_event_error ("collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups=[4294967296,4]<=[8]",
                      "4", "x.pst:6:71: number too large");
  expect_event_error ("collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups=[2,4]<=[2,4]T(0,0)",
                      "4", "T(...) is not a permutation");
  expect_event_error ("collective all-gather name=a dtype=f32 in_bytes=4 out_bytes=4 groups=axes:1",
                      "4", "all-gather over groups of 4 needs out_bytes = 4 x in_bytes");
  expect_event_error ("collective collective-permute name=a dtype=f32 in_bytes=4 out_bytes=4 groups=all",
                      "4", "collective-permute takes pairs=, not groups=");
  expect_event_error ("collective collective-permute name=a dtype=f32 in_bytes=4 out_bytes=4 pairs=shift:1:4",
                      "4", "shift offset 4 along mesh axis 1 of size 4");
  expect_event_error ("collective collective-permute name=a dtype=f32 in_bytes=4 out_bytes=4 pairs={{0,1},{2,1}}",
                      "4", "device 1 is the target of two pairs");
  expect_event_error ("collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups=all async=3",
                      "4", "async collective 3 (event 1) has no done");
  expect_event_error ("done 4", "0", "x.pst:6:6: done for async id 4 that is not in flight");
  expect_event_error ("memory live_bytes=101", "0", "x.pst:6:8: live bytes 101 above the header's peak_bytes 100");
  expect_event_error ("memory live_bytes=1", "5", "totals collective_bytes=5 in the header but the events sum to 0");
  /* end line problems */
  g_autofree char *body = one_event ("memory live_bytes=5", "0");
  g_autofree char *badcrc = g_strconcat (body, "end events=1 crc32=00000000\n", NULL);
  expect_error (badcrc, "x.pst:7:20: checksum mismatch");
  g_autofree char *badcount = g_strconcat (body, "end events=2 crc32=00000000\n", NULL);
  expect_error (badcount, "x.pst:7:12: end line counts 2 events but the trace has 1");
  g_autofree char *ok = with_end (g_strdup (body), 1);
  g_autofree char *after = g_strconcat (ok, "memory live_bytes=5\n", NULL);
  expect_error (after, "x.pst:8:1: data after the end line");
}
END_TEST

/* A version 2 trace with n event lines (the loop and endloop lines
 * included) and the totals given. */
static char *
v2_trace (const char *events, guint64 n, const char *totals)
{
  char *text = g_strdup_printf ("pstrace 2\nprogram p\ndevices 8\nmesh 2x4 order=arange\n"
                                "totals events=%" G_GUINT64_FORMAT " %s peak_bytes=100\n%s",
                                n, totals, events);
  return with_end (text, n);
}

/* Loops: written as version 2 only when present, read back equal, totals
 * count each event as often as a step runs it; a version 1 reader's files
 * (no loop) are still written as version 1. */
START_TEST (test_loops)
{
  g_autoptr (PsTrace) t = sample_trace ();
  gsize len;
  g_autofree char *v1 = ps_trace_to_text (t, &len);
  ck_assert (g_str_has_prefix (v1, "pstrace 1\n"));
  ps_trace_update_totals (t);
  guint64 written0 = ps_trace_get_header (t)->totals.write_bytes;
  PsTraceCompute mm = { .op = PS_TRACE_OP_ELEMENTWISE, .dtype = PS_TRACE_BF16, .flops = 10,
                        .read_bytes = 100, .write_bytes = 1000 };
  PsTraceCollective ar = { .kind = PS_TRACE_ALL_REDUCE, .dtype = PS_TRACE_F32, .in_bytes = 8,
                           .out_bytes = 8, .groups = { .form = PS_TRACE_GROUPS_AXES, .n_axes = 1,
                                                       .axes = { 1 } }, .async_id = 9 };
  ps_trace_add_loop (t, "outer loop", 3);
  ps_trace_add_compute (t, "a", &mm);
  ps_trace_add_loop (t, "inner", 4);
  ps_trace_add_collective (t, "ar", &ar);
  ps_trace_add_compute (t, "b", &mm);
  ps_trace_add_done (t, 9);
  ps_trace_add_end_loop (t);
  ps_trace_add_loop (t, "never", 0);
  ps_trace_add_compute (t, "c", &mm);
  ps_trace_add_end_loop (t);
  ps_trace_add_end_loop (t);
  GError *error = NULL;
  ck_assert_msg (ps_trace_validate (t, &error), "%s", error ? error->message : "");
  ck_assert (ps_trace_has_loops (t));
  g_autofree char *v2 = ps_trace_to_text (t, &len);
  ck_assert (g_str_has_prefix (v2, "pstrace 2\n"));
  ck_assert (strstr (v2, "\nloop trips=3 name=outer%20loop\n") != NULL);
  ck_assert (strstr (v2, "\nendloop\n") != NULL);
  g_autoptr (PsTrace) back = ps_trace_parse ("l.pst", v2, len, &error);
  ck_assert_msg (back != NULL, "%s", error ? error->message : "");
  ck_assert_uint_eq (ps_trace_get_header (back)->version, 2);
  ck_assert_uint_eq (ps_trace_n_events (back), ps_trace_n_events (t));
  for (guint64 i = 0; i < ps_trace_n_events (t); i++)
    assert_events_equal (ps_trace_get_event (t, i), ps_trace_get_event (back, i));
  const PsTraceTotals *tt = &ps_trace_get_header (back)->totals;
  /* a: 3 runs, b: 12, c: none; the sample's own events once */
  ck_assert_uint_eq (tt->flops, 2ull * 4 * 128 * 256 * 512 + 5 + 15 * 10);
  ck_assert_uint_eq (tt->write_bytes, written0 + 15 * 1000);
  ck_assert_uint_eq (tt->collective_bytes, 4096 + 100 + 400 + 800 + 12 + 12 + 12 * 8);
  ck_assert_uint_eq (tt->n_events, 13 + 11);
  g_autofree char *again = ps_trace_to_text (back, NULL);
  ck_assert_str_eq (again, v2);
}
END_TEST

START_TEST (test_loop_errors)
{
  static const char *zero = "flops=0 read_bytes=0 write_bytes=0 collective_bytes=0";
  g_autofree char *v1 = with_end (one_event ("loop trips=2 name=l", "0"), 1);
  expect_error (v1, "x.pst:6: loop lines need format version 2 (the file says 1)");
  g_autofree char *unopened = v2_trace ("endloop\n", 1, zero);
  expect_error (unopened, "x.pst:6: endloop without a loop");
  g_autofree char *unclosed = v2_trace ("loop trips=2 name=l\nmemory live_bytes=1\n", 2, zero);
  expect_error (unclosed, "the loop of event 1 has no endloop");
  g_autofree char *noname = v2_trace ("loop trips=2\nendloop\n", 2, zero);
  expect_error (noname, "loop line without name=");
  g_autofree char *extra = v2_trace ("loop trips=2 name=l\nendloop now\n", 2, zero);
  expect_error (extra, "x.pst:7:9: unexpected field 'now'");
  g_autofree char *across = v2_trace (
    "collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups=all async=1\n"
    "loop trips=2 name=l\ndone 1\nendloop\n", 4,
    "flops=0 read_bytes=0 write_bytes=0 collective_bytes=4");
  expect_error (across, "x.pst:8:6: done for async id 1 started in another loop body");
  g_autofree char *open_in_body = v2_trace (
    "loop trips=2 name=l\n"
    "collective all-reduce name=a dtype=f32 in_bytes=4 out_bytes=4 groups=all async=1\n"
    "endloop\ndone 1\n", 4, "flops=0 read_bytes=0 write_bytes=0 collective_bytes=8");
  expect_error (open_in_body, "x.pst:8: async collective 1 (event 2) started in the loop body "
                "has no done before its endloop");
  GString *deep = g_string_new (NULL);
  for (int i = 0; i < PS_TRACE_MAX_LOOP_DEPTH + 1; i++)
    g_string_append (deep, "loop trips=1 name=l\n");
  g_autofree char *too_deep = v2_trace (deep->str, PS_TRACE_MAX_LOOP_DEPTH + 1, zero);
  g_string_free (deep, TRUE);
  expect_error (too_deep, "loops nested deeper than 16");
  /* 2^32 x 2^32 runs of one flop do not fit the totals */
  g_autofree char *huge = v2_trace (
    "loop trips=4294967296 name=a\nloop trips=4294967296 name=b\n"
    "compute elementwise name=x dtype=f32 flops=1 read_bytes=0 write_bytes=0\nendloop\nendloop\n",
    5, "flops=0 read_bytes=0 write_bytes=0 collective_bytes=0");
  expect_error (huge, "x.pst:7:6: the loops around this one run it more than 2^64-1 times");
  /* runs that fit, flops that do not */
  g_autofree char *heavy = v2_trace (
    "loop trips=4294967296 name=a\n"
    "compute elementwise name=x dtype=f32 flops=4294967296 read_bytes=0 write_bytes=0\nendloop\n",
    3, "flops=0 read_bytes=0 write_bytes=0 collective_bytes=0");
  expect_error (heavy, "x.pst:7:38: flops of the events so far add up to more than 2^64-1");
  /* totals are the runs, not the lines */
  g_autofree char *lines = v2_trace (
    "loop trips=3 name=a\n"
    "compute elementwise name=x dtype=f32 flops=2 read_bytes=0 write_bytes=0\nendloop\n",
    3, "flops=2 read_bytes=0 write_bytes=0 collective_bytes=0");
  expect_error (lines, "totals flops=2 in the header but the events sum to 6");
  g_autofree char *good = v2_trace (
    "loop trips=3 name=a\n"
    "compute elementwise name=x dtype=f32 flops=2 read_bytes=0 write_bytes=0\nendloop\n",
    3, "flops=6 read_bytes=0 write_bytes=0 collective_bytes=0");
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_trace_parse ("x.pst", good, strlen (good), &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
}
END_TEST

START_TEST (test_gz_damage)
{
  g_autoptr (PsTrace) t = sample_trace ();
  g_autofree char *dir = g_dir_make_tmp ("check_traces_XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "d.pst.gz", NULL);
  GError *error = NULL;
  ck_assert (ps_trace_write (t, path, &error));
  g_autofree char *data = NULL;
  gsize len;
  ck_assert (g_file_get_contents (path, &data, &len, NULL));

  /* truncated: the last half of the compressed stream is missing */
  ck_assert (g_file_set_contents (path, data, (gssize) (len / 2), NULL));
  g_autoptr (PsTrace) a = ps_trace_read (path, &error);
  ck_assert_ptr_null (a);
  ck_assert_msg (g_error_matches (error, PS_ERROR, PS_ERROR_CORRUPT), "%s", error->message);
  ck_assert_msg (strstr (error->message, "truncated") != NULL, "%s", error->message);
  g_clear_error (&error);

  /* corrupt: bytes changed in the middle */
  g_autofree char *bad = g_memdup2 (data, len);
  for (gsize i = len / 3; i < len / 3 + 8; i++)
    bad[i] ^= 0x5a;
  ck_assert (g_file_set_contents (path, bad, (gssize) len, NULL));
  g_autoptr (PsTrace) b = ps_trace_read (path, &error);
  ck_assert_ptr_null (b);
  ck_assert_msg (error->code == PS_ERROR_CORRUPT || error->code == PS_ERROR_PARSE,
                 "%s", error->message);
  g_clear_error (&error);

  /* a bad write leaves no file behind */
  g_unlink (path);
  PsTraceCollective bad_ar = { .kind = PS_TRACE_ALL_REDUCE, .in_bytes = 4, .out_bytes = 4,
                               .groups = { .form = PS_TRACE_GROUPS_AXES, .n_axes = 1,
                                           .axes = { 5 } } };
  ps_trace_add_collective (t, "bad", &bad_ar);
  ck_assert (!ps_trace_write (t, path, &error));
  ck_assert_msg (strstr (error->message, "groups name mesh axis 5") != NULL, "%s",
                 error->message);
  g_clear_error (&error);
  ck_assert (!g_file_test (path, G_FILE_TEST_EXISTS));
  g_rmdir (dir);
}
END_TEST

/* Random valid traces (fixed seed): every one validates, reads back, and
 * prints to the same text. */
static void
random_perm (GRand *r, guint32 *a, guint n)
{
  for (guint i = 0; i < n; i++)
    a[i] = i;
  for (guint i = n; i > 1; i--)
    {
      guint j = (guint) g_rand_int_range (r, 0, (gint32) i);
      guint32 t = a[i - 1];
      a[i - 1] = a[j];
      a[j] = t;
    }
}

static char *
random_name (GRand *r)
{
  int n = g_rand_int_range (r, 0, 8);
  char *s = g_malloc (n + 1);
  for (int i = 0; i < n; i++)
    {
      int c;
      do
        c = g_rand_int_range (r, 1, 256);
      while (c == '\n');
      s[i] = (char) c;
    }
  s[n] = '\0';
  return s;
}

static PsTrace *
random_trace (GRand *r)
{
  g_autofree char *prog = random_name (r);
  PsTrace *t = ps_trace_new (prog);
  guint rank = (guint) g_rand_int_range (r, 1, 4);
  gint64 dims[3];
  guint64 n = 1;
  for (guint i = 0; i < rank; i++)
    n *= (guint64) (dims[i] = g_rand_int_range (r, 1, 5));
  g_autofree guint32 *perm = g_new (guint32, n);
  random_perm (r, perm, (guint) n);
  PsTraceDeviceOrder order = (PsTraceDeviceOrder) g_rand_int_range (r, 0, 3);
  if (order == PS_TRACE_ORDER_NONPOD2D)
    order = PS_TRACE_ORDER_LIST;
  ps_trace_set_mesh (t, rank, dims, order, perm);
  if (g_rand_boolean (r))
    {
      g_autofree char *slice = random_name (r);
      ps_trace_set_slice (t, slice);
    }
  ps_trace_header (t)->totals.peak_bytes = 1000;
  guint64 open_ids[64];
  guint n_open = 0, next_id = 1;
  int n_events = g_rand_int_range (r, 0, 40);
  for (int e = 0; e < n_events; e++)
    {
      g_autofree char *name = random_name (r);
      int what = g_rand_int_range (r, 0, 4);
      if (what == 0)
        {
          PsTraceCompute c = { .op = (PsTraceOpKind) g_rand_int_range (r, 0, PS_TRACE_OP_COUNT),
                               .dtype = (PsTraceDtype) g_rand_int_range (r, 0, PS_TRACE_DTYPE_COUNT),
                               .precision = (PsTracePrecision) g_rand_int_range (r, 0, 3),
                               .flops = g_rand_int (r), .read_bytes = g_rand_int (r),
                               .write_bytes = g_rand_int (r), .vector_ops = g_rand_int (r) };
          if (c.op == PS_TRACE_OP_MATMUL || c.op == PS_TRACE_OP_CONV)
            {
              c.has_mxu = TRUE;
              c.mxu_batch = (guint64) g_rand_int_range (r, 1, 9);
              c.mxu_m = (guint64) g_rand_int_range (r, 1, 5000);
              c.mxu_k = (guint64) g_rand_int_range (r, 1, 5000);
              c.mxu_n = (guint64) g_rand_int_range (r, 1, 5000);
            }
          ps_trace_add_compute (t, name, &c);
        }
      else if (what == 1)
        {
          PsTraceCollective c = { .kind = (PsTraceCollectiveKind) g_rand_int_range (r, 0, 5),
                                  .dtype = PS_TRACE_BF16 };
          guint64 g = 1;
          g_autofree guint32 *ids = NULL;
          if (c.kind == PS_TRACE_COLLECTIVE_PERMUTE)
            {
              guint a = (guint) g_rand_int_range (r, 0, (gint32) rank);
              if (dims[a] > 1 && g_rand_boolean (r))
                {
                  c.pairs.form = PS_TRACE_PAIRS_SHIFT;
                  c.pairs.axis = a;
                  c.pairs.offset = g_rand_int_range (r, 1, (gint32) dims[a]);
                  if (g_rand_boolean (r))
                    c.pairs.offset = -c.pairs.offset;
                  c.pairs.wrap = g_rand_boolean (r);
                }
              else
                {
                  c.pairs.form = PS_TRACE_PAIRS_LIST;
                  ids = g_new (guint32, 2 * n);
                  g_autofree guint32 *dst = g_new (guint32, n);
                  random_perm (r, ids, (guint) n);
                  random_perm (r, dst, (guint) n);
                  c.pairs.n_pairs = (guint64) g_rand_int_range (r, 0, (gint32) n + 1);
                  for (guint64 i = c.pairs.n_pairs; i-- > 0;)
                    {
                      ids[2 * i] = ids[i];
                      ids[2 * i + 1] = dst[i];
                    }
                  c.pairs.pairs = ids;
                }
            }
          else
            {
              int form = g_rand_int_range (r, 0, 4);
              if (form == 0)
                {
                  c.groups.form = PS_TRACE_GROUPS_ALL;
                  g = n;
                }
              else if (form == 1)
                {
                  guint32 ax[3];
                  random_perm (r, ax, rank);
                  c.groups.form = PS_TRACE_GROUPS_AXES;
                  c.groups.n_axes = (guint) g_rand_int_range (r, 1, (gint32) rank + 1);
                  for (guint i = 0; i < c.groups.n_axes; i++)
                    {
                      c.groups.axes[i] = ax[i];
                      g *= (guint64) dims[ax[i]];
                    }
                }
              else
                {
                  /* a group size that divides the device count */
                  do
                    g = (guint64) g_rand_int_range (r, 1, (gint32) n + 1);
                  while (n % g);
                  c.groups.n_groups = n / g;
                  c.groups.group_size = g;
                  if (form == 2)
                    {
                      guint32 p[3];
                      random_perm (r, p, rank);
                      c.groups.form = PS_TRACE_GROUPS_IOTA;
                      c.groups.iota_rank = rank;
                      for (guint i = 0; i < rank; i++)
                        {
                          c.groups.iota_dims[i] = dims[i];
                          c.groups.iota_perm[i] = p[i];
                        }
                    }
                  else
                    {
                      c.groups.form = PS_TRACE_GROUPS_LIST;
                      ids = g_new (guint32, n);
                      random_perm (r, ids, (guint) n);
                      c.groups.devices = ids;
                    }
                }
            }
          guint64 b = (guint64) g_rand_int_range (r, 0, 100000);
          c.in_bytes = c.kind == PS_TRACE_REDUCE_SCATTER ? b * g : b;
          c.out_bytes = c.kind == PS_TRACE_ALL_GATHER ? b * g : b;
          if (n_open < G_N_ELEMENTS (open_ids) && g_rand_boolean (r))
            open_ids[n_open++] = c.async_id = next_id++;
          ps_trace_add_collective (t, name, &c);
        }
      else if (what == 2 && n_open > 0)
        {
          guint k = (guint) g_rand_int_range (r, 0, (gint32) n_open);
          ps_trace_add_done (t, open_ids[k]);
          open_ids[k] = open_ids[--n_open];
        }
      else
        ps_trace_add_memory (t, (guint64) g_rand_int_range (r, 0, 1001));
    }
  while (n_open > 0)
    ps_trace_add_done (t, open_ids[--n_open]);
  return t;
}

START_TEST (test_random_round_trips)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (20261129);
  for (int i = 0; i < 300; i++)
    {
      g_autoptr (PsTrace) t = random_trace (r);
      GError *error = NULL;
      ck_assert_msg (ps_trace_validate (t, &error), "trace %d: %s", i, error->message);
      gsize la, lb;
      g_autofree char *a = ps_trace_to_text (t, &la);
      g_autoptr (PsTrace) back = ps_trace_parse ("r.pst", a, la, &error);
      ck_assert_msg (back != NULL, "trace %d: %s\n%s", i, error ? error->message : "", a);
      g_autofree char *b = ps_trace_to_text (back, &lb);
      ck_assert_msg (la == lb && memcmp (a, b, la) == 0, "trace %d differs:\n%s\n%s", i, a, b);
      ck_assert_str_eq (ps_trace_get_header (back)->program, ps_trace_get_header (t)->program);
      for (guint64 k = 0; k < ps_trace_n_events (t); k++)
        assert_events_equal (ps_trace_get_event (t, k), ps_trace_get_event (back, k));
    }
}
END_TEST

/* Every prefix of a valid trace is rejected, and damaged bytes never crash
 * the reader (run under the sanitizer build too). */
START_TEST (test_mutations)
{
  g_autoptr (PsTrace) t = sample_trace ();
  gsize len;
  g_autofree char *text = ps_trace_to_text (t, &len);
  GError *error = NULL;
  g_autoptr (PsTrace) whole = ps_trace_parse ("m.pst", text, len, &error);
  ck_assert_msg (whole != NULL, "%s", error ? error->message : "");
  for (gsize cut = 0; cut < len; cut++)
    {
      PsTrace *p = ps_trace_parse ("m.pst", text, cut, &error);
      ck_assert_msg (p == NULL, "prefix of %u bytes accepted", (guint) cut);
      ck_assert_ptr_nonnull (error);
      g_clear_error (&error);
    }
  static const char subst[] = { '0', '9', 'x', ' ', '\n', '\0', '{', ',', '=', '%', '\xff' };
  g_autofree char *copy = g_malloc (len);
  guint accepted = 0;
  for (gsize i = 0; i < len; i++)
    for (gsize k = 0; k < sizeof subst; k++)
      {
        if (text[i] == subst[k])
          continue;
        memcpy (copy, text, len);
        copy[i] = subst[k];
        PsTrace *p = ps_trace_parse ("m.pst", copy, len, &error);
        accepted += p != NULL;
        ps_trace_free (p);
        g_clear_error (&error);
      }
  /* the footer's checksum catches every change */
  ck_assert_uint_eq (accepted, 0);
}
END_TEST

START_TEST (test_missing_file)
{
  GError *error = NULL;
  g_autofree char *path = tmp_path ("no/such/trace.pst.gz");
  ck_assert_ptr_null (ps_trace_read (path, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_IO));
  ck_assert (strstr (error->message, "cannot open") != NULL);
  g_clear_error (&error);
}
END_TEST

/* The command line's one mesh parser (ps_trace_mesh_parse_dims). */
START_TEST (test_mesh_parse_dims)
{
  PsTraceMesh m = { 0 };
  GError *error = NULL;
  ck_assert (ps_trace_mesh_parse_dims ("32x64", "--mesh", &m, &error));
  ck_assert (m.rank == 2 && m.dims[0] == 32 && m.dims[1] == 64);
  ck_assert (ps_trace_mesh_parse_dims ("4x4x8", "--mesh", &m, &error));
  ck_assert (m.rank == 3 && m.dims[2] == 8);
  ck_assert (ps_trace_mesh_parse_dims ("8", "--mesh", &m, &error) && m.rank == 1);
  const char *bad[] = { "", "x", "2x", "0x4", "-2x4", "2xx4", "2x4 ", "1x1x1x1x1x1x1x1x1", "4096x4096x2", NULL };
  for (int i = 0; bad[i]; i++)
    {
      ck_assert_msg (!ps_trace_mesh_parse_dims (bad[i], "--mesh", &m, &error), "'%s' accepted", bad[i]);
      ck_assert (g_str_has_prefix (error->message, "--mesh: '"));
      g_clear_error (&error);
    }
}
END_TEST

static Suite *
traces_suite (void)
{
  Suite *s = suite_create ("traces");
  ps_check_case (s, "trace_format_round_trips", 0,
                 PS_CHECK_TESTS (test_round_trip_gz, test_mesh_parse_dims,
                                 test_round_trip_plain, test_conv_window,
                                 test_streaming, test_groups_expand,
                                 test_nonpod2d, test_pairs_expand,
                                 test_good_minimal, test_errors,
                                 test_gz_damage, test_loops, test_loop_errors,
                                 test_random_round_trips, test_mutations,
                                 test_missing_file));
  return s;
}

int
main (void)
{
  return ps_check_run (traces_suite (), CK_FORK_GETENV);
}
