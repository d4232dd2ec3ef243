/* The encoder-decoder Transformer as a model family (`podsim run encdec`):
 * its parameters (the fields of PsEncDecConfig), their defaults (the small
 * test model on a 2x4 mesh of v3-8) and the adaptor to the builder.
 * Presets: models/presets/T5*.ini (T5 v1.1) and GShard*.ini (GShard's MoE
 * translation models, Table 3; doc/models.md). The MoE keys (experts ..
 * groups) are the moe family's, for GShard's block in both stacks, with
 * the expert layouts of moe_sharding. */
#include "config.h"

#include <string.h>

#include "common/error.h"
#include "models/encdec.h"
#include "models/family.h"
#include "models/moe_layer.h"

static const PsParamSpec specs[] = {
  { .section = "model", .key = "enc_layers", .type = PS_PARAM_INT, .def = "2",
    .doc = "Encoder layers",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsEncDecConfig, enc_layers) },
  { .section = "model", .key = "dec_layers", .type = PS_PARAM_INT, .def = "2",
    .doc = "Decoder layers",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsEncDecConfig, dec_layers) },
  { .section = "model", .key = "model_dim", .type = PS_PARAM_INT, .def = "16",
    .doc = "Model dim M",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, model_dim) },
  { .section = "model", .key = "ffn_dim", .type = PS_PARAM_INT, .def = "32",
    .doc = "Feed-forward dim H",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, ffn_dim) },
  { .section = "model", .key = "heads", .type = PS_PARAM_INT, .def = "4",
    .doc = "Attention heads N",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, heads) },
  { .section = "model", .key = "head_dim", .type = PS_PARAM_INT, .def = "4",
    .doc = "Attention head dim D",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, head_dim) },
  { .section = "model", .key = "kv_heads", .type = PS_PARAM_INT, .def = "0",
    .doc = "Key/value heads: 0 = heads (multi-head), 1 = multi-query, else grouped-query (divides heads)",
    .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, kv_heads) },
  { .section = "model", .key = "rotary_dim", .type = PS_PARAM_INT, .def = "0",
    .doc = "With position rope: dims of each head that rotate (partial rotary: GPT-J 64 of 256); 0 = all of head_dim",
    .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, rotary_dim) },
  { .section = "model", .key = "rotary_pairs", .type = PS_PARAM_CHOICE, .def = "half",
    .doc = "With position rope: dims a rotation pairs: half (j with j + r/2: GPT-NeoX, Llama) or adjacent (2j with 2j+1: GPT-J)",
    .choices = "half|adjacent",
    PS_PARAM_ENUM_FIELD (PsEncDecConfig, rotary_pairs, ps_rotary_pairs_names) },
  { .section = "model", .key = "src_len", .type = PS_PARAM_INT, .def = "8",
    .doc = "Source (encoder) length",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, src_len) },
  { .section = "model", .key = "tgt_len", .type = PS_PARAM_INT, .def = "4",
    .doc = "Target (decoder) length",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, tgt_len) },
  { .section = "model", .key = "global_batch", .type = PS_PARAM_INT, .def = "8",
    .doc = "Global batch B (sequence pairs per step)",
    .min = 1, .max = 1 << 24, .option = "batch",
    PS_PARAM_FIELD (PsEncDecConfig, global_batch) },
  { .section = "model", .key = "vocab", .type = PS_PARAM_INT, .def = "64",
    .doc = "Vocabulary size V (shared by source and target)",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, vocab) },
  { .section = "model", .key = "rel_buckets", .type = PS_PARAM_INT, .def = "8",
    .doc = "Relative-position buckets (T5: 32; bidirectional in the encoder, causal in the decoder; 0: none)",
    .max = 254,
    PS_PARAM_FIELD (PsEncDecConfig, rel_buckets) },
  { .section = "model", .key = "shared_rel_bias", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "One relative-bias table per stack, shared by its layers (T5); false: one a layer",
    PS_PARAM_FIELD (PsEncDecConfig, shared_rel_bias) },
  { .section = "model", .key = "position", .type = PS_PARAM_CHOICE, .def = "relative",
    .doc = "Positions: relative bias, rotary or none",
    .choices = "relative|rope|none",
    PS_PARAM_ENUM_FIELD (PsEncDecConfig, position, ps_position_names) },
  { .section = "model", .key = "norm", .type = PS_PARAM_CHOICE, .def = "rms",
    .doc = "Normalisation: RMS norm (T5) or layer norm",
    .choices = "layer|rms",
    PS_PARAM_ENUM_FIELD (PsEncDecConfig, norm, ps_norm_names) },
  { .section = "model", .key = "ffn", .type = PS_PARAM_CHOICE, .def = "geglu",
    .doc = "Feed-forward: relu (T5 v1.0), gelu, geglu (T5 v1.1), swiglu",
    .choices = "relu|gelu|geglu|swiglu",
    PS_PARAM_ENUM_FIELD (PsEncDecConfig, ffn, ps_ffn_names) },
  { .section = "model", .key = "tie_embeddings", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Softmax weights are the embedding's (T5 v1.0); false: their own (T5 v1.1)" },
  { .section = "model", .key = "optimizer", .type = PS_PARAM_CHOICE, .def = "adafactor",
    .doc = "Optimizer (T5: Adafactor)",
    .choices = "adafactor|adam",
    PS_PARAM_ENUM_FIELD (PsEncDecConfig, optimizer, ps_optimizer_names) },
  { .section = "model", .key = "f32_activations", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Activations in float32 (GShard's runs); false: bfloat16",
    PS_PARAM_FIELD (PsEncDecConfig, f32_activations) },
  { .section = "model", .key = "experts", .type = PS_PARAM_INT, .def = "0",
    .doc = "Experts E of the MoE FFNs (0: every FFN dense; GShard, Switch: one or more per core)",
    .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, experts) },
  { .section = "model", .key = "moe_every", .type = PS_PARAM_INT, .def = "2",
    .doc = "Every this many layers of each stack the FFN is an MoE block (GShard, Switch: 2)",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsEncDecConfig, moe_every) },
  { .section = "model", .key = "top_k", .type = PS_PARAM_INT, .def = "2",
    .doc = "Experts each token is sent to (GShard: 2, Switch: 1)",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, top_k) },
  { .section = "model", .key = "expert_ffn", .type = PS_PARAM_CHOICE, .def = "relu",
    .doc = "The experts' FFN activation: relu (GShard section 2.2, Switch) or gelu (tanh approximation); the dense layers' is ffn",
    .choices = "relu|gelu",
    PS_PARAM_ENUM_FIELD (PsEncDecConfig, expert_ffn, ps_expert_ffn_names) },
  { .section = "model", .key = "capacity_factor", .type = PS_PARAM_FLOAT, .def = "2",
    .doc = "Expert capacity C = ceil(capacity_factor x group size / E) (GShard: 2)",
    .max = 1000000,
    PS_PARAM_FIELD (PsEncDecConfig, capacity_factor) },
  { .section = "model", .key = "aux_loss_weight", .type = PS_PARAM_FLOAT, .def = "0.01",
    .doc = "Weight of the MoE load-balancing loss",
    .max = 1000000,
    PS_PARAM_FIELD (PsEncDecConfig, aux_loss_weight) },
  { .section = "parallelism", .key = "groups", .type = PS_PARAM_INT, .def = "0",
    .doc = "Token groups G of the MoE gating, in each stack (0: one per device); split over mesh axis 0 with the experts",
    .max = 1 << 24,
    PS_PARAM_FIELD (PsEncDecConfig, groups) },
  { .section = "parallelism", .key = "moe_sharding", .type = PS_PARAM_CHOICE, .def = "experts-x",
    .doc = "Expert layout of the MoE FFNs: experts-x (groups and experts over mesh axis 0), experts-xy (over every "
           "device), experts-x-hidden-y (experts-x, the experts' hidden dim over mesh axis 1)",
    .choices = "experts-x|experts-xy|experts-x-hidden-y", .search = "+experts-x|experts-xy|experts-x-hidden-y" },
  { .section = "parallelism", .key = "mesh", .type = PS_PARAM_MESH, .def = "2x4",
    .doc = "Logical device mesh AxB (arange order); A*B must be the slice's core count",
    .min = 2, .max = 2, .search = "*",
    PS_PARAM_FIELD (PsEncDecConfig, mesh) },
  { .section = "parallelism", .key = "sharding", .type = PS_PARAM_CHOICE, .def = "2d",
    .doc = "Sharding preset, as in the dense family: 2d, 1d, dp, megatron, megatron-sp, fsdp",
    .choices = "2d|1d|dp|megatron|megatron-sp|fsdp", .search = "*",
    PS_PARAM_ENUM_FIELD (PsEncDecConfig, sharding, ps_sharding_preset_names) },
  { .section = "parallelism", .key = "remat", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Backward one layer at a time, recomputing each layer's forward (keep only layer inputs); false: one backward of the whole step",
    .search = "*",
    PS_PARAM_FIELD (PsEncDecConfig, remat) },
  { .section = "parallelism", .key = "microbatches", .type = PS_PARAM_INT, .def = "1",
    .doc = "Gradient accumulation steps (the batch splits into this many microbatches)",
    .min = 1, .max = 1024, .search = "1|2|4|8",
    PS_PARAM_FIELD (PsEncDecConfig, microbatches) },
  { .section = "options", .key = "unroll_microbatches", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Write the microbatches one after the other (default: one while loop over them carrying one accumulator per weight; doc/models.md)",
    PS_PARAM_FIELD (PsEncDecConfig, unroll_microbatches) },
  { .section = "parallelism", .key = "weight_update_sharding", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Shard optimizer state and the update over the data-parallel axis",
    .search = "*",
    PS_PARAM_FIELD (PsEncDecConfig, weight_update_sharding) },
};

static void
config_from (const PsParams *p, PsEncDecConfig *c)
{
  ps_encdec_config_small (c);
  c->params = ps_params_store (p);
  ps_params_fill (p, c);
  c->untied_embeddings = !ps_params_bool (p, "tie_embeddings");
  c->moe_layout = (PsMoeLayout) ps_layer_choice (ps_moe_layout_names, ps_params_str (p, "moe_sharding"));
}

static gboolean
check (const PsParams *p, const PsModelTarget *t, GError **error)
{
  PsEncDecConfig c;
  config_from (p, &c);
  if (!ps_encdec_check (&c, error))
    return FALSE;
  g_autofree char *what = g_strdup_printf ("%s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, ps_params_where (p, "mesh"),
                                           c.mesh[0], c.mesh[1]);
  return ps_params_check_devices (p, t, c.mesh[0] * c.mesh[1], what, error);
}

static PsModule *
build (const PsParams *p, const PsModelTarget *t, PsModelInfo *info, GError **error)
{
  (void) t;
  PsEncDecConfig c;
  config_from (p, &c);
  return ps_encdec_build (&c, info, error);
}

static char *
describe_model (const PsParams *p, const PsModelInfo *info)
{
  (void) info;
  g_autofree char *moe = ps_params_int (p, "experts") == 0 ? g_strdup ("")
    : g_strdup_printf (", MoE every %d layers (%" G_GINT64_FORMAT " experts, top-%d, %s)",
                       (int) ps_params_int (p, "moe_every"), ps_params_int (p, "experts"),
                       (int) ps_params_int (p, "top_k"), ps_params_str (p, "moe_sharding"));
  return g_strdup_printf ("%d + %d layers, M=%" G_GINT64_FORMAT " H=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT
                          " D=%" G_GINT64_FORMAT ", source %" G_GINT64_FORMAT ", target %" G_GINT64_FORMAT
                          ", batch %" G_GINT64_FORMAT ", %s norm, %s, positions %s%s",
                          (int) ps_params_int (p, "enc_layers"), (int) ps_params_int (p, "dec_layers"),
                          ps_params_int (p, "model_dim"), ps_params_int (p, "ffn_dim"), ps_params_int (p, "heads"),
                          ps_params_int (p, "head_dim"), ps_params_int (p, "src_len"), ps_params_int (p, "tgt_len"),
                          ps_params_int (p, "global_batch"), ps_params_str (p, "norm"), ps_params_str (p, "ffn"),
                          ps_params_str (p, "position"), moe);
}

static char *
describe_parallelism (const PsParams *p, const PsModelInfo *info)
{
  (void) info;
  g_autofree char *mesh = ps_params_text (p, "mesh");
  const int mb = (int) ps_params_int (p, "microbatches");
  return g_strdup_printf ("%s sharding%s on mesh %s, slice %s; %s, %s, %d microbatch%s",
                          ps_params_str (p, "sharding"),
                          ps_params_bool (p, "weight_update_sharding") ? " + weight-update sharding" : "", mesh,
                          ps_params_str (p, "slice"), ps_params_str (p, "optimizer"),
                          ps_params_bool (p, "remat") ? "per-layer backward with remat" : "whole-step backward (no remat)",
                          mb, mb == 1 ? "" : "es");
}

/* Where the MoE blocks' compute goes, by the op_names the block tags (as
 * the moe family reports it). */
static const PsOpGroup op_groups[] = {
  { "gating", "gating", { PS_MOE_OP_GATING, NULL } },
  { "dispatch_combine", "dispatch/combine einsums", { PS_MOE_OP_DISPATCH, PS_MOE_OP_COMBINE, NULL } },
  { "experts", "expert FFNs", { PS_MOE_OP_EXPERTS, NULL } },
  { NULL, NULL, { NULL } }
};

const PsModelFamily ps_encdec_family = {
  .name = "encdec",
  .summary = "The encoder-decoder Transformer (T5, Switch), with cross-attention, the dense family's block options and MoE FFNs",
  .doc = "doc/models.md",
  .item_unit = "tokens",      /* target tokens (doc/models.md) */
  PS_MODEL_FAMILY_HOOKS,
  .op_groups = op_groups,
};
