"""Models as users take them from transformers, timm, torchvision, diffusers, PyTorch
Geometric and lucidrains' packages (built from configs, nothing downloaded), small enough to
profile on a CPU. Each family needs its library; the
test skips those whose library is not installed. `EXPECT`: family → {unit: class, or the
set of classes its calls land in; "!": classes that must appear nowhere}. `HELD_OUT`: the
families written with their classes before they were first profiled."""

import importlib

import torch

V = 1000

EXPECT = {
    # development: the classes were corrected on these
    "mixtral": {"_grouped_mm": "gemm", "linear": "gemm",
                "scaled_dot_product_attention": "attention"},
    "swin_t": {"matmul": "attention", "softmax": "attention", "linear": "gemm"},
    "llama": {"linear": "gemm", "scaled_dot_product_attention": "attention",
              "embedding": "embedding"},
    "bert_keywords": {"linear": "gemm", "scaled_dot_product_attention": "attention",
                      "layer_norm": "norm"},
    "levit": {"matmul": "attention", "softmax": "attention", "conv2d": "conv"},
    # held out
    "deberta_v2": {"bmm": "attention", "softmax": "attention", "linear": "gemm"},
    "xlnet": {"einsum": {"attention", "gemm"}, "softmax": "attention"},
    "longformer": {"softmax": "attention", "linear": "gemm", "einsum": "attention"},
    "mamba2": {"linear": "gemm", "!": {"attention"}},
    "reformer": {"matmul": "attention", "linear": "gemm"},
    "bloom": {"linear": "gemm", "softmax": "attention", "baddbmm": "attention",
              "bmm": "attention"},
    "xcit": {"softmax": "attention", "linear": "gemm", "conv2d": "conv"},
    "gmlp": {"linear": "gemm", "!": {"attention"}},
    "poolformer": {"conv2d": "conv", "avg_pool2d": "elementwise", "group_norm": "norm",
                   "!": {"attention"}},
    "davit": {"softmax": "attention", "linear": "gemm"},
    "tv_vit": {"scaled_dot_product_attention": "attention", "linear": "gemm",
               "conv2d": "conv"},
    "inception": {"conv2d": "conv", "batch_norm": "norm", "max_pool2d": "elementwise"},
    # held out, a second set (none corrected on)
    "unet_cond": {"conv2d": "conv", "group_norm": "norm", "linear": "gemm",
                  "scaled_dot_product_attention": "attention"},
    "vae": {"conv2d": "conv", "group_norm": "norm"},
    "dit": {"linear": "gemm", "scaled_dot_product_attention": "attention", "conv2d": "conv"},
    "gcn": {"linear": "gemm", "!": {"attention", "unknown"}},
    "gat": {"linear": "gemm", "!": {"unknown"}},
    "lucid_vit": {"matmul": "attention", "softmax": "attention", "linear": "gemm"},
    "lucid_perceiver": {"einsum": "attention", "softmax": "attention", "linear": "gemm"},
    "lucid_mixer": {"linear": "gemm", "!": {"attention"}},
    "lucid_cait": {"linear": "gemm", "softmax": "attention"},
}
HELD_OUT = {"deberta_v2", "xlnet", "longformer", "mamba2", "reformer", "bloom", "xcit", "gmlp",
            "poolformer", "davit", "tv_vit", "inception", "unet_cond", "vae", "dit", "gcn",
            "gat", "lucid_vit", "lucid_perceiver", "lucid_mixer", "lucid_cait"}
# where each family comes from: the test skips it without that library
LIBRARY = {f: "transformers" for f in ("mixtral", "llama", "bert_keywords", "deberta_v2",
                                       "xlnet", "longformer", "mamba2", "reformer", "bloom")}
LIBRARY.update({f: "timm" for f in ("levit", "xcit", "gmlp", "poolformer", "davit")})
LIBRARY.update({f: "torchvision" for f in ("swin_t", "tv_vit", "inception")})
LIBRARY.update({f: "diffusers" for f in ("unet_cond", "vae", "dit")})
LIBRARY.update({"gcn": "torch_geometric", "gat": "torch_geometric", "lucid_vit": "vit_pytorch",
                "lucid_cait": "vit_pytorch", "lucid_perceiver": "perceiver_pytorch",
                "lucid_mixer": "mlp_mixer_pytorch"})


def _hf(config, model, **kw):
    t = importlib.import_module("transformers")
    return getattr(t, model)(getattr(t, config)(**kw))


def _lm(model, length=64):
    def make_batch(n):
        ids = torch.randint(0, V, (n, length))
        return (ids,), ids
    return model, make_batch


def _images(model, size, classes=100):
    return model, lambda n: ((torch.randn(n, 3, size, size),), torch.randint(0, classes, (n,)))


def _timm(name, size, **kw):
    timm = importlib.import_module("timm")
    return _images(timm.create_model(name, num_classes=100, **kw), size)


def mixtral():
    return _lm(_hf("MixtralConfig", "MixtralForCausalLM", vocab_size=V, hidden_size=128,
                   intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2))


def llama():
    return _lm(_hf("LlamaConfig", "LlamaForCausalLM", vocab_size=V, hidden_size=128,
                   intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2))


def bert_keywords():  # the batch as a Hugging Face collator makes it, labels inside
    model = _hf("BertConfig", "BertForSequenceClassification", vocab_size=V, hidden_size=128,
                num_hidden_layers=2, num_attention_heads=4, intermediate_size=512, num_labels=3)

    def make_batch(n):
        ids = torch.randint(0, V, (n, 64))
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "labels": torch.randint(0, 3, (n,))}
    return model, make_batch


def deberta_v2():
    model = _hf("DebertaV2Config", "DebertaV2ForSequenceClassification", vocab_size=V,
                hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=512, relative_attention=True, pos_att_type=["p2c", "c2p"],
                max_relative_positions=64, position_buckets=32, num_labels=3)
    return model, lambda n: ((torch.randint(0, V, (n, 64)),), torch.randint(0, 3, (n,)))


def xlnet():
    return _lm(_hf("XLNetConfig", "XLNetLMHeadModel", vocab_size=V, d_model=128, n_layer=2,
                   n_head=4, d_inner=512))


def longformer():
    return _lm(_hf("LongformerConfig", "LongformerForMaskedLM", vocab_size=V, hidden_size=128,
                   num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                   attention_window=[32, 32], max_position_embeddings=300), 128)


def mamba2():
    return _lm(_hf("Mamba2Config", "Mamba2ForCausalLM", vocab_size=V, hidden_size=128,
                   num_heads=8, head_dim=32, state_size=16, num_hidden_layers=2, n_groups=1,
                   chunk_size=32, expand=2))


def reformer():
    return _lm(_hf("ReformerConfig", "ReformerModelWithLMHead", vocab_size=V, hidden_size=128,
                   attention_head_size=32, num_attention_heads=4, feed_forward_size=256,
                   axial_pos_embds=False, max_position_embeddings=128,
                   attn_layers=["lsh", "local"], lsh_attn_chunk_length=32,
                   local_attn_chunk_length=32, num_buckets=4, is_decoder=True, pad_token_id=0,
                   eos_token_id=1), 128)


def bloom():
    return _lm(_hf("BloomConfig", "BloomForCausalLM", vocab_size=V, hidden_size=128, n_layer=2,
                   n_head=4))


def levit():
    return _timm("levit_128s", 224)


def xcit():
    return _timm("xcit_nano_12_p16_224", 96, img_size=96, depth=2)


def gmlp():
    return _timm("gmlp_ti16_224", 96, img_size=96)


def poolformer():
    return _timm("poolformer_s12", 64)


def davit():
    return _timm("davit_tiny", 96, depths=(1, 1, 1, 1))


def swin_t():
    tvm = importlib.import_module("torchvision.models")
    return _images(tvm.swin_t(num_classes=100), 128)


def tv_vit():
    vt = importlib.import_module("torchvision.models.vision_transformer")
    return _images(vt.VisionTransformer(image_size=96, patch_size=16, num_layers=2, num_heads=4,
                                        hidden_dim=128, mlp_dim=512, num_classes=100), 96)


def inception():
    tvm = importlib.import_module("torchvision.models")
    return _images(tvm.inception_v3(num_classes=100, aux_logits=True, init_weights=True), 299)


def unet_cond():  # a latent diffusion U-Net: noise prediction against the noise
    from diffusers import UNet2DConditionModel
    model = UNet2DConditionModel(
        sample_size=32, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8)

    def make_batch(n):
        noisy, noise = torch.randn(n, 4, 32, 32), torch.randn(n, 4, 32, 32)
        return (noisy, torch.randint(0, 1000, (n,)), torch.randn(n, 16, 32)), noise
    return model, make_batch


def vae():
    from diffusers import AutoencoderKL
    model = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=8,
                          down_block_types=("DownEncoderBlock2D",) * 2,
                          up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64))
    return model, lambda n: ((torch.randn(n, 3, 64, 64),), torch.randn(n, 3, 64, 64))


def dit():
    from diffusers import DiTTransformer2DModel
    model = DiTTransformer2DModel(num_attention_heads=4, attention_head_dim=32, in_channels=4,
                                  num_layers=2, sample_size=16, patch_size=2,
                                  num_embeds_ada_norm=1000)

    def make_batch(n):
        steps, labels = torch.randint(0, 1000, (n,)), torch.randint(0, 1000, (n,))
        return (torch.randn(n, 4, 16, 16), steps, labels), torch.randn(n, 4, 16, 16)
    return model, make_batch


def _graph_batch(n):  # one graph of 2,000 nodes a step, whatever the batch
    x, edges = torch.randn(2000, 64), torch.randint(0, 2000, (2, 16000))
    return (x, edges), torch.randint(0, 10, (2000,))


def gcn():
    from torch_geometric.nn import GCN
    return {"model": GCN(64, 128, 2, out_channels=10), "make_batch": _graph_batch,
            "batch_size": 1}


def gat():
    from torch_geometric.nn import GAT
    return {"model": GAT(64, 32, 2, out_channels=10, heads=4), "make_batch": _graph_batch,
            "batch_size": 1}


def lucid_vit():
    from vit_pytorch import ViT
    return _images(ViT(image_size=64, patch_size=8, num_classes=10, dim=128, depth=2, heads=4,
                       mlp_dim=256, dim_head=32), 64, 10)


def lucid_cait():
    from vit_pytorch.cait import CaiT
    return _images(CaiT(image_size=64, patch_size=8, num_classes=10, dim=128, depth=2,
                        cls_depth=1, heads=4, mlp_dim=256), 64, 10)


def lucid_perceiver():
    from perceiver_pytorch import Perceiver
    model = Perceiver(input_channels=3, input_axis=2, num_freq_bands=6, max_freq=10.0, depth=2,
                      num_latents=64, latent_dim=128, cross_heads=1, latent_heads=4,
                      cross_dim_head=32, latent_dim_head=32, num_classes=10,
                      self_per_cross_attn=1)
    return model, lambda n: ((torch.randn(n, 32, 32, 3),), torch.randint(0, 10, (n,)))


def lucid_mixer():
    from mlp_mixer_pytorch import MLPMixer
    return _images(MLPMixer(image_size=64, channels=3, patch_size=8, dim=128, depth=2,
                            num_classes=10), 64, 10)
