"""T5 v1.1 written the way Hugging Face transformers writes T5ForConditionalGeneration: an
encoder and a decoder of pre-norm blocks with RMS layer norms computed in fp32, attention
without a 1/√d scale whose scores (torch.matmul, not a fused kernel) take a bucketed relative
position bias made by the first layer and passed on to the others, an additive mask, softmax
in fp32, a gated-GELU feed-forward, cross-attention in the decoder, an untied LM head and
cross-entropy over the labels. Span-corruption shapes: 512 input tokens, 114 target tokens.
`build`: t5-v1_1-small (d 512, 8 layers each side); `build_base`: t5-v1_1-base (d 768, 12)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, INPUTS, TARGETS = 32128, 512, 114


class T5LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, hidden):
        variance = hidden.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden = hidden * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            hidden = hidden.to(self.weight.dtype)
        return self.weight * hidden


def relative_position_bucket(relative, bidirectional, num_buckets=32, max_distance=128):
    """Relative positions into buckets: exact up to half the buckets, logarithmic past them
    up to `max_distance`; the decoder looks only back."""
    buckets = 0
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0).to(torch.long) * num_buckets
        relative = torch.abs(relative)
    else:
        relative = -torch.min(relative, torch.zeros_like(relative))
    exact = num_buckets // 2
    small = relative < exact
    large = exact + (torch.log(relative.float() / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(small, relative, large)


class T5Attention(nn.Module):
    def __init__(self, d, heads, d_kv, has_bias, is_decoder, dropout):
        super().__init__()
        self.n_heads, self.key_value_proj_dim, self.is_decoder = heads, d_kv, is_decoder
        inner = heads * d_kv
        self.q, self.k = nn.Linear(d, inner, bias=False), nn.Linear(d, inner, bias=False)
        self.v, self.o = nn.Linear(d, inner, bias=False), nn.Linear(inner, d, bias=False)
        self.dropout = dropout
        self.has_relative_attention_bias = has_bias
        if has_bias:
            self.relative_attention_bias = nn.Embedding(32, heads)

    def compute_bias(self, q_len, k_len, device):
        context = torch.arange(q_len, dtype=torch.long, device=device)[:, None]
        memory = torch.arange(k_len, dtype=torch.long, device=device)[None, :]
        bucket = relative_position_bucket(memory - context, not self.is_decoder)
        values = self.relative_attention_bias(bucket)  # (q, k, heads)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden, mask=None, key_value_states=None, position_bias=None):
        b, q_len = hidden.shape[:2]
        source = hidden if key_value_states is None else key_value_states
        k_len = source.shape[1]

        def shape(x):
            return x.view(b, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        q, k, v = shape(self.q(hidden)), shape(self.k(source)), shape(self.v(source))
        scores = torch.matmul(q, k.transpose(3, 2))
        if position_bias is None:
            if self.has_relative_attention_bias:
                position_bias = self.compute_bias(q_len, k_len, scores.device)
            else:
                position_bias = torch.zeros((1, self.n_heads, q_len, k_len),
                                            device=scores.device, dtype=scores.dtype)
            if mask is not None:
                position_bias = position_bias + mask
        scores += position_bias
        weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        weights = F.dropout(weights, p=self.dropout, training=self.training)
        out = torch.matmul(weights, v).transpose(1, 2).contiguous().view(b, -1, self.n_heads
                                                                         * self.key_value_proj_dim)
        return self.o(out), position_bias


class T5LayerSelfAttention(nn.Module):
    def __init__(self, d, heads, d_kv, has_bias, is_decoder, dropout):
        super().__init__()
        self.SelfAttention = T5Attention(d, heads, d_kv, has_bias, is_decoder, dropout)
        self.layer_norm, self.dropout = T5LayerNorm(d), nn.Dropout(dropout)

    def forward(self, hidden, mask, position_bias):
        out, position_bias = self.SelfAttention(self.layer_norm(hidden), mask,
                                                position_bias=position_bias)
        return hidden + self.dropout(out), position_bias


class T5LayerCrossAttention(nn.Module):
    def __init__(self, d, heads, d_kv, dropout):
        super().__init__()
        self.EncDecAttention = T5Attention(d, heads, d_kv, False, True, dropout)
        self.layer_norm, self.dropout = T5LayerNorm(d), nn.Dropout(dropout)

    def forward(self, hidden, encoder_states, mask, position_bias):
        out, position_bias = self.EncDecAttention(self.layer_norm(hidden), mask,
                                                  key_value_states=encoder_states,
                                                  position_bias=position_bias)
        return hidden + self.dropout(out), position_bias


class T5DenseGatedActDense(nn.Module):
    def __init__(self, d, d_ff, dropout):
        super().__init__()
        self.wi_0, self.wi_1 = nn.Linear(d, d_ff, bias=False), nn.Linear(d, d_ff, bias=False)
        self.wo, self.dropout = nn.Linear(d_ff, d, bias=False), nn.Dropout(dropout)

    def forward(self, hidden):
        gelu = F.gelu(self.wi_0(hidden), approximate="tanh")  # gelu_new
        return self.wo(self.dropout(gelu * self.wi_1(hidden)))


class T5LayerFF(nn.Module):
    def __init__(self, d, d_ff, dropout):
        super().__init__()
        self.DenseReluDense = T5DenseGatedActDense(d, d_ff, dropout)
        self.layer_norm, self.dropout = T5LayerNorm(d), nn.Dropout(dropout)

    def forward(self, hidden):
        return hidden + self.dropout(self.DenseReluDense(self.layer_norm(hidden)))


class T5Block(nn.Module):
    def __init__(self, d, d_ff, heads, d_kv, has_bias, is_decoder, dropout):
        super().__init__()
        self.is_decoder = is_decoder
        self.layer = nn.ModuleList([T5LayerSelfAttention(d, heads, d_kv, has_bias, is_decoder,
                                                         dropout)])
        if is_decoder:
            self.layer.append(T5LayerCrossAttention(d, heads, d_kv, dropout))
        self.layer.append(T5LayerFF(d, d_ff, dropout))

    def forward(self, hidden, mask, position_bias, encoder_states=None, encoder_mask=None,
                encoder_bias=None):
        hidden, position_bias = self.layer[0](hidden, mask, position_bias)
        if self.is_decoder:
            hidden, encoder_bias = self.layer[1](hidden, encoder_states, encoder_mask,
                                                 encoder_bias)
        return self.layer[-1](hidden), position_bias, encoder_bias


class T5Stack(nn.Module):
    def __init__(self, embed_tokens, layers, d, d_ff, heads, d_kv, is_decoder, dropout):
        super().__init__()
        self.embed_tokens, self.is_decoder = embed_tokens, is_decoder
        self.block = nn.ModuleList([T5Block(d, d_ff, heads, d_kv, i == 0, is_decoder, dropout)
                                    for i in range(layers)])
        self.final_layer_norm, self.dropout = T5LayerNorm(d), nn.Dropout(dropout)

    def forward(self, input_ids, encoder_states=None):
        hidden = self.dropout(self.embed_tokens(input_ids))
        b, length = input_ids.shape
        dtype = hidden.dtype
        mask = torch.ones(b, length, device=input_ids.device)
        if self.is_decoder:
            causal = torch.tril(torch.ones(length, length, device=input_ids.device))
            mask = causal[None, None] * mask[:, None, None, :]
        else:
            mask = mask[:, None, None, :]
        mask = (1.0 - mask.to(dtype)) * torch.finfo(dtype).min
        encoder_mask = None
        if encoder_states is not None:
            ones = torch.ones(b, encoder_states.shape[1], device=input_ids.device)
            encoder_mask = (1.0 - ones[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        position_bias = encoder_bias = None
        for block in self.block:
            hidden, position_bias, encoder_bias = block(hidden, mask, position_bias,
                                                        encoder_states, encoder_mask,
                                                        encoder_bias)
        return self.dropout(self.final_layer_norm(hidden))


class T5ForConditionalGeneration(nn.Module):
    def __init__(self, d=512, d_ff=1024, layers=8, heads=6, d_kv=64, dropout=0.1):
        super().__init__()
        self.shared = nn.Embedding(VOCAB, d)
        self.encoder = T5Stack(self.shared, layers, d, d_ff, heads, d_kv, False, dropout)
        self.decoder = T5Stack(self.shared, layers, d, d_ff, heads, d_kv, True, dropout)
        self.lm_head = nn.Linear(d, VOCAB, bias=False)

    @staticmethod
    def _shift_right(labels):
        shifted = labels.new_zeros(labels.shape)  # decoder_start_token_id 0
        shifted[..., 1:] = labels[..., :-1].clone()
        return shifted.masked_fill(shifted == -100, 0)  # pad_token_id 0

    def forward(self, input_ids, labels):
        encoded = self.encoder(input_ids)
        decoded = self.decoder(self._shift_right(labels), encoded)
        return self.lm_head(decoded)


def _batch(n):
    labels = torch.randint(0, VOCAB, (n, TARGETS))
    return (torch.randint(0, VOCAB, (n, INPUTS)), labels), labels


def _loss(logits, labels):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)


def build():
    return {"model": T5ForConditionalGeneration(), "make_batch": _batch, "loss": _loss,
            "batch_size": 32, "name": "t5-v1_1-small"}


def build_base():
    return {"model": T5ForConditionalGeneration(768, 2048, 12, 12), "make_batch": _batch,
            "loss": _loss, "batch_size": 32, "name": "t5-v1_1-base"}
