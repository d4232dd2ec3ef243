/* The encoder-decoder Transformer as a model family (`podsim run encdec`):
 * its parameters (the fields of PsEncDecConfig), their defaults (the small
 * test model on a 2x4 mesh of v3-8) and the adaptor to the builder.
 * Presets: models/presets/T5*.ini (T5 v1.1; doc/models.md). The MoE keys
 * (experts .. groups) are the moe family's, for GShard's block in both stacks. */
#include "config.h"

#include <string.h>

#include "common/error.h"
#include "models/encdec.h"
#include "models/family.h"

static const PsParamSpec specs[] = {
  { "model", "enc_layers", PS_PARAM_INT, "2", "Encoder layers", 1, 1024, NULL, NULL, NULL },
  { "model", "dec_layers", PS_PARAM_INT, "2", "Decoder layers", 1, 1024, NULL, NULL, NULL },
  { "model", "model_dim", PS_PARAM_INT, "16", "Model dim M", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "ffn_dim", PS_PARAM_INT, "32", "Feed-forward dim H", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "heads", PS_PARAM_INT, "4", "Attention heads N", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "head_dim", PS_PARAM_INT, "4", "Attention head dim D", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "kv_heads", PS_PARAM_INT, "0",
    "Key/value heads: 0 = heads (multi-head), 1 = multi-query, else grouped-query (divides heads)",
    0, 1 << 24, NULL, NULL, NULL },
  { "model", "src_len", PS_PARAM_INT, "8", "Source (encoder) length", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "tgt_len", PS_PARAM_INT, "4", "Target (decoder) length", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "global_batch", PS_PARAM_INT, "8", "Global batch B (sequence pairs per step)", 1, 1 << 24,
    NULL, "batch", NULL },
  { "model", "vocab", PS_PARAM_INT, "64", "Vocabulary size V (shared by source and target)", 1, 1 << 24,
    NULL, NULL, NULL },
  { "model", "rel_buckets", PS_PARAM_INT, "8",
    "Relative-position buckets (T5: 32; bidirectional in the encoder, causal in the decoder; 0: none)",
    0, 254, NULL, NULL, NULL },
  { "model", "position", PS_PARAM_CHOICE, "relative", "Positions: relative bias, rotary or none", 0, 0,
    "relative|rope|none", NULL, NULL },
  { "model", "norm", PS_PARAM_CHOICE, "rms", "Normalisation: RMS norm (T5) or layer norm", 0, 0, "layer|rms",
    NULL, NULL },
  { "model", "ffn", PS_PARAM_CHOICE, "geglu", "Feed-forward: relu (T5 v1.0), gelu, geglu (T5 v1.1), swiglu",
    0, 0, "relu|gelu|geglu|swiglu", NULL, NULL },
  { "model", "tie_embeddings", PS_PARAM_BOOL, "false",
    "Softmax weights are the embedding's (T5 v1.0); false: their own (T5 v1.1)", 0, 0, NULL, NULL, NULL },
  { "model", "optimizer", PS_PARAM_CHOICE, "adafactor", "Optimizer (T5: Adafactor)", 0, 0, "adafactor|adam",
    NULL, NULL },
  { "model", "experts", PS_PARAM_INT, "0",
    "Experts E of the MoE FFNs (0: every FFN dense; GShard, Switch: one or more per core)", 0, 1 << 24,
    NULL, NULL, NULL },
  { "model", "moe_every", PS_PARAM_INT, "2",
    "Every this many layers of each stack the FFN is an MoE block (GShard, Switch: 2)", 1, 1024,
    NULL, NULL, NULL },
  { "model", "top_k", PS_PARAM_INT, "2", "Experts each token is sent to (GShard: 2, Switch: 1)", 1, 1 << 24,
    NULL, NULL, NULL },
  { "model", "capacity_factor", PS_PARAM_FLOAT, "2",
    "Expert capacity C = ceil(capacity_factor x group size / E) (GShard: 2)", 0, 1000000, NULL, NULL, NULL },
  { "model", "aux_loss_weight", PS_PARAM_FLOAT, "0.01", "Weight of the MoE load-balancing loss", 0, 1000000,
    NULL, NULL, NULL },
  { "parallelism", "groups", PS_PARAM_INT, "0",
    "Token groups G of the MoE gating, in each stack (0: one per device); split over mesh axis 0 with the experts",
    0, 1 << 24, NULL, NULL, NULL },
  { "parallelism", "mesh", PS_PARAM_MESH, "2x4",
    "Logical device mesh AxB (arange order); A*B must be the slice's core count", 2, 2, NULL, NULL, "*" },
  { "parallelism", "sharding", PS_PARAM_CHOICE, "2d",
    "Sharding preset, as in the dense family: 2d, 1d, dp, megatron, megatron-sp, fsdp", 0, 0,
    "2d|1d|dp|megatron|megatron-sp|fsdp", NULL, "*" },
  { "parallelism", "weight_update_sharding", PS_PARAM_BOOL, "false",
    "Shard optimizer state and the update over the data-parallel axis", 0, 0, NULL, NULL, "*" },
};

static void
config_from (const PsParams *p, PsEncDecConfig *c)
{
  ps_encdec_config_small (c);
  c->params = p;
  c->enc_layers = (int) ps_params_int (p, "enc_layers");
  c->dec_layers = (int) ps_params_int (p, "dec_layers");
  c->model_dim = ps_params_int (p, "model_dim");
  c->ffn_dim = ps_params_int (p, "ffn_dim");
  c->heads = ps_params_int (p, "heads");
  c->head_dim = ps_params_int (p, "head_dim");
  c->kv_heads = ps_params_int (p, "kv_heads");
  c->src_len = ps_params_int (p, "src_len");
  c->tgt_len = ps_params_int (p, "tgt_len");
  c->global_batch = ps_params_int (p, "global_batch");
  c->vocab = ps_params_int (p, "vocab");
  c->rel_buckets = (int) ps_params_int (p, "rel_buckets");
  c->position = ps_layer_choice (ps_position_names, ps_params_str (p, "position"));
  c->norm = ps_layer_choice (ps_norm_names, ps_params_str (p, "norm"));
  c->ffn = ps_layer_choice (ps_ffn_names, ps_params_str (p, "ffn"));
  c->untied_embeddings = !ps_params_bool (p, "tie_embeddings");
  ps_optimizer_from_name (ps_params_str (p, "optimizer"), &c->optimizer);
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  ps_params_mesh (p, "mesh", dims);
  c->mesh[0] = dims[0];
  c->mesh[1] = dims[1];
  ps_sharding_preset_from_name (ps_params_str (p, "sharding"), &c->sharding);
  c->weight_update_sharding = ps_params_bool (p, "weight_update_sharding");
  c->experts = ps_params_int (p, "experts");
  c->moe_every = (int) ps_params_int (p, "moe_every");
  c->top_k = (int) ps_params_int (p, "top_k");
  c->capacity_factor = ps_params_double (p, "capacity_factor");
  c->aux_loss_weight = ps_params_double (p, "aux_loss_weight");
  c->groups = ps_params_int (p, "groups");
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
    : g_strdup_printf (", MoE every %d layers (%" G_GINT64_FORMAT " experts, top-%d)",
                       (int) ps_params_int (p, "moe_every"), ps_params_int (p, "experts"),
                       (int) ps_params_int (p, "top_k"));
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
  return g_strdup_printf ("%s sharding%s on mesh %s, slice %s; %s, whole-step backward (no remat)",
                          ps_params_str (p, "sharding"),
                          ps_params_bool (p, "weight_update_sharding") ? " + weight-update sharding" : "", mesh,
                          ps_params_str (p, "slice"), ps_params_str (p, "optimizer"));
}

const PsModelFamily ps_encdec_family = {
  .name = "encdec",
  .summary = "The encoder-decoder Transformer (T5, Switch), with cross-attention, the dense family's block options and MoE FFNs",
  .doc = "doc/models.md",
  .item_unit = "tokens",      /* target tokens (doc/models.md) */
  .specs = specs,
  .n_specs = G_N_ELEMENTS (specs),
  .check = check,
  .build = build,
  .describe_model = describe_model,
  .describe_parallelism = describe_parallelism,
};
