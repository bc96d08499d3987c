"""A Qwen2-style decoder written the way Hugging Face transformers writes one: its RMSNorm
casts to float32 and back (`.to(torch.float32)`, `.to(input_dtype)`), rotary embeddings
through `rotate_half` with cos and sin computed in float32 and cast to the activations'
dtype, biased q/k/v projections, grouped-query attention with `repeat_kv` before
`F.scaled_dot_product_attention`, a SwiGLU MLP, the output head tied to the embedding."""
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, SEQ = 32000, 1024


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=1000000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        positions = position_ids[:, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):
            freqs = (inv_freq.float() @ positions.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep,
                                                           slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, hidden_states, cos, sin):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, q_len, -1))


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate):
        super().__init__()
        self.self_attn = Attention(hidden, heads, kv_heads)
        self.mlp = MLP(hidden, intermediate)
        self.input_layernorm = RMSNorm(hidden)
        self.post_attention_layernorm = RMSNorm(hidden)

    def forward(self, hidden_states, cos, sin):
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states),
                                                       cos, sin)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class Qwen2(nn.Module):
    def __init__(self, hidden=896, layers=12, heads=14, kv_heads=2, intermediate=4864):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, hidden)
        self.layers = nn.ModuleList(DecoderLayer(hidden, heads, kv_heads, intermediate)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.rotary_emb = RotaryEmbedding(hidden // heads)
        self.lm_head = nn.Linear(hidden, VOCAB, bias=False)
        self.lm_head.weight = self.embed_tokens.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear | nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if getattr(module, "bias", None) is not None:
                module.bias.data.zero_()

    def forward(self, input_ids):
        hidden_states = self.embed_tokens(input_ids)
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, cos, sin)
        return self.lm_head(self.norm(hidden_states)).float()


def _batch(n):
    tokens = torch.randint(0, VOCAB, (n, SEQ + 1))
    return tokens[:, :-1], tokens[:, 1:]


def build():
    return {"model": Qwen2(), "make_batch": _batch, "batch_size": 8, "name": "qwen2-style",
            "tokens_per_sample": SEQ}


def build_large():
    """Qwen2-1.5B's widths (hidden 1536, 12 heads over 2 key/value heads, MLP 8960) at 12
    layers."""
    return {"model": Qwen2(hidden=1536, layers=12, heads=12, kv_heads=2, intermediate=8960),
            "make_batch": _batch, "batch_size": 8, "name": "qwen2-style-large",
            "tokens_per_sample": SEQ}
