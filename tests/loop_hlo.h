/* loop_hlo.h: the counted while loop the analysis and lowering suites both
 * run (check_analysis costs and measures it, check_lower lowers it).
 *
 * A format string: its one %d is the counter's start value, so the loop runs
 * 5 - start times (0 for a start of 5 or more).  The body applies exp to an
 * f32[4] carried beside the counter; the entry returns the carried array.
 * Header-only: each suite is its own program. */
#ifndef PS_TESTS_LOOP_HLO_H
#define PS_TESTS_LOOP_HLO_H

static const char *const loop_hlo =
  "HloModule loop\n"
  "cond {\n"
  "  p = (s32[], f32[4]) parameter(0)\n"
  "  i = s32[] get-tuple-element(p), index=0\n"
  "  n = s32[] constant(5)\n"
  "  ROOT lt = pred[] compare(i, n), direction=LT\n"
  "}\n"
  "body {\n"
  "  p = (s32[], f32[4]) parameter(0)\n"
  "  i = s32[] get-tuple-element(p), index=0\n"
  "  one = s32[] constant(1)\n"
  "  i2 = s32[] add(i, one)\n"
  "  x = f32[4] get-tuple-element(p), index=1\n"
  "  y = f32[4] exponential(x)\n"
  "  ROOT t = (s32[], f32[4]) tuple(i2, y)\n"
  "}\n"
  "ENTRY e {\n"
  "  a = f32[4] parameter(0)\n"
  "  z = s32[] constant(%d)\n"
  "  t = (s32[], f32[4]) tuple(z, a)\n"
  "  w = (s32[], f32[4]) while(t), condition=cond, body=body\n"
  "  ROOT r = f32[4] get-tuple-element(w), index=1\n"
  "}\n";

#endif
