/* Per-op handlers of the SPMD partitioner: each case is partitioned, run on
 * N devices by the reference interpreter and compared with the original
 * (partitioner/interp/verify.h through tests/spmd_testutil.c); each also states how
 * many replicate-then-slice fallbacks and which collectives it may use, so
 * a handler that silently degrades to the fallback fails too. */
#include "config.h"

#include <check.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/spmd/spmd.h"
#include "partitioner/interp/verify.h"
#include "tests/spmd_testutil.h"

typedef struct {
  const char *name;
  int n;
  const char *hlo;
  int max_fallbacks;
  /* Exact counts of collectives in the result; -1 = not checked. */
  int all_reduce, all_gather, all_to_all, permute;
  gboolean propagate;   /* complete shardings inside called computations first */
} Case;

#define ANY -1

static const Case cases[] = {
  { "elementwise uneven 2d", 4,
    "HloModule m\nENTRY e {\n"
    "  a = f32[7,5] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
    "  b = f32[7,5] parameter(1), sharding={devices=[2,2]0,1,2,3}\n"
    "  ROOT s = f32[7,5] add(a, b), sharding={devices=[2,2]0,1,2,3}\n}\n",
    0, 0, 0, 0, 0 },
  { "dot batch dims sharded alike", 2,
    "HloModule m\nENTRY e {\n"
    "  a = f32[4,8,6] parameter(0), sharding={devices=[2,1,1]0,1}\n"
    "  b = f32[4,6,5] parameter(1), sharding={devices=[2,1,1]0,1}\n"
    "  ROOT d = f32[4,8,5] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},"
    " lhs_contracting_dims={2}, rhs_contracting_dims={1}, sharding={devices=[2,1,1]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "dot contracting sharded uneven then all-reduce", 4,
    "HloModule m\nENTRY e {\n"
    "  a = f32[8,7] parameter(0), sharding={devices=[1,4]0,1,2,3}\n"
    "  b = f32[7,4] parameter(1), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={replicated}\n}\n",
    0, 1, 0, 0, 0 },
  { "dot contracting sharded, output split over the same devices: reduce-scatter", 4,
    "HloModule m\nENTRY e {\n"
    "  a = f32[6,8] parameter(0), sharding={devices=[1,4]0,1,2,3}\n"
    "  b = f32[8,5] parameter(1), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT d = f32[6,5] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, 0 },
  { "dot non-contracting sharded", 2,
    "HloModule m\nENTRY e {\n"
    "  a = f32[8,6] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  b = f32[6,4] parameter(1), sharding={replicated}\n"
    "  ROOT d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={devices=[2,1]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "dot 2d mesh from partially replicated operands", 4,
    "HloModule m\nENTRY e {\n"
    "  a = f32[8,6] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
    "  b = f32[6,4] parameter(1), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}\n"
    "  ROOT d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={devices=[2,2]0,1,2,3}\n}\n",
    0, 0, 0, 0, 0 },
  { "dot rhs non-contracting sharded, lhs gathered", 4,
    "HloModule m\nENTRY e {\n"
    "  a = f32[8,6] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  b = f32[6,4] parameter(1), sharding={devices=[1,4]0,1,2,3}\n"
    "  ROOT d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={devices=[1,4]0,1,2,3}\n}\n",
    0, 0, 1, 0, 0 },
  { "conv spatial halo, stride 2, padding, uneven: halos differ per partition", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[2,13,3] parameter(0), sharding={devices=[1,4,1]0,1,2,3}\n"
    "  k = f32[3,3,2] parameter(1), sharding={replicated}\n"
    "  ROOT c = f32[2,7,2] convolution(x, k), window={size=3 stride=2 pad=1_1},"
    " dim_labels=b0f_0io->b0f, sharding={devices=[1,4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, ANY },
  { "conv spatial halo with base and window dilation", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[1,10,2] parameter(0), sharding={devices=[1,4,1]0,1,2,3}\n"
    "  k = f32[3,2,2] parameter(1), sharding={replicated}\n"
    "  ROOT c = f32[1,19,2] convolution(x, k), window={size=3 pad=2_2 lhs_dilate=2 rhs_dilate=2},"
    " dim_labels=b0f_0io->b0f, sharding={devices=[1,4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, ANY },
  { "conv 2d spatial both dims, negative padding", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[1,9,8,1] parameter(0), sharding={devices=[1,2,2,1]0,1,2,3}\n"
    "  k = f32[2,3,1,2] parameter(1), sharding={replicated}\n"
    "  ROOT c = f32[1,6,6,2] convolution(x, k), window={size=2x3 pad=-1_-1x0_0},"
    " dim_labels=b01f_01io->b01f, sharding={devices=[1,2,2,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, ANY },
  { "conv with the kernel window split alike, replicated result: halo + all-reduce, uneven", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[2,13,3] parameter(0), sharding={devices=[1,4,1]0,1,2,3}\n"
    "  k = f32[11,3,2] parameter(1), sharding={devices=[4,1,1]0,1,2,3}\n"
    "  ROOT c = f32[2,5,2] convolution(x, k), window={size=11 pad=1_1},"
    " dim_labels=b0f_0io->b0f, sharding={replicated}\n}\n",
    0, 1, 0, 0, ANY },
  { "conv split window with stride and window dilation, a device with no kernel elements", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[2,13,3] parameter(0), sharding={devices=[1,2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
    "  k = f32[5,3,2] parameter(1), sharding={devices=[4,1,1]0,1,2,3}\n"
    "  ROOT c = f32[2,3,2] convolution(x, k), window={size=5 stride=2 rhs_dilate=2},"
    " dim_labels=b0f_0io->b0f, sharding={replicated}\n}\n",
    0, 1, 1, 0, ANY }, /* the lhs moves from 2 tiles to the kernel's 4 */
  { "conv with a replicated result follows the lhs batch split, uneven, then gathers the result", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[7,5,3] parameter(0), sharding={devices=[4,1,1]0,1,2,3}\n"
    "  k = f32[3,3,2] parameter(1), sharding={replicated}\n"
    "  ROOT c = f32[7,3,2] convolution(x, k), window={size=3},"
    " dim_labels=b0f_0io->b0f, sharding={replicated}\n}\n",
    0, 0, 1, 0, 0 },
  { "conv with a reversed split window and a replicated result follows the lhs spatial split", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[5,8,4] parameter(0), sharding={devices=[2,1,1]0,1}\n"
    "  k = f32[5,8,6] parameter(1), sharding={devices=[2,1,1]1,0}\n"
    "  ROOT c = f32[1,4,6] convolution(x, k), window={size=5 rhs_reversal=1},"
    " dim_labels=0fb_0io->0bf, sharding={replicated}\n}\n",
    0, ANY, ANY, ANY, ANY },
  { "conv feature groups split with the output features", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[2,6,4] parameter(0), sharding={replicated}\n"
    "  k = f32[3,2,4] parameter(1), sharding={devices=[1,1,2]0,1}\n"
    "  ROOT c = f32[2,4,4] convolution(x, k), window={size=3}, feature_group_count=2,"
    " dim_labels=b0f_0io->b0f, sharding={devices=[1,1,2]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "reduce-window max over a sharded dim", 4,
    "HloModule m\nmax {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT m = f32[] maximum(a, b)\n}\nENTRY e {\n"
    "  x = f32[11,3] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  i = f32[] constant(-inf)\n"
    "  ROOT r = f32[5,3] reduce-window(x, i), window={size=3x1 stride=2x1},"
    " to_apply=max, sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, ANY },
  { "reduce over a padded sharded dim", 4,
    "HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n"
    "  x = f32[7,6] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  z = f32[] constant(0)\n"
    "  ROOT r = f32[6] reduce(x, z), dimensions={0}, to_apply=sum, sharding={replicated}\n}\n",
    0, 1, 0, 0, 0 },
  { "variadic reduce (argmax) over a split uneven dim", 4,
    "HloModule m\nmaxidx {\n  a = f32[] parameter(0)\n  i = s32[] parameter(1)\n"
    "  b = f32[] parameter(2)\n  j = s32[] parameter(3)\n"
    "  g = pred[] compare(a, b), direction=GT\n  v = f32[] select(g, a, b)\n"
    "  k = s32[] select(g, i, j)\n  ROOT t = (f32[], s32[]) tuple(v, k)\n}\nENTRY e {\n"
    "  x = f32[5,7] parameter(0), sharding={devices=[1,4]0,1,2,3}\n"
    "  y = s32[5,7] parameter(1), sharding={devices=[1,4]0,1,2,3}\n"
    "  a = f32[] constant(-inf)\n  b = s32[] constant(-1)\n"
    "  ROOT r = (f32[5], s32[5]) reduce(x, y, a, b), dimensions={1}, to_apply=maxidx,"
    " sharding={{replicated}, {replicated}}\n}\n",
    0, 0, 2, 0, 0 },
  /* Batch norm: the statistics of a spatially split image are summed over
   * its pieces (one all-reduce of both sums); verify compares the mean and
   * variance each device holds with the single-device ones. */
  { "batch-norm-training, 2D spatial split 4x2 of uneven dims: statistics all-reduced", 8,
    "HloModule m\nENTRY e {\n"
    "  x = f32[2,7,5,3] parameter(0), sharding={devices=[1,4,2,1]<=[8]}\n"
    "  s = f32[3] parameter(1), sharding={replicated}\n  o = f32[3] parameter(2), sharding={replicated}\n"
    "  ROOT t = (f32[2,7,5,3], f32[3], f32[3]) batch-norm-training(x, s, o), epsilon=0.001,"
    " feature_index=3, sharding={{devices=[1,4,2,1]<=[8]}, {replicated}, {replicated}}\n}\n",
    0, 1, 0, 0, 0 },
  { "batch-norm-training, batch and feature split, spatial uneven split, partially replicated", 8,
    "HloModule m\nENTRY e {\n"
    "  x = f32[2,5,3] parameter(0), sharding={devices=[1,2,2,2]<=[8] last_tile_dim_replicate}\n"
    "  s = f32[3] parameter(1), sharding={replicated}\n  o = f32[3] parameter(2), sharding={replicated}\n"
    "  ROOT t = (f32[2,5,3], f32[3], f32[3]) batch-norm-training(x, s, o), epsilon=0.01, feature_index=2,"
    " sharding={{devices=[1,2,2,2]<=[8] last_tile_dim_replicate},"
    " {devices=[2,4]0,1,4,5,2,3,6,7 last_tile_dim_replicate},"
    " {devices=[2,4]0,1,4,5,2,3,6,7 last_tile_dim_replicate}}\n}\n",
    0, 1, 0, 0, 0 },
  { "batch-norm-training with only the feature dim split: the op on each tile, no collective", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[3,4,6] parameter(0), sharding={devices=[1,1,4]<=[4]}\n"
    "  s = f32[6] parameter(1), sharding={devices=[4]<=[4]}\n  o = f32[6] parameter(2), sharding={devices=[4]<=[4]}\n"
    "  ROOT t = (f32[3,4,6], f32[6], f32[6]) batch-norm-training(x, s, o), epsilon=0.001, feature_index=2,"
    " sharding={{devices=[1,1,4]<=[4]}, {devices=[4]<=[4]}, {devices=[4]<=[4]}}\n}\n",
    0, 0, 0, 0, 0 },
  { "batch-norm-grad, batch and uneven spatial split: both sums all-reduced", 8,
    "HloModule m\nENTRY e {\n"
    "  x = f32[4,7,3] parameter(0), sharding={devices=[2,4,1]<=[8]}\n"
    "  dy = f32[4,7,3] parameter(1), sharding={devices=[2,4,1]<=[8]}\n"
    "  s = f32[3] parameter(2), sharding={replicated}\n  m = f32[3] parameter(3), sharding={replicated}\n"
    "  v = f32[3] parameter(4), sharding={replicated}\n"
    "  ROOT g = (f32[4,7,3], f32[3], f32[3]) batch-norm-grad(x, s, m, v, dy), epsilon=0.5, feature_index=2,"
    " sharding={{devices=[2,4,1]<=[8]}, {replicated}, {replicated}}\n}\n",
    0, 1, 0, 0, 0 },
  { "batch-norm-inference, spatial split: per-feature operands replicated, no collective", 4,
    "HloModule m\nENTRY e {\n"
    "  x = bf16[2,9,3] parameter(0), sharding={devices=[1,4,1]<=[4]}\n"
    "  s = bf16[3] parameter(1), sharding={replicated}\n  o = bf16[3] parameter(2), sharding={replicated}\n"
    "  m = bf16[3] parameter(3), sharding={replicated}\n  v = bf16[3] parameter(4), sharding={replicated}\n"
    "  ROOT y = bf16[2,9,3] batch-norm-inference(x, s, o, m, v), epsilon=0.001, feature_index=2,"
    " sharding={devices=[1,4,1]<=[4]}\n}\n",
    0, 0, 0, 0, 0 },
  { "bitcast-convert same width keeps uneven tiles", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[7,3] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT b = s32[7,3] bitcast-convert(x), sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, 0 },
  { "bitcast-convert to a wider element: the merged minor dim is gathered", 4,
    "HloModule m\nENTRY e {\n"
    "  x = s32[7,2] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
    "  ROOT b = f64[7] bitcast-convert(x), sharding={devices=[2,2]0,1,2,3 last_tile_dim_replicate}\n}\n",
    0, 0, 1, 0, 0 },
  { "broadcast transpose reshape", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[8,6] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  t = f32[6,8] transpose(x), dimensions={1,0}, sharding={devices=[1,2]0,1}\n"
    "  b = f32[3,6,8] broadcast(t), dimensions={1,2}, sharding={devices=[1,1,2]0,1}\n"
    "  ROOT r = f32[18,8] reshape(b), sharding={devices=[1,2]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "reshape whose group starts with size-1 dims", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[1,12,3] parameter(0), sharding={devices=[1,4,1]0,1,2,3}\n"
    "  ROOT r = f32[4,3,3] reshape(x), sharding={devices=[4,1,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, 0 },
  { "reshape uneven one-to-one dim and a divisible merge", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[7,12] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  r = f32[7,3,4] reshape(x), sharding={devices=[4,1,1]0,1,2,3}\n"
    "  y = f32[8,3,5] parameter(1), sharding={devices=[4,1,1]0,1,2,3}\n"
    "  m = f32[24,5] reshape(y), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT t = (f32[7,3,4], f32[24,5]) tuple(r, m),"
    " sharding={{devices=[4,1,1]0,1,2,3}, {devices=[4,1]0,1,2,3}}\n}\n",
    0, 0, 0, 0, 0 },
  { "reshape into a split minor dim: reshaped in the operand's layout, then all-to-all", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[6,12] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  ROOT r = f32[6,2,6] reshape(x), sharding={devices=[1,1,2]0,1}\n}\n",
    0, 0, 0, 1, 0 },
  { "iota with partition offsets", 4,
    "HloModule m\nENTRY e {\n"
    "  ROOT i = s32[10,3] iota(), iota_dimension=0, sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, 0 },
  { "slice pad concatenate on unsharded dims", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[8,6] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  s = f32[8,3] slice(x), slice={[0:8], [1:4]}, sharding={devices=[2,1]0,1}\n"
    "  z = f32[] constant(0)\n"
    "  p = f32[8,5] pad(s, z), padding=0_0x1_1, sharding={devices=[2,1]0,1}\n"
    "  ROOT c = f32[8,11] concatenate(p, x), dimensions={1}, sharding={devices=[2,1]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "strided slice along a split uneven dim (halo)", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[13,3] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT s = f32[5,3] slice(x), slice={[2:12:2], [0:3]}, sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, ANY },
  { "slice of a split uneven dim into a replicated result: sliced in place, result gathered", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[13,3] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT s = f32[2,3] slice(x), slice={[5:7], [0:3]}, sharding={replicated}\n}\n",
    0, 0, 1, 0, ANY },
  { "reduce-window into a replicated result: windows in the operand's layout", 4,
    "HloModule m\nmax {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT m = f32[] maximum(a, b)\n}\nENTRY e {\n"
    "  x = f32[11,3] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  i = f32[] constant(-inf)\n"
    "  ROOT r = f32[5,3] reduce-window(x, i), window={size=3x1 stride=2x1},"
    " to_apply=max, sharding={replicated}\n}\n",
    0, 0, 1, 0, ANY },
  { "slice along a split dim, shifted", 2,
    "HloModule m\nENTRY e {\n"
    "  x = s32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  ROOT s = s32[6,4] slice(x), slice={[1:7], [0:4]}, sharding={devices=[2,1]0,1}\n}\n",
    0, 0, 0, 0, ANY },
  { "pad along a split uneven dim with interior padding (halo)", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[7,3] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  z = f32[] constant(-1)\n"
    "  ROOT p = f32[16,5] pad(x, z), padding=2_1_1x1_1, sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, ANY },
  { "pad with negative low padding on a split dim, 2d mesh", 4,
    "HloModule m\nENTRY e {\n"
    "  x = s32[9,6] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
    "  z = s32[] constant(7)\n"
    "  ROOT p = s32[11,5] pad(x, z), padding=-1_3x0_-1, sharding={devices=[2,2]0,1,2,3}\n}\n",
    0, 0, 0, 0, ANY },
  { "reverse along a split uneven dim: permute, shift by the padding, local reverse", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[7,3] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT r = f32[7,3] reverse(x), dimensions={0,1}, sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, ANY },
  { "reverse into the reversed device order is local", 4,
    "HloModule m\nENTRY e {\n"
    "  x = s32[8,3] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
    "  ROOT r = s32[8,3] reverse(x), dimensions={0}, sharding={devices=[2,2]2,3,0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "dynamic-slice and dynamic-update-slice", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[8,6] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  u = f32[8,2] parameter(1), sharding={devices=[2,1]0,1}\n"
    "  i = s32[] parameter(2), sharding={replicated}\n"
    "  z = s32[] constant(0)\n"
    "  d = f32[8,6] dynamic-update-slice(x, u, z, i), sharding={devices=[2,1]0,1}\n"
    "  ROOT s = f32[8,3] dynamic-slice(d, z, i), dynamic_slice_sizes={8,3},"
    " sharding={devices=[2,1]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "dynamic-update-slice along a split uneven dim and an unsplit one: masked select", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[7,6] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  u = f32[2,3] parameter(1), sharding={replicated}\n"
    "  i = s32[] parameter(2), sharding={replicated}\n"
    "  j = s32[] parameter(3), sharding={replicated}\n"
    "  ROOT d = f32[7,6] dynamic-update-slice(x, u, i, j), sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, 0 },
  { "dynamic-update-slice along both split dims, split update", 4,
    "HloModule m\nENTRY e {\n"
    "  x = s32[9,6] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
    "  u = s32[4,2] parameter(1), sharding={devices=[2,2]0,1,2,3}\n"
    "  i = s32[] constant(4)\n"
    "  j = s32[] constant(3)\n"
    "  ROOT d = s32[9,6] dynamic-update-slice(x, u, i, j), sharding={devices=[2,2]0,1,2,3}\n}\n",
    0, 0, ANY, 0, 0 },
  { "gather operand pass-through", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[5,8] parameter(0), sharding={devices=[1,2]0,1}\n"
    "  i = s32[6,1] parameter(1), sharding={replicated}\n"
    "  ROOT g = f32[6,8] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},"
    " start_index_map={0}, index_vector_dim=1, slice_sizes={1,8},"
    " sharding={devices=[1,2]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "gather indices batch sharded", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[5,8] parameter(0), sharding={replicated}\n"
    "  i = s32[7,1] parameter(1), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT g = f32[7,8] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},"
    " start_index_map={0}, index_vector_dim=1, slice_sizes={1,8},"
    " sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, 0 },
  { "scatter operand pass-through", 2,
    "HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n"
    "  x = f32[5,8] parameter(0), sharding={devices=[1,2]0,1}\n"
    "  i = s32[3,1] parameter(1), sharding={replicated}\n"
    "  u = f32[3,8] parameter(2), sharding={devices=[1,2]0,1}\n"
    "  ROOT s = f32[5,8] scatter(x, i, u), update_window_dims={1},"
    " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,"
    " to_apply=sum, sharding={devices=[1,2]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "gather index-parallel through an iota, uneven, replicated result", 4,
    "HloModule m\nENTRY e {\n"
    "  x = s32[6,4,2] parameter(0), sharding={devices=[4,1,1]0,1,2,3}\n"
    "  a = s32[1,6,4] iota(), iota_dimension=1\n"
    "  b = s32[1,6,4] iota(), iota_dimension=2\n"
    "  i = s32[2,6,4] concatenate(a, b), dimensions={0}\n"
    "  ROOT g = s32[6,4,2] gather(x, i), offset_dims={2}, collapsed_slice_dims={0,1},"
    " start_index_map={0,1}, index_vector_dim=0, slice_sizes={1,1,2},"
    " sharding={replicated}\n}\n",
    0, 0, 1, 0, 0 },
  { "gather from trivially sliced split dims, uneven: masked all-reduce", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[7,3] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  i = s32[5,1] parameter(1), sharding={replicated}\n"
    "  ROOT g = f32[5,3] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},"
    " start_index_map={0}, index_vector_dim=1, slice_sizes={1,3},"
    " sharding={replicated}\n}\n",
    0, 1, 0, 0, 0 },
  { "gather trivially sliced and pass-through dims, 2d mesh", 4,
    "HloModule m\nENTRY e {\n"
    "  x = f32[5,6] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
    "  i = s32[3,1] parameter(1), sharding={replicated}\n"
    "  ROOT g = f32[3,6] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},"
    " start_index_map={0}, index_vector_dim=1, slice_sizes={1,6},"
    " sharding={replicated}\n}\n",
    0, 1, 1, 0, 0 },
  { "scatter index-parallel through an iota, replicated result", 4,
    "HloModule m\nsum {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
    "  ROOT s = s32[] add(a, b)\n}\nENTRY e {\n"
    "  x = s32[8,2] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  i = s32[8,1] iota(), iota_dimension=0\n"
    "  u = s32[8,2] parameter(1), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT s = s32[8,2] scatter(x, i, u), update_window_dims={1},"
    " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,"
    " to_apply=sum, sharding={replicated}\n}\n",
    0, 0, 1, 0, 0 },
  { "scatter into trivially sliced split dims, uneven: out-of-tile updates skipped", 4,
    "HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n"
    "  x = f32[7,3] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  i = s32[5,1] parameter(1), sharding={replicated}\n"
    "  u = f32[5,3] parameter(2), sharding={replicated}\n"
    "  ROOT s = f32[7,3] scatter(x, i, u), update_window_dims={1},"
    " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,"
    " to_apply=sum, sharding={devices=[4,1]0,1,2,3}\n}\n",
    0, 0, 0, 0, 0 },
  { "scatter-add with split indices and updates, uneven: all-reduce", 4,
    "HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n"
    "  x = f32[4,3] parameter(0), sharding={replicated}\n"
    "  i = s32[7,1] parameter(1), sharding={devices=[4,1]0,1,2,3}\n"
    "  u = f32[7,3] parameter(2), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT s = f32[4,3] scatter(x, i, u), update_window_dims={1},"
    " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,"
    " to_apply=sum, sharding={replicated}\n}\n",
    0, 1, 0, 0, 0 },
  { "copy of a tuple into another tuple sharding", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[6,3] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  y = s32[5] parameter(1), sharding={replicated}\n"
    "  t = (f32[6,3], s32[5]) tuple(x, y), sharding={{devices=[2,1]0,1}, {replicated}}\n"
    "  c = (f32[6,3], s32[5]) copy(t), sharding={{replicated}, {devices=[2]0,1}}\n"
    "  ROOT g = f32[6,3] get-tuple-element(c), index=0, sharding={replicated}\n}\n",
    0, 0, 1, 0, 0 },
  { "sort along a sharded dim moves the sharding", 2,
    "HloModule m\nlt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT c = pred[] compare(a, b), direction=LT\n}\nENTRY e {\n"
    "  x = f32[4,8] parameter(0), sharding={devices=[1,2]0,1}\n"
    "  ROOT s = f32[4,8] sort(x), dimensions={1}, to_apply=lt, sharding={devices=[1,2]0,1}\n}\n",
    0, 0, 0, ANY, 0 },
  { "while loop with a sharded carry", 2, /* propagated */
    "HloModule m\ncond {\n  p = (s32[], f32[8,4]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n  n = s32[] constant(3)\n"
    "  ROOT c = pred[] compare(i, n), direction=LT\n}\n"
    "body {\n  p = (s32[], f32[8,4]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n  x = f32[8,4] get-tuple-element(p), index=1\n"
    "  o = s32[] constant(1)\n  j = s32[] add(i, o)\n  y = f32[8,4] add(x, x)\n"
    "  ROOT t = (s32[], f32[8,4]) tuple(j, y)\n}\nENTRY e {\n"
    "  x = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  z = s32[] constant(0)\n"
    "  t = (s32[], f32[8,4]) tuple(z, x), sharding={{replicated}, {devices=[2,1]0,1}}\n"
    "  w = (s32[], f32[8,4]) while(t), condition=cond, body=body,"
    " sharding={{replicated}, {devices=[2,1]0,1}}\n"
    "  ROOT r = f32[8,4] get-tuple-element(w), index=1, sharding={devices=[2,1]0,1}\n}\n",
    0, 0, 0, 0, 0, TRUE },
  { "conditional and call", 2,
    "HloModule m\nneg {\n  p = f32[8] parameter(0)\n  ROOT n = f32[8] negate(p)\n}\n"
    "id {\n  p = f32[8] parameter(0)\n  ROOT c = f32[8] copy(p)\n}\nENTRY e {\n"
    "  b = pred[] parameter(0), sharding={replicated}\n"
    "  x = f32[8] parameter(1), sharding={devices=[2]0,1}\n"
    "  c = f32[8] conditional(b, x, x), true_computation=neg, false_computation=id,"
    " sharding={devices=[2]0,1}\n"
    "  ROOT k = f32[8] call(c), to_apply=neg, sharding={devices=[2]0,1}\n}\n",
    0, 0, 0, 0, 0, TRUE },
  { "partially manual: tiled within manual groups to replicated within them", 4,
    "HloModule m\nENTRY e {\n"
    "  a = f32[6,3] parameter(0), sharding={devices=[1,2,2]<=[4] last_tile_dims={manual}}\n"
    "  b = f32[6,3] parameter(1), sharding={devices=[1,2,2]<=[4] last_tile_dims={manual}}\n"
    "  m = f32[6,3] multiply(a, b), sharding={devices=[1,2,2]<=[4] last_tile_dims={manual}}\n"
    "  ROOT r = f32[6,3] add(m, b),"
    " sharding={devices=[1,1,2,2]<=[4] last_tile_dims={replicated, manual}}\n}\n",
    0, 0, ANY, 0, 0 },
  { "maximal to tiled and back", 4,
    "HloModule m\nENTRY e {\n"
    "  x = s32[6,3] parameter(0), sharding={maximal device=2}\n"
    "  t = s32[6,3] copy(x), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT r = s32[6,3] negate(t), sharding={maximal device=1}\n}\n",
    0, ANY, ANY, ANY, ANY },
  /* Manual regions: verified in the global view (verify.h), where each
   * device's manual code sees its own tile and its own partition id. */
  { "manual region using partition-id", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[8,2] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  m = f32[4,2] custom-call(x), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n"
    "  p = u32[] partition-id(), sharding={manual}\n"
    "  c = f32[] convert(p), sharding={manual}\n"
    "  b = f32[4,2] broadcast(c), dimensions={}, sharding={manual}\n"
    "  a = f32[4,2] add(m, b), sharding={manual}\n"
    "  ROOT r = f32[8,2] custom-call(a), custom_call_target=\"SPMDShardToFullShape\","
    " sharding={devices=[2,1]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "manual parameter mixed with a tiled one", 2,
    "HloModule m\nENTRY e {\n"
    "  x = f32[8,2] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  y = f32[4,2] parameter(1), sharding={manual}\n"
    "  m = f32[4,2] custom-call(x), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n"
    "  a = f32[4,2] add(m, y), sharding={manual}\n"
    "  f = f32[8,2] custom-call(a), custom_call_target=\"SPMDShardToFullShape\","
    " sharding={devices=[2,1]0,1}\n"
    "  ROOT r = f32[8,2] multiply(f, x), sharding={devices=[2,1]0,1}\n}\n",
    0, 0, 0, 0, 0 },
  { "nested manual: manual to partially manual to tiled", 8,
    "HloModule m\nENTRY e {\n"
    "  p = s32[4,4,4] parameter(0), sharding={devices=[2,2,2]<=[8]}\n"
    "  m0 = s32[2,2,2] custom-call(p), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n"
    "  m1 = s32[4,2,2] custom-call(m0), custom_call_target=\"SPMDShardToFullShape\","
    " sharding={devices=[2,1,1,4]<=[8] last_tile_dims={manual}}\n"
    "  m2 = s32[4,4,2] custom-call(m1), custom_call_target=\"SPMDShardToFullShape\","
    " sharding={devices=[2,2,1,2]<=[8] last_tile_dims={manual}}\n"
    "  ROOT o = s32[4,4,4] custom-call(m2), custom_call_target=\"SPMDShardToFullShape\","
    " sharding={devices=[2,2,2]<=[8]}\n}\n",
    0, 0, 0, 0, 0 },
  { "all-reduce across manual groups of a partially manual value", 4,
    "HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT c = f32[] add(a, b)\n}\nENTRY e {\n"
    "  p = f32[2,2] parameter(0), sharding={devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}\n"
    "  ROOT r = f32[2,2] all-reduce(p), to_apply=sum, replica_groups={{2,0},{1,3}},"
    " use_global_device_ids=true, channel_id=1,"
    " sharding={devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}\n}\n",
    0, 1, 0, 0, 0 },
  { "all-reduce of a replicated value over all devices", 4,
    "HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT c = f32[] add(a, b)\n}\nENTRY e {\n"
    "  p = f32[2,2] parameter(0), sharding={devices=[2,2]<=[4]}\n"
    "  ROOT r = f32[2,2] all-reduce(p), to_apply=sum, replica_groups={{0,1,2,3}},"
    " use_global_device_ids=true, channel_id=1, sharding={replicated}\n}\n",
    1, ANY, ANY, 0, 0 },
  { "variadic reduce over a split dim of a partially manual value", 4,
    "HloModule m\nmaxidx {\n  a = f32[] parameter(0)\n  i = s32[] parameter(1)\n"
    "  b = f32[] parameter(2)\n  j = s32[] parameter(3)\n"
    "  g = pred[] compare(a, b), direction=GT\n  v = f32[] select(g, a, b)\n"
    "  k = s32[] select(g, i, j)\n  ROOT t = (f32[], s32[]) tuple(v, k)\n}\nENTRY e {\n"
    "  x = f32[5,7] parameter(0), sharding={devices=[1,2,2]<=[4] last_tile_dims={manual}}\n"
    "  y = s32[5,7] parameter(1), sharding={devices=[1,2,2]<=[4] last_tile_dims={manual}}\n"
    "  a = f32[] parameter(2), sharding={devices=[2,2]<=[4] last_tile_dims={replicated,manual}}\n"
    "  b = s32[] parameter(3), sharding={devices=[2,2]<=[4] last_tile_dims={replicated,manual}}\n"
    "  ROOT r = (f32[5], s32[5]) reduce(x, y, a, b), dimensions={1}, to_apply=maxidx,"
    " sharding={{devices=[1,2,2]<=[4] last_tile_dims={replicated,manual}},"
    " {devices=[1,2,2]<=[4] last_tile_dims={replicated,manual}}}\n}\n",
    0, 0, 2, 0, 0 },
  { "TopK custom-call in a manual region", 2,
    "HloModule m\ngt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  i = s32[] parameter(2)\n  j = s32[] parameter(3)\n"
    "  ROOT c = pred[] compare(a, b), direction=GT\n}\nENTRY e {\n"
    "  p = f32[3,16] parameter(0), sharding={manual}\n"
    "  t = (f32[3,4], s32[3,4]) custom-call(p), custom_call_target=\"TopK\", called_computations={gt},"
    " sharding={{manual}, {manual}}\n"
    "  ROOT v = s32[3,4] get-tuple-element(t), index=1, sharding={manual}\n}\n",
    0, 0, 0, 0, 0 },
};

START_TEST (test_case)
{
  const Case *tc = &cases[_i];
  PsSpmdReport rep;
  ps_spmd_report_init (&rep);
  PsSpmdOptions o;
  ps_spmd_options_init (&o);
  o.report = &rep;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse (tc->hlo, strlen (tc->hlo), tc->name, &error);
  ck_assert_msg (m != NULL, "%s: %s", tc->name, error ? error->message : "");
  if (tc->propagate)
    ck_assert_msg (ps_propagate (m, NULL, &error), "%s: %s", tc->name, error->message);
  g_autofree char *text = NULL;
  gboolean ok = spmd_test_verify (m, tc->n, &o, 7, &text, &error);
  ck_assert_msg (ok, "%s: %s\n%s", tc->name, error ? error->message : "", text ? text : "");
  ck_assert_msg (rep.n_fallbacks <= tc->max_fallbacks, "%s: %" G_GINT64_FORMAT " fallbacks\n%s",
                 tc->name, rep.n_fallbacks, text);
  g_autoptr (PsModule) part = ps_spmd_partition (m, tc->n, NULL, &error);
  ck_assert_ptr_nonnull (part);
  if (strstr (tc->name, "reduce-scatter"))
    ck_assert_int_eq (spmd_test_count_op (part, PS_OP_REDUCE_SCATTER), 1);
  struct { PsOpcode op; int want; } checks[] = {
    { PS_OP_ALL_REDUCE, tc->all_reduce }, { PS_OP_ALL_GATHER, tc->all_gather },
    { PS_OP_ALL_TO_ALL, tc->all_to_all }, { PS_OP_COLLECTIVE_PERMUTE, tc->permute },
  };
  for (guint k = 0; k < G_N_ELEMENTS (checks); k++)
    if (checks[k].want >= 0)
      ck_assert_msg (spmd_test_count_op (part, checks[k].op) == checks[k].want,
                     "%s: %d %s, expected %d\n%s", tc->name,
                     spmd_test_count_op (part, checks[k].op), ps_opcode_name (checks[k].op),
                     checks[k].want, text);
  ps_spmd_report_clear (&rep);
}
END_TEST

/* A halo exchange really happens: the spatially sharded conv needs data
 * from neighbours, so it must use collective-permutes. */
START_TEST (test_conv_uses_permutes)
{
  const Case *tc = &cases[7];
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse (tc->hlo, strlen (tc->hlo), tc->name, &error);
  ck_assert_ptr_nonnull (m);
  g_autoptr (PsModule) part = ps_spmd_partition (m, tc->n, NULL, &error);
  ck_assert_ptr_nonnull (part);
  ck_assert_int_ge (spmd_test_count_op (part, PS_OP_COLLECTIVE_PERMUTE), 1);
  ck_assert_int_eq (spmd_test_count_op (part, PS_OP_ALL_GATHER), 0);
}
END_TEST

/* A fused module (XLA's optimized dumps) partitions like calls: each fused
 * computation is partitioned for its operands' shardings, and the result
 * agrees with the unpartitioned module on the interpreter. */
START_TEST (test_fusion_partitions)
{
  const char *hlo =
    "HloModule m\n"
    "fd {\n p0 = f32[8,6] parameter(0)\n p1 = f32[6,4] parameter(1)\n"
    " ROOT d = f32[8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n"
    "fl {\n q0 = f32[8,4] parameter(0)\n q1 = f32[8,4] parameter(1)\n"
    " a = f32[8,4] add(q0, q1)\n ROOT t = f32[8,4] tanh(a)\n}\n"
    "ENTRY e {\n"
    "  x = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}\n"
    "  w = f32[6,4] parameter(1), sharding={replicated}\n"
    "  d = f32[8,4] fusion(x, w), kind=kOutput, calls=fd\n"
    "  ROOT l = f32[8,4] fusion(d, d), kind=kLoop, calls=fl, sharding={devices=[4,1]<=[4]}\n}\n";
  GError *error = NULL;
  g_autofree char *text = NULL;
  ck_assert_msg (spmd_test_verify_text (hlo, 4, TRUE, NULL, &text, &error), "%s",
                 error ? error->message : "");
  ck_assert_msg (strstr (text, "f32[2,4] fusion(") != NULL, "%s", text);
  ck_assert_msg (strstr (text, "all-gather") == NULL, "%s", text);
}
END_TEST

/* The fallback is counted and still correct. */
START_TEST (test_fallback_reported)
{
  const char *hlo =
    "HloModule m\nENTRY e {\n"
    "  x = f32[6,10] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  ROOT r = f32[60] reshape(x), sharding={devices=[4]0,1,2,3}\n}\n";
  PsSpmdReport rep;
  ps_spmd_report_init (&rep);
  PsSpmdOptions o;
  ps_spmd_options_init (&o);
  o.report = &rep;
  GError *error = NULL;
  ck_assert_msg (spmd_test_verify_text (hlo, 4, FALSE, &o, NULL, &error), "%s",
                 error ? error->message : "");
  ck_assert_int_eq (rep.n_fallbacks, 1);
  ck_assert_int_eq (GPOINTER_TO_INT (g_hash_table_lookup (rep.fallback_ops, "reshape")), 1);
  ps_spmd_report_clear (&rep);
}
END_TEST

START_TEST (test_deterministic)
{
  const Case *tc = &cases[9];
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse (tc->hlo, strlen (tc->hlo), tc->name, &error);
  g_autofree char *a = NULL, *b = NULL;
  ck_assert (spmd_test_verify (m, tc->n, NULL, 1, &a, &error));
  ck_assert (spmd_test_verify (m, tc->n, NULL, 1, &b, &error));
  ck_assert_str_eq (a, b);
}
END_TEST

static const char manual_sum_hlo[] =
  "HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
  "  ROOT c = f32[] add(a, b)\n}\nENTRY e {\n"
  "  p = f32[2,2] parameter(0), sharding={devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}\n"
  "  ROOT r = f32[2,2] all-reduce(p), to_apply=sum, replica_groups={{1,0},{2,3}},"
  " use_global_device_ids=true, channel_id=1,"
  " sharding={devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}\n}\n";

/* An all-reduce in a partially manual region whose groups mix devices that
 * hold different tiles is rejected (as XLA does): copied as it is, it
 * would add different rows together. */
START_TEST (test_manual_all_reduce_across_tiles_rejected)
{
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse (manual_sum_hlo, strlen (manual_sum_hlo), "t", &error);
  ck_assert_ptr_nonnull (m);
  g_autoptr (PsModule) part = ps_spmd_partition (m, 4, NULL, &error);
  ck_assert_ptr_null (part);
  ck_assert_ptr_nonnull (strstr (error->message, "different manual subgroups"));
  g_error_free (error);
}
END_TEST

static gboolean
verify_by_hand (const char *orig_hlo, const char *part_hlo, int64_t n, PsVerifyResult *res)
{
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse (orig_hlo, strlen (orig_hlo), "orig", &error);
  ck_assert_ptr_nonnull (m);
  g_autoptr (PsModule) p = ps_hlo_parse (part_hlo, strlen (part_hlo), "part", &error);
  ck_assert_ptr_nonnull (p);
  gboolean ok = ps_verify_spmd (m, p, n, NULL, res, &error);
  ck_assert_msg (ok, "%s", error ? error->message : "");
  return res->agree;
}

/* The global view can fail: wrong per-device programs for manual code are
 * caught, on the device where they go wrong. */
START_TEST (test_global_view_catches_mistakes)
{
  const char *orig =
    "HloModule m\nENTRY e {\n"
    "  x = f32[8,2] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  m = f32[4,2] custom-call(x), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n"
    "  p = u32[] partition-id(), sharding={manual}\n"
    "  c = f32[] convert(p), sharding={manual}\n"
    "  b = f32[4,2] broadcast(c), dimensions={}, sharding={manual}\n"
    "  ROOT a = f32[4,2] add(m, b), sharding={manual}\n}\n";
  /* Right: every device adds its id to its tile. */
  const char *right =
    "HloModule r\nENTRY e {\n  x = f32[4,2] parameter(0)\n  p = u32[] partition-id()\n"
    "  c = f32[] convert(p)\n  b = f32[4,2] broadcast(c), dimensions={}\n"
    "  ROOT a = f32[4,2] add(x, b)\n}\n";
  /* Wrong: the partition id is forgotten; only device 1 differs. */
  const char *wrong =
    "HloModule w\nENTRY e {\n  x = f32[4,2] parameter(0)\n  ROOT a = f32[4,2] copy(x)\n}\n";
  PsVerifyResult res;
  ck_assert (verify_by_hand (orig, right, 2, &res));
  ck_assert_int_eq (res.n_compared, 16);
  ps_verify_result_clear (&res);
  ck_assert (!verify_by_hand (orig, wrong, 2, &res));
  ck_assert_int_eq (res.mismatch_device, 1);
  ps_verify_result_clear (&res);
  /* The all-reduce XLA rejects, copied as it is: its groups add rows of
   * different tiles, which the global view tells apart. */
  const char *copied =
    "HloModule c\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT c = f32[] add(a, b)\n}\nENTRY e {\n  p = f32[1,2] parameter(0)\n"
    "  ROOT r = f32[1,2] all-reduce(p), to_apply=sum, replica_groups={{1,0},{2,3}},"
    " use_global_device_ids=true, channel_id=1\n}\n";
  ck_assert (!verify_by_hand (manual_sum_hlo, copied, 4, &res));
  ps_verify_result_clear (&res);
}
END_TEST

static Suite *
spmd_suite (void)
{
  Suite *s = suite_create ("spmd");
  TCase *tc = ps_check_case (s, "handlers", 120, PS_CHECK_TESTS (
      test_conv_uses_permutes, test_fallback_reported, test_fusion_partitions,
      test_deterministic, test_manual_all_reduce_across_tiles_rejected,
      test_global_view_catches_mistakes));
  tcase_add_loop_test (tc, test_case, 0, G_N_ELEMENTS (cases));
  return s;
}

int
main (void)
{
  return ps_check_run (spmd_suite (), CK_FORK_GETENV);
}
