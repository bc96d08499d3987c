"""A GPT-NeoX (Pythia-160M-like) decoder written the way Hugging Face transformers writes
one: a fused query-key-value projection split by view and permute, rotary embeddings on a
quarter of each head (`rotate_half` on a slice, concatenated back with the rest), parallel
attention and MLP residuals, LayerNorm, GELU, an untied output head."""
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, SEQ = 50304, 1024


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, seq_len):
        t = torch.arange(seq_len, device=x.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class Attention(nn.Module):
    def __init__(self, hidden, heads, rotary_pct):
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.rotary_ndims = int(self.head_size * rotary_pct)
        self.rotary_emb = RotaryEmbedding(self.rotary_ndims)
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, hidden_states):
        bsz, seq_len, hidden = hidden_states.shape
        qkv = self.query_key_value(hidden_states)
        qkv = qkv.view(bsz, seq_len, self.heads, 3 * self.head_size)
        query = qkv[..., : self.head_size].permute(0, 2, 1, 3)
        key = qkv[..., self.head_size: 2 * self.head_size].permute(0, 2, 1, 3)
        value = qkv[..., 2 * self.head_size:].permute(0, 2, 1, 3)
        q_rot, q_pass = query[..., : self.rotary_ndims], query[..., self.rotary_ndims:]
        k_rot, k_pass = key[..., : self.rotary_ndims], key[..., self.rotary_ndims:]
        cos, sin = self.rotary_emb(value, seq_len)
        q_rot = q_rot * cos + rotate_half(q_rot) * sin
        k_rot = k_rot * cos + rotate_half(k_rot) * sin
        query = torch.cat((q_rot, q_pass), dim=-1)
        key = torch.cat((k_rot, k_pass), dim=-1)
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True)
        out = out.transpose(1, 2).contiguous().view(bsz, seq_len, hidden)
        return self.dense(out)


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(hidden, 4 * hidden)
        self.dense_4h_to_h = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))


class Layer(nn.Module):
    def __init__(self, hidden, heads, rotary_pct):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(hidden, eps=1e-5)
        self.post_attention_layernorm = nn.LayerNorm(hidden, eps=1e-5)
        self.attention = Attention(hidden, heads, rotary_pct)
        self.mlp = MLP(hidden)

    def forward(self, x):
        # parallel residual: attention and MLP both read the layer's input
        return x + self.attention(self.input_layernorm(x)) + \
            self.mlp(self.post_attention_layernorm(x))


class GPTNeoX(nn.Module):
    def __init__(self, hidden=768, layers=12, heads=12, rotary_pct=0.25):
        super().__init__()
        self.embed_in = nn.Embedding(VOCAB, hidden)
        self.layers = nn.ModuleList(Layer(hidden, heads, rotary_pct) for _ in range(layers))
        self.final_layer_norm = nn.LayerNorm(hidden, eps=1e-5)
        self.embed_out = nn.Linear(hidden, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.embed_in(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.embed_out(self.final_layer_norm(x))


def _batch(n):
    tokens = torch.randint(0, VOCAB, (n, SEQ + 1))
    return tokens[:, :-1], tokens[:, 1:]


def build():
    return {"model": GPTNeoX(), "make_batch": _batch, "batch_size": 8, "name": "gpt-neox-style",
            "tokens_per_sample": SEQ}
