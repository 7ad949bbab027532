"""Families of the ONNX corpus written as users write them (tests/data/make_onnx_corpus.py imports
this module from its own folder): a GPT with rotary position embeddings whose cos/sin tables the
forward computes from an inverse-frequency buffer, the two ways users write it, so the importer
must tell that buffer from a parameter without the tracer's record (core/onnx/frequency_tables.h);
a diffusion U-Net's residual block with GroupNorm (torch 1.13 exports it as InstanceNormalization
between Reshapes, which the importer reads as one GroupNorm with the module's own affine); einsum
equations with an ellipsis, which torch's exporter passes through as written."""


def rotary_gpt_class(torch):
    nn = torch.nn

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    class RotaryAttention(nn.Module):
        """Causal attention with rotary position embeddings whose cos/sin tables the forward
        computes from an inverse-frequency buffer: "matmul" as Hugging Face's Llama does it (the
        frequencies times the position ids as a batched matmul), "outer" as positions[:, None] *
        inv_freq[None, :]."""

        def __init__(self, d, heads, idiom):
            super().__init__()
            self.heads, self.idiom = heads, idiom
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            hd = d // heads
            self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd)),
                                 persistent=False)

        def forward(self, x):
            b, t, c = x.shape
            split = lambda z: z.view(b, t, self.heads, c // self.heads).transpose(1, 2)  # noqa: E731
            q, k, v = (split(z) for z in self.qkv(x).split(c, dim=2))
            if self.idiom == "matmul":
                pos = torch.arange(t, device=x.device)[None, :]
                inv = self.inv_freq[None, :, None].float().expand(pos.shape[0], -1, 1)
                freqs = (inv @ pos[:, None, :].float()).transpose(1, 2)
            else:
                freqs = (torch.arange(t, device=x.device).float()[:, None] * self.inv_freq[None, :])[None]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos()[:, None], emb.sin()[:, None]
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            mask = torch.full((t, t), float("-inf"), device=x.device).triu(1)
            att = torch.softmax(q @ k.transpose(-2, -1) / (c // self.heads) ** 0.5 + mask, dim=-1)
            return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))

    class RotaryGpt(nn.Module):
        """A GPT without a learned position table: rotary embeddings in every attention."""

        def __init__(self, idiom, vocab=64, d=32, heads=4, layers=2):
            super().__init__()
            self.wte = nn.Embedding(vocab, d)
            self.attn = nn.ModuleList(RotaryAttention(d, heads, idiom) for _ in range(layers))
            self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                     for _ in range(layers))
            self.ln = nn.ModuleList(nn.LayerNorm(d) for _ in range(2 * layers + 1))
            self.lm_head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):  # (B, T) int64
            x = self.wte(idx)
            for i, (attn, mlp) in enumerate(zip(self.attn, self.mlp)):
                x = x + attn(self.ln[2 * i](x))
                x = x + mlp(self.ln[2 * i + 1](x))
            return self.lm_head(self.ln[-1](x))

    return RotaryGpt


def unet_block_class(torch):
    nn = torch.nn

    class UNetResBlock(nn.Module):
        """GroupNorm, SiLU and a 3x3 convolution, twice, beside a 1x1 skip convolution."""

        def __init__(self, cin=8, cout=16, groups=4):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(groups, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.n2, self.c2 = nn.GroupNorm(groups, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1)

        def forward(self, x):
            h = self.c1(nn.functional.silu(self.n1(x)))
            h = self.c2(nn.functional.silu(self.n2(h)))
            return self.skip(x) + h

    return UNetResBlock


def ellipsis_einsum_class(torch):
    nn = torch.nn

    class EllipsisEinsum(nn.Module):
        """Einsum with an ellipsis as users write it: a projection over any leading dims
        ("...d,de->...e"), per-head weights ("...hi,hio->...ho"), a batched matmul whose weight's
        leading dims of 1 broadcast over batch and time ("...ij,...jk->...ik"; onnxruntime refuses
        ellipses of different ranks, torch does not), and a sum over time keeping the rest
        ("bt...->b...")."""

        def __init__(self, d=16, heads=4, hd=6, out=6, classes=10):
            super().__init__()
            self.heads, self.hd = heads, hd
            self.w = nn.Parameter(torch.randn(d, heads * hd) / d ** 0.5)
            self.per_head = nn.Parameter(torch.randn(heads, hd, out) / hd ** 0.5)
            self.mix = nn.Parameter(torch.randn(1, 1, out, out) / out ** 0.5)  # broadcast over (B, T)
            self.head = nn.Linear(out, classes)

        def forward(self, x):  # (B, T, d)
            h = torch.relu(torch.einsum("...d,de->...e", x, self.w))
            h = h.view(h.shape[0], h.shape[1], self.heads, self.hd)
            g = torch.tanh(torch.einsum("...hi,hio->...ho", h, self.per_head))  # (B, T, heads, out)
            g = g + torch.einsum("...ij,...jk->...ik", g, self.mix)
            return self.head(torch.einsum("bt...->b...", g).mean(1))

    return EllipsisEinsum
